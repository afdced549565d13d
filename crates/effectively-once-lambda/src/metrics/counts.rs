//! What a batch's records came to ([`Counts`]): one count per outcome, each under the metric
//! name the invocation's line prints it as.

#[cfg(doc)]
use super::DRIVER_METRICS;
use crate::{Handled, RecordResult, Retry};

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
