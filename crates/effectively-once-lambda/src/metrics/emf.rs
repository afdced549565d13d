//! Where a function's metrics go ([`Emf`]: the namespace, the `Function` dimension, the
//! service and the version, read from the environment once) and how one EMF line is written:
//! serialised straight to text, leaving off what CloudWatch would not read.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::{
    Unit, FUNCTION_DIMENSION, FUNCTION_NAME_VAR, FUNCTION_VERSION_VAR, MAX_METRICS, NAMESPACE, NAMESPACE_VAR,
    PROPERTIES, SERVICE_VAR,
};

/// Where a function's metrics go and what they are tagged with: the namespace, the `Function`
/// dimension, the service and the version, read from the environment once (see the
/// [module docs](super)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emf {
    namespace: String,
    function: String,
    service: String,
    version: Option<String>,
}

impl Emf {
    /// The defaults for a function the code calls `function`, ignoring the environment: tests
    /// and local tools.
    pub fn named(function: impl Into<String>) -> Emf {
        Emf::from_env_with(&function.into(), |_| None)
    }

    /// Read from the process environment; `default_function` is the `Function` dimension (and
    /// the service) where Lambda's variable is absent (local runs).
    pub fn from_env(default_function: &str) -> Emf {
        Emf::from_env_with(default_function, |name| std::env::var(name).ok())
    }

    /// The same, with the variables read through `var` (`None` for unset; empty values count as
    /// unset). What `apps/payments/template.json` must agree with: given the environment a deployed
    /// function gets, [`namespace`](Self::namespace) and [`dimensions`](Self::dimensions) are
    /// what an alarm on its metrics names.
    ///
    /// ```
    /// use effectively_once_lambda::metrics::Emf;
    /// let env = |name: &str| match name {
    ///     "POWERTOOLS_METRICS_NAMESPACE" => Some("Shop".to_owned()),
    ///     "AWS_LAMBDA_FUNCTION_NAME" => Some("shop-prod-payments".to_owned()),
    ///     _ => None,
    /// };
    /// let emf = Emf::from_env_with("payments-consumer", env);
    /// assert_eq!(emf.namespace(), "Shop");
    /// assert_eq!(emf.dimensions(), [("Function", "shop-prod-payments")]);
    /// assert_eq!(emf.service(), "payments-consumer");
    /// ```
    pub fn from_env_with(default_function: &str, var: impl Fn(&str) -> Option<String>) -> Emf {
        let var = |name: &str| var(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        Emf {
            namespace: var(NAMESPACE_VAR).unwrap_or_else(|| NAMESPACE.to_owned()),
            function: var(FUNCTION_NAME_VAR).unwrap_or_else(|| default_function.to_owned()),
            service: var(SERVICE_VAR).unwrap_or_else(|| default_function.to_owned()),
            version: var(FUNCTION_VERSION_VAR),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The `Function` dimension's value: the deployed function's name.
    pub fn function(&self) -> &str {
        &self.function
    }

    /// The service.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The function's version, when Lambda gave it.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// Every metric's dimensions, as name and value: `Function` alone.
    pub fn dimensions(&self) -> [(&'static str, &str); 1] {
        [(FUNCTION_DIMENSION, self.function.as_str())]
    }

    /// One EMF line holding `metrics` (name, value, unit) under this namespace and dimension,
    /// with the `service` and `function_version` properties. A name given twice is written once,
    /// with its first value; a property's name (`Function`, `service`, ...) is not a metric's;
    /// a metric CloudWatch cannot read (a name that is empty, over 255 characters or holds a
    /// control character; a value that is not 0 or a magnitude from 2^-360 to 2^360) and
    /// metrics past the 100th are left off, with a warning.
    pub fn line<'a>(&self, timestamp_ms: u64, metrics: impl IntoIterator<Item = (&'a str, f64, Unit)>) -> String {
        self.line_with(timestamp_ms, metrics, None)
    }

    pub(super) fn line_with<'a>(
        &self,
        timestamp_ms: u64,
        metrics: impl IntoIterator<Item = (&'a str, f64, Unit)>,
        request_id: Option<&str>,
    ) -> String {
        // Each name once (a line's keys are unique; a property's name is not a metric's), only
        // what CloudWatch reads, and at most EMF's 100 a directive: one metric it cannot read
        // would lose the whole line.
        let mut unique: Vec<(&str, f64, Unit)> = Vec::new();
        let mut dropped = 0usize;
        for metric in metrics {
            let (name, value, _) = metric;
            if PROPERTIES.contains(&name) || unique.iter().any(|m| m.0 == name) {
                continue;
            }
            if unreadable(name, value).is_some() || unique.len() == MAX_METRICS {
                dropped += 1;
                continue;
            }
            unique.push(metric);
        }
        if dropped > 0 {
            tracing::warn!(dropped, "metrics CloudWatch cannot read, or past 100 a line, left off an EMF line");
        }
        let line = Line { emf: self, timestamp_ms, metrics: &unique, request_id: request_id.filter(|r| !r.is_empty()) };
        // Written straight to the text, not built as a `serde_json::Value` first: a tree costs
        // an allocation a key and a value, on every invocation. Nothing in a line can fail to
        // serialise (its keys are strings, its numbers finite or written as null).
        serde_json::to_string(&line).unwrap_or_default()
    }
}

/// One EMF line, serialised as it is written ([`Emf::line`]).
struct Line<'a> {
    emf: &'a Emf,
    timestamp_ms: u64,
    metrics: &'a [(&'a str, f64, Unit)],
    request_id: Option<&'a str>,
}

impl Serialize for Line<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let definitions: Vec<Definition<'_>> =
            self.metrics.iter().map(|&(name, _, unit)| Definition { name, unit: unit.as_str() }).collect();
        let directive =
            Directive { namespace: &self.emf.namespace, dimensions: [[FUNCTION_DIMENSION]], metrics: &definitions };
        let mut line = serializer.serialize_map(None)?;
        line.serialize_entry("_aws", &Aws { timestamp: self.timestamp_ms, cloud_watch_metrics: [directive] })?;
        line.serialize_entry(FUNCTION_DIMENSION, &self.emf.function)?;
        line.serialize_entry("service", &self.emf.service)?;
        if let Some(version) = &self.emf.version {
            line.serialize_entry("function_version", version)?;
        }
        if let Some(request_id) = self.request_id {
            line.serialize_entry("request_id", request_id)?;
        }
        for &(name, value, _) in self.metrics {
            line.serialize_entry(name, &Number(value))?;
        }
        line.end()
    }
}

#[derive(Serialize)]
struct Aws<'a> {
    #[serde(rename = "Timestamp")]
    timestamp: u64,
    #[serde(rename = "CloudWatchMetrics")]
    cloud_watch_metrics: [Directive<'a>; 1],
}

#[derive(Serialize)]
struct Directive<'a> {
    #[serde(rename = "Namespace")]
    namespace: &'a str,
    #[serde(rename = "Dimensions")]
    dimensions: [[&'static str; 1]; 1],
    #[serde(rename = "Metrics")]
    metrics: &'a [Definition<'a>],
}

#[derive(Serialize)]
struct Definition<'a> {
    #[serde(rename = "Name")]
    name: &'a str,
    #[serde(rename = "Unit")]
    unit: &'static str,
}

/// Why CloudWatch would not read a metric of this name and value, if it would not.
pub(super) fn unreadable(name: &str, value: f64) -> Option<&'static str> {
    if name.is_empty() || name.chars().count() > 255 || name.chars().any(char::is_control) {
        Some("EMF names are 1 to 255 printable characters")
    } else if !cloudwatch_takes(value) {
        Some("CloudWatch takes 0 and magnitudes from 2^-360 to 2^360 only")
    } else {
        None
    }
}

/// A whole number as an integer, anything else as a float.
struct Number(f64);

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value = self.0;
        if value.fract() == 0.0 && value.abs() < 9_007_199_254_740_992.0 {
            serializer.serialize_i64(value as i64)
        } else {
            serializer.serialize_f64(value)
        }
    }
}

/// Whether CloudWatch takes `value` as a metric value: 0, or a magnitude from 2^-360 to 2^360.
/// One value outside that makes the whole EMF line unreadable, the driver's counts with it.
pub(super) fn cloudwatch_takes(value: f64) -> bool {
    let limit = 2f64.powi(360);
    value == 0.0 || (value.is_finite() && value.abs() <= limit && value.abs() >= limit.recip())
}
