//! Metrics in CloudWatch Embedded Metric Format (EMF): one log line per invocation, which
//! CloudWatch turns into metrics with no API call from the function.
//!
//! # Where the metrics go, in an account shared by several stacks
//!
//! An [`Emf`] is read from the environment once, when the driver's options are built
//! (`sqs::Options::new`, `streams::Options::new`), never per record:
//!
//! | Variable | What | Default |
//! |---|---|---|
//! | `POWERTOOLS_METRICS_NAMESPACE` | the namespace | [`NAMESPACE`] (`EffectivelyOnce`) |
//! | `AWS_LAMBDA_FUNCTION_NAME` (set by Lambda) | the `Function` dimension | the name the binary passes (`payments-consumer`) |
//! | `POWERTOOLS_SERVICE_NAME` | the `service` property | that same binary name |
//! | `AWS_LAMBDA_FUNCTION_VERSION` (set by Lambda) | the `function_version` property and log field | none |
//!
//! Every metric carries one dimension, `Function`, set to the deployed function's name, so two
//! stacks in one account never add to each other's metrics, and an alarm reads
//! `{Namespace, MetricName, Function = <function name>}`. The service is a property (searchable
//! in CloudWatch Logs Insights), not a dimension: a second dimension would make another metric,
//! which the alarms on `Function` alone would not see.
//!
//! # What each invocation's line holds
//!
//! `ColdStart` (1 on the sandbox's first invocation, 0 after), one count per outcome
//! (`Applied`, `Duplicate`, `Rejected`, `Skipped`, `InProgressElsewhere`, `Failed`, and
//! `PermanentFailures`, the part of `Failed` no retry changes: [`Retry::Never`]),
//! every one of them on every line, zeros included; then the handler's own metrics, added through [`Metrics`] while the batch
//! ran; and the properties `service`, `function_version` and `request_id`.
//!
//! # A handler's own metrics
//!
//! Clone the options' [`Metrics`] handle into the handler and [`add`](Metrics::add) to it; the
//! driver sums what was added during the invocation and prints it on the same line, under the
//! same namespace and dimension.
//!
//! ```
//! use effectively_once_lambda::events::{Context, SqsMessage};
//! use effectively_once_lambda::metrics::{Metrics, Unit};
//! use effectively_once_lambda::{sqs, Handled, Handler, RecordResult};
//!
//! struct Orders {
//!     metrics: Metrics,
//! }
//!
//! impl Handler<SqsMessage> for Orders {
//!     async fn handle(&self, message: &SqsMessage, _context: &Context) -> RecordResult {
//!         // ... place the order ...
//!         self.metrics.add("OrdersPlaced", 1);
//!         self.metrics.add_with_unit("OrderBytes", message.body.as_deref().unwrap_or("").len() as f64, Unit::Bytes);
//!         Ok(Handled::Applied)
//!     }
//! }
//!
//! let options = sqs::Options::new("orders");
//! let handler = Orders { metrics: options.metrics.clone() };
//! // lambda_runtime::run(service_fn(|event| async { Ok::<_, Error>(sqs::process(&handler, event, &options).await) }))
//! # let _ = (handler, options);
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::{Handled, RecordResult, Retry};

/// The default metric namespace.
pub const NAMESPACE: &str = "EffectivelyOnce";
/// The variable naming the namespace (Powertools' name).
pub const NAMESPACE_VAR: &str = "POWERTOOLS_METRICS_NAMESPACE";
/// The variable naming the service (Powertools' name).
pub const SERVICE_VAR: &str = "POWERTOOLS_SERVICE_NAME";
/// The variable Lambda sets to the deployed function's name.
pub const FUNCTION_NAME_VAR: &str = "AWS_LAMBDA_FUNCTION_NAME";
/// The variable Lambda sets to the function's version (`$LATEST`, `3`).
pub const FUNCTION_VERSION_VAR: &str = "AWS_LAMBDA_FUNCTION_VERSION";
/// The one dimension every metric carries.
pub const FUNCTION_DIMENSION: &str = "Function";

/// The metrics the drivers print on every invocation's line: custom metrics may not reuse them.
pub const DRIVER_METRICS: [&str; 9] = [
    "ColdStart",
    "Applied",
    "Duplicate",
    "Rejected",
    "Skipped",
    "InProgressElsewhere",
    "Failed",
    "PermanentFailures",
    "Parked",
];

/// Keys of the line that are not metrics: custom metrics may not reuse them either.
const PROPERTIES: [&str; 5] = ["_aws", FUNCTION_DIMENSION, "service", "function_version", "request_id"];

/// EMF's limit of metrics per directive.
const MAX_METRICS: usize = 100;

/// A metric's unit (CloudWatch's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Unit {
    /// `Count`.
    #[default]
    Count,
    /// `Seconds`.
    Seconds,
    /// `Milliseconds`.
    Milliseconds,
    /// `Bytes`.
    Bytes,
    /// `Percent`.
    Percent,
    /// `None`: a plain number.
    None,
}

impl Unit {
    /// CloudWatch's name of the unit.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Seconds => "Seconds",
            Unit::Milliseconds => "Milliseconds",
            Unit::Bytes => "Bytes",
            Unit::Percent => "Percent",
            Unit::None => "None",
        }
    }
}

/// Where a function's metrics go and what they are tagged with: the namespace, the `Function`
/// dimension, the service and the version, read from the environment once (see the
/// [module docs](self)).
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

    fn line_with<'a>(
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
fn unreadable(name: &str, value: f64) -> Option<&'static str> {
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

/// What a batch's records came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Effects applied now.
    pub applied: u64,
    /// Duplicates: nothing done.
    pub duplicate: u64,
    /// Business rejections, recorded.
    pub rejected: u64,
    /// Refused because another attempt held the key; retried.
    pub in_progress: u64,
    /// Failed (retryable or permanent, or not started before the deadline); reported failed.
    pub failed: u64,
    /// Of `failed`, those no retry changes ([`Retry::Never`]).
    pub permanent: u64,
    /// Not for this handler.
    pub skipped: u64,
    /// Of `permanent`, those a stream trigger parked ([`crate::park`]) before its position
    /// passed them.
    pub parked: u64,
}

/// Two batches' counts together (a run of several invocations, say).
impl std::ops::Add for Counts {
    type Output = Counts;

    fn add(self, other: Counts) -> Counts {
        Counts {
            applied: self.applied + other.applied,
            duplicate: self.duplicate + other.duplicate,
            rejected: self.rejected + other.rejected,
            in_progress: self.in_progress + other.in_progress,
            failed: self.failed + other.failed,
            permanent: self.permanent + other.permanent,
            skipped: self.skipped + other.skipped,
            parked: self.parked + other.parked,
        }
    }
}

impl Counts {
    /// Counts one record's result.
    pub fn add(&mut self, result: &RecordResult) {
        match result {
            Ok(Handled::Applied) => self.applied += 1,
            Ok(Handled::Duplicate) => self.duplicate += 1,
            Ok(Handled::Rejected) => self.rejected += 1,
            Ok(Handled::Skipped) => self.skipped += 1,
            Err(error) if error.retry == Retry::InProgressElsewhere => self.in_progress += 1,
            Err(error) => {
                self.failed += 1;
                if error.retry == Retry::Never {
                    self.permanent += 1;
                }
            }
        }
    }

    /// Every count under its metric name (the [`DRIVER_METRICS`] after `ColdStart`), zeros
    /// included: a metric that is absent when zero cannot tell "none" from "not reporting".
    pub fn metrics(&self) -> [(&'static str, u64); 8] {
        [
            ("Applied", self.applied),
            ("Duplicate", self.duplicate),
            ("Rejected", self.rejected),
            ("Skipped", self.skipped),
            ("InProgressElsewhere", self.in_progress),
            ("Failed", self.failed),
            ("PermanentFailures", self.permanent),
            ("Parked", self.parked),
        ]
    }
}

/// Whether an invocation of this process has begun: the first one is the sandbox's cold start.
static INVOKED: AtomicBool = AtomicBool::new(false);

/// `true` for the process's first invocation, `false` after.
pub(crate) fn take_cold_start() -> bool {
    !INVOKED.swap(true, Ordering::Relaxed)
}

/// The handle through which a handler adds metrics of its own, and the [`Emf`] target every
/// line of the function goes to. Clones share what was added; the driver takes it at the end
/// of each invocation and prints it on that invocation's line. A handler that spawns tasks may
/// add from them, but only what was added before the batch ended is in its line.
#[derive(Debug, Clone)]
pub struct Metrics {
    emf: Arc<Emf>,
    added: Arc<Mutex<BTreeMap<String, (f64, Unit)>>>,
}

impl Metrics {
    /// A handle printing to `emf`.
    pub fn new(emf: Emf) -> Self {
        Metrics { emf: Arc::new(emf), added: Arc::default() }
    }

    /// Where the lines go.
    pub fn emf(&self) -> &Emf {
        &self.emf
    }

    /// Adds `value` to the count `name` for this invocation (unit `Count`).
    pub fn add(&self, name: &str, value: impl Into<f64>) {
        self.add_with_unit(name, value, Unit::Count);
    }

    /// Adds `value` to `name` for this invocation: values added under one name are summed, in
    /// the unit of the first. A name the drivers use (`Applied`, `ColdStart`, ...), a line's
    /// property (`Function`, `service`, ...), an empty name or one over 255 characters, a value
    /// that is not finite, and names past EMF's 100 metrics a line are dropped, with a warning.
    pub fn add_with_unit(&self, name: &str, value: impl Into<f64>, unit: Unit) {
        let value = value.into();
        let refused = if DRIVER_METRICS.contains(&name) || PROPERTIES.contains(&name) {
            Some("the name is the driver's")
        } else {
            unreadable(name, value)
        };
        let mut added = self.added.lock().unwrap_or_else(|p| p.into_inner());
        let refused = refused.or_else(|| {
            (!added.contains_key(name) && added.len() + DRIVER_METRICS.len() >= MAX_METRICS)
                .then_some("EMF takes at most 100 metrics a line")
        });
        let refused = refused.or_else(|| {
            let sum = added.get(name).map_or(value, |(sum, _)| sum + value);
            (!cloudwatch_takes(sum)).then_some("the sum would leave the range CloudWatch takes")
        });
        if let Some(why) = refused {
            drop(added);
            tracing::warn!(metric = name, why, "custom metric dropped");
            return;
        }
        added.entry(name.to_owned()).and_modify(|(sum, _)| *sum += value).or_insert((value, unit));
    }

    /// What was added since the last call, emptied.
    fn take(&self) -> BTreeMap<String, (f64, Unit)> {
        std::mem::take(&mut *self.added.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The invocation's line: `ColdStart`, every count, then what the handler added.
    pub(crate) fn invocation_line(
        &self,
        counts: &Counts,
        cold_start: bool,
        request_id: &str,
        timestamp_ms: u64,
    ) -> String {
        let added = self.take();
        let driver = std::iter::once(("ColdStart", u64::from(cold_start)))
            .chain(counts.metrics())
            .map(|(name, value)| (name, value as f64, Unit::Count));
        let custom = added.iter().map(|(name, (value, unit))| (name.as_str(), *value, *unit));
        self.emf.line_with(timestamp_ms, driver.chain(custom), Some(request_id))
    }

    /// Ends an invocation: prints its line on standard output, where Lambda's log capture picks
    /// it up, when `publish`; otherwise drops what was added.
    pub(crate) fn flush(&self, counts: &Counts, cold_start: bool, request_id: &str, publish: bool) {
        if publish {
            println!("{}", self.invocation_line(counts, cold_start, request_id, crate::now_ms()));
        } else {
            self.take();
        }
    }
}

/// Starts an invocation: takes the cold start, and opens the span every log line of the
/// invocation is in (`request_id`, `function_name`, `function_version`, `cold_start`).
pub(crate) fn invocation_span(emf: &Emf, context: &lambda_runtime::Context) -> (bool, tracing::Span) {
    let cold_start = take_cold_start();
    let span = tracing::info_span!(
        "invocation",
        request_id = context.request_id.as_str(),
        function_name = emf.function(),
        function_version = tracing::field::Empty,
        cold_start,
    );
    if let Some(version) = emf.version() {
        span.record("function_version", version);
    }
    (cold_start, span)
}

/// Whether CloudWatch takes `value` as a metric value: 0, or a magnitude from 2^-360 to 2^360.
/// One value outside that makes the whole EMF line unreadable, the driver's counts with it.
fn cloudwatch_takes(value: f64) -> bool {
    let limit = 2f64.powi(360);
    value == 0.0 || (value.is_finite() && value.abs() <= limit && value.abs() >= limit.recip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordError;
    use serde_json::{json, Value};

    fn parse(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn every_disposition_is_counted_and_printed_with_the_cold_start() {
        let mut c = Counts::default();
        for r in [
            Ok(Handled::Applied),
            Ok(Handled::Duplicate),
            Ok(Handled::Duplicate),
            Ok(Handled::Rejected),
            Ok(Handled::Skipped),
            Err(RecordError::in_progress_elsewhere("x")),
            Err(RecordError::permanent("bad")),
            Err(RecordError::retryable("later")),
        ] {
            c.add(&r);
        }
        let metrics = Metrics::new(Emf::named("payments"));
        let line = parse(&metrics.invocation_line(&c, true, "req-1", 1));
        let expected = [
            ("ColdStart", 1),
            ("Applied", 1),
            ("Duplicate", 2),
            ("Rejected", 1),
            ("Skipped", 1),
            ("InProgressElsewhere", 1),
            ("Failed", 2),
            ("PermanentFailures", 1),
        ];
        for (name, value) in expected {
            assert_eq!(line[name], value, "{name}");
        }
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], NAMESPACE);
        assert_eq!(directive["Dimensions"], json!([["Function"]]));
        let names: Vec<&str> =
            directive["Metrics"].as_array().unwrap().iter().map(|m| m["Name"].as_str().unwrap()).collect();
        assert_eq!(names, DRIVER_METRICS);
        assert_eq!(
            (&line["Function"], &line["service"], &line["request_id"]),
            (&json!("payments"), &json!("payments"), &json!("req-1"))
        );
        assert_eq!(parse(&metrics.invocation_line(&Counts::default(), false, "req-2", 2))["ColdStart"], 0);
    }

    #[test]
    fn the_environment_names_the_namespace_the_function_and_the_service() {
        let env = |name: &str| {
            Some(
                match name {
                    NAMESPACE_VAR => "Shop",
                    FUNCTION_NAME_VAR => "shop-prod-payments",
                    SERVICE_VAR => "payments",
                    FUNCTION_VERSION_VAR => "7",
                    _ => return None,
                }
                .to_owned(),
            )
        };
        let emf = Emf::from_env_with("payments-consumer", env);
        assert_eq!(
            (emf.namespace(), emf.function(), emf.service(), emf.version()),
            ("Shop", "shop-prod-payments", "payments", Some("7"))
        );
        let line = parse(&emf.line(5, [("EmailBlocked", 1.0, Unit::Count)]));
        assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Shop");
        assert_eq!(line["Function"], "shop-prod-payments");
        assert_eq!(line["function_version"], "7");
        assert_eq!(line["EmailBlocked"], 1);
        // Empty values are unset.
        let emf = Emf::from_env_with("relay", |_| Some(" ".into()));
        assert_eq!(
            (emf.namespace(), emf.function(), emf.service(), emf.version()),
            (NAMESPACE, "relay", "relay", None)
        );
    }

    #[test]
    fn a_line_names_each_metric_once_and_never_a_property() {
        let emf = Emf::named("orders");
        let text = emf.line(9, [("Sent", 1.0, Unit::Count), ("service", 5.0, Unit::Count), ("Sent", 2.0, Unit::Count)]);
        assert_eq!(text.matches("\"Sent\"").count(), 2, "one definition and one value: {text}");
        let line = parse(&text);
        assert_eq!((&line["Sent"], &line["service"]), (&json!(1), &json!("orders")));
        let names: Vec<&str> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Sent"]);
        assert_eq!(line["_aws"]["Timestamp"], 9);
        assert_eq!(parse(&emf.line(1, [("Ratio", 0.25, Unit::Percent)]))["Ratio"], 0.25);
    }

    #[test]
    fn custom_metrics_are_summed_and_emptied_each_invocation_and_reserved_names_dropped() {
        let metrics = Metrics::new(Emf::named("orders"));
        let handle = metrics.clone();
        handle.add("OrdersPlaced", 1);
        handle.add("OrdersPlaced", 2);
        handle.add_with_unit("Latency", 1.5, Unit::Milliseconds);
        handle.add("Applied", 100);
        handle.add("request_id", 1);
        handle.add("", 1);
        handle.add("Nan", f64::NAN);
        let line = parse(&metrics.invocation_line(&Counts::default(), false, "r", 1));
        assert_eq!(line["OrdersPlaced"], 3);
        assert_eq!(line["Latency"], 1.5);
        assert_eq!(line["Applied"], 0, "a custom metric cannot overwrite the driver's");
        assert_eq!(line["request_id"], "r");
        let units: Vec<_> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .skip(DRIVER_METRICS.len())
            .cloned()
            .collect();
        assert_eq!(
            units,
            [json!({"Name": "Latency", "Unit": "Milliseconds"}), json!({"Name": "OrdersPlaced", "Unit": "Count"})]
        );
        let next = parse(&metrics.invocation_line(&Counts::default(), false, "r", 2));
        assert!(next.get("OrdersPlaced").is_none(), "emptied by the flush");
        for i in 0..200 {
            metrics.add(&format!("M{i}"), 1);
        }
        let full = parse(&metrics.invocation_line(&Counts::default(), false, "r", 3));
        assert_eq!(full["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap().len(), MAX_METRICS);
    }
}
