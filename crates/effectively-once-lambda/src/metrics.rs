//! Counts per batch, printed as one CloudWatch Embedded Metric Format line: CloudWatch turns
//! the log line into metrics with no API call from the function.

use serde_json::json;

use crate::{Disposition, RecordResult, Retry};

/// The metric namespace.
pub const NAMESPACE: &str = "EffectivelyOnce";

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
    /// Not for this handler.
    pub skipped: u64,
}

impl Counts {
    /// Counts one record's result.
    pub fn add(&mut self, result: &RecordResult) {
        match result {
            Ok(Disposition::Applied) => self.applied += 1,
            Ok(Disposition::Duplicate) => self.duplicate += 1,
            Ok(Disposition::Rejected) => self.rejected += 1,
            Ok(Disposition::Skipped) => self.skipped += 1,
            Err(e) if e.retry == Retry::InProgressElsewhere => self.in_progress += 1,
            Err(_) => self.failed += 1,
        }
    }

    /// The EMF line for these counts.
    pub fn emf(&self, function: &str, timestamp_ms: u64) -> String {
        let metric = |name: &str| json!({"Name": name, "Unit": "Count"});
        json!({
            "_aws": {
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [["Function"]],
                    "Metrics": [metric("Applied"), metric("Duplicate"), metric("Rejected"),
                                metric("InProgressElsewhere"), metric("Failed")],
                }],
            },
            "Function": function,
            "Applied": self.applied,
            "Duplicate": self.duplicate,
            "Rejected": self.rejected,
            "InProgressElsewhere": self.in_progress,
            "Failed": self.failed,
        })
        .to_string()
    }

    /// Prints the EMF line on standard output, where Lambda's log capture picks it up.
    pub fn publish(&self, function: &str) {
        println!("{}", self.emf(function, crate::now_ms()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordError;

    #[test]
    fn counts_and_formats() {
        let mut c = Counts::default();
        for r in [
            Ok(Disposition::Applied),
            Ok(Disposition::Duplicate),
            Ok(Disposition::Duplicate),
            Ok(Disposition::Rejected),
            Err(RecordError::in_progress_elsewhere("x")),
            Err(RecordError::permanent("bad")),
        ] {
            c.add(&r);
        }
        let line: serde_json::Value = serde_json::from_str(&c.emf("payments", 1)).unwrap();
        assert_eq!(line["Applied"], 1);
        assert_eq!(line["Duplicate"], 2);
        assert_eq!(line["Rejected"], 1);
        assert_eq!(line["InProgressElsewhere"], 1);
        assert_eq!(line["Failed"], 1);
        assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap().len(), 5);
    }
}
