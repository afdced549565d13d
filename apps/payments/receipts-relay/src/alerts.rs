//! Conditions an operator must see, beside the batch counts the stream driver prints: each is
//! logged at error level and printed at once as its own CloudWatch Embedded Metric Format line,
//! in the drivers' namespace and under their `Function` dimension (both from the environment:
//! [`Emf::from_env`]), so an alarm can watch it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use effectively_once_lambda::metrics::{Emf, Unit};

/// A condition raised for an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Alert {
    /// The email provider refuses this account or configuration (sending paused, account
    /// suspended, sender not verified, ...): receipts are held back and retried until it is
    /// cleared, and reach the stream's failure destination if it lasts.
    EmailBlocked,
    /// A receipt may or may not have gone out, and is not resent (at most once): its row is
    /// marked `AMBIGUOUS` for an operator to check against the provider's sending records.
    EmailAmbiguous,
    /// A receipt was not sent: its address is not the account's registered one and the
    /// allow-list does not admit it. Its row is marked `REFUSED`. A producer naming addresses
    /// it should not (or an allow-list missing a customer's domain).
    ReceiptRefused,
    /// A receipt was not sent: its account had its allowance of receipts for the window. Its
    /// row is marked `RATE_LIMITED`. A producer flooding one account (or a limit set too low).
    ReceiptRateLimited,
}

impl Alert {
    const ALL: [Alert; 4] =
        [Alert::EmailBlocked, Alert::EmailAmbiguous, Alert::ReceiptRefused, Alert::ReceiptRateLimited];

    /// The metric's name.
    pub fn metric(self) -> &'static str {
        match self {
            Alert::EmailBlocked => "EmailBlocked",
            Alert::EmailAmbiguous => "EmailAmbiguous",
            Alert::ReceiptRefused => "ReceiptRefused",
            Alert::ReceiptRateLimited => "ReceiptRateLimited",
        }
    }

    /// The EMF line counting one occurrence, to `emf`'s namespace and `Function` dimension
    /// (for the deployed relay: [`Alerts::from_env_with`]`(env).emf()`).
    pub fn emf(self, emf: &Emf, timestamp_ms: u64) -> String {
        emf.line(timestamp_ms, [(self.metric(), 1.0, Unit::Count)])
    }
}

/// Alerts raised so far, counted (for tests and the local tools) and published as they happen.
/// Clones share the counts.
#[derive(Debug, Clone)]
pub struct Alerts {
    emf: Arc<Emf>,
    publish: bool,
    counts: Arc<[AtomicU64; Alert::ALL.len()]>,
}

impl Alerts {
    /// Alerts published to `emf` (say, the drivers' `options.metrics.emf().clone()`, so both read
    /// the environment once), or [`Emf::named`] in a test.
    pub fn new(emf: Emf) -> Self {
        Alerts { emf: Arc::new(emf), publish: true, counts: Arc::default() }
    }

    /// Alerts published where the environment says ([`Emf::from_env`], the relay's
    /// [`FUNCTION`](crate::FUNCTION) name by default).
    pub fn from_env() -> Self {
        Alerts::new(Emf::from_env(crate::FUNCTION))
    }

    /// The same, with the variables read through `var`. `apps/payments/template.json`'s alarms on the
    /// alerts name `from_env_with(env).emf()`'s namespace and dimensions, given the environment
    /// the deployed relay gets.
    ///
    /// ```
    /// use receipts_relay::{Alert, Alerts};
    /// let env = |name: &str| match name {
    ///     "POWERTOOLS_METRICS_NAMESPACE" => Some("Shop".to_owned()),
    ///     "AWS_LAMBDA_FUNCTION_NAME" => Some("shop-prod-relay".to_owned()),
    ///     _ => None,
    /// };
    /// let emf = Alerts::from_env_with(env).emf().clone();
    /// assert_eq!((emf.namespace(), emf.dimensions()), ("Shop", [("Function", "shop-prod-relay")]));
    /// let line: serde_json::Value = serde_json::from_str(&Alert::EmailBlocked.emf(&emf, 0)).unwrap();
    /// assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Shop");
    /// assert_eq!(line["Function"], "shop-prod-relay");
    /// assert_eq!(line["EmailBlocked"], 1);
    /// ```
    pub fn from_env_with(var: impl Fn(&str) -> Option<String>) -> Self {
        Alerts::new(Emf::from_env_with(crate::FUNCTION, var))
    }

    /// Where the alerts are published.
    pub fn emf(&self) -> &Emf {
        &self.emf
    }

    /// Whether to print the EMF lines (default true); the local tools, which run thousands of
    /// records in one process, count without printing, as they do for the batch metrics.
    pub fn published(mut self, publish: bool) -> Self {
        self.publish = publish;
        self
    }

    /// How many times `alert` was raised.
    pub fn count(&self, alert: Alert) -> u64 {
        self.counts[alert as usize].load(Ordering::Relaxed)
    }

    /// Raises `alert`: an error log line with `detail` (no personal data: callers pass redacted
    /// text) and an EMF line on standard output, where Lambda's log capture picks it up.
    pub fn raise(&self, alert: Alert, detail: &str) {
        self.counts[alert as usize].fetch_add(1, Ordering::Relaxed);
        tracing::error!(alert = alert.metric(), detail, "operator check");
        if !self.publish {
            return;
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        println!("{}", alert.emf(&self.emf, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_alert_is_an_emf_metric_in_the_drivers_namespace() {
        for alert in Alert::ALL {
            let line: serde_json::Value = serde_json::from_str(&alert.emf(&Emf::named("receipts-relay"), 7)).unwrap();
            let directive = &line["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(directive["Namespace"], effectively_once_lambda::metrics::NAMESPACE);
            assert_eq!(directive["Dimensions"], serde_json::json!([["Function"]]));
            assert_eq!(directive["Metrics"][0]["Name"], alert.metric());
            assert_eq!(line[alert.metric()], 1);
            assert_eq!(line["Function"], "receipts-relay");
            assert_eq!(line["_aws"]["Timestamp"], 7);
        }
    }

    #[test]
    fn alerts_follow_the_environment_namespace_and_function_name() {
        let env = |name: &str| match name {
            "POWERTOOLS_METRICS_NAMESPACE" => Some("Stack-B".to_owned()),
            "AWS_LAMBDA_FUNCTION_NAME" => Some("stack-b-ReceiptsRelay-1X".to_owned()),
            "POWERTOOLS_SERVICE_NAME" => Some("receipts".to_owned()),
            _ => None,
        };
        let alerts = Alerts::from_env_with(env);
        assert_eq!(alerts.emf().dimensions(), [("Function", "stack-b-ReceiptsRelay-1X")]);
        for alert in Alert::ALL {
            let line: serde_json::Value = serde_json::from_str(&alert.emf(alerts.emf(), 7)).unwrap();
            assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Stack-B");
            assert_eq!(line["Function"], "stack-b-ReceiptsRelay-1X");
            assert_eq!(line["service"], "receipts");
        }
    }

    #[test]
    fn counts_are_shared_by_clones_published_or_not() {
        let alerts = Alerts::new(Emf::named("f")).published(false);
        alerts.clone().raise(Alert::EmailBlocked, "paused");
        assert_eq!((alerts.count(Alert::EmailBlocked), alerts.count(Alert::EmailAmbiguous)), (1, 0));
    }
}
