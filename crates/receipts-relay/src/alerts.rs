//! Conditions an operator must see, beside the batch counts the stream driver prints: each is
//! logged at error level and printed as its own CloudWatch Embedded Metric Format line, in the
//! drivers' namespace and `Function` dimension, so an alarm can watch it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

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
}

impl Alert {
    const ALL: [Alert; 2] = [Alert::EmailBlocked, Alert::EmailAmbiguous];

    /// The metric's name.
    pub fn metric(self) -> &'static str {
        match self {
            Alert::EmailBlocked => "EmailBlocked",
            Alert::EmailAmbiguous => "EmailAmbiguous",
        }
    }

    /// The EMF line counting one occurrence.
    pub fn emf(self, function: &str, timestamp_ms: u64) -> String {
        json!({
            "_aws": {
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": effectively_once_lambda::metrics::NAMESPACE,
                    "Dimensions": [["Function"]],
                    "Metrics": [{"Name": self.metric(), "Unit": "Count"}],
                }],
            },
            "Function": function,
            self.metric(): 1,
        })
        .to_string()
    }
}

/// Alerts raised so far, counted (for tests and the local tools) and published as they happen.
/// Clones share the counts.
#[derive(Debug, Clone)]
pub struct Alerts {
    function: String,
    publish: bool,
    counts: Arc<[AtomicU64; Alert::ALL.len()]>,
}

impl Alerts {
    /// Alerts under a function's name (the metrics' `Function` dimension), published.
    pub fn new(function: impl Into<String>) -> Self {
        Alerts { function: function.into(), publish: true, counts: Arc::default() }
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
        println!("{}", alert.emf(&self.function, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_alert_is_an_emf_metric_in_the_drivers_namespace() {
        for alert in Alert::ALL {
            let line: serde_json::Value = serde_json::from_str(&alert.emf("receipts-relay", 7)).unwrap();
            let directive = &line["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(directive["Namespace"], effectively_once_lambda::metrics::NAMESPACE);
            assert_eq!(directive["Metrics"][0]["Name"], alert.metric());
            assert_eq!(line[alert.metric()], 1);
            assert_eq!(line["Function"], "receipts-relay");
            assert_eq!(line["_aws"]["Timestamp"], 7);
        }
    }

    #[test]
    fn counts_are_shared_by_clones_published_or_not() {
        let alerts = Alerts::new("f").published(false);
        alerts.clone().raise(Alert::EmailBlocked, "paused");
        assert_eq!((alerts.count(Alert::EmailBlocked), alerts.count(Alert::EmailAmbiguous)), (1, 0));
    }
}
