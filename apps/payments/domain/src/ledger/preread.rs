//! The pre-read of a batch's records: when a batch may hold duplicates this sandbox does not
//! remember, one `BatchGetItem` of their records answers them before the transaction, which
//! would otherwise be cancelled by them and sent again without them.
//!
//! One mode: the records the trigger says may be redeliveries ([`Delivery::MayBeRedelivery`]:
//! an SQS `ApproximateReceiveCount` above 1) that this sandbox does not remember, and every
//! record of every batch while this sandbox's recent batches met duplicates it did not remember
//! at least [`BREAK_EVEN`] of the time. `make bench` measured it against never, redeliveries
//! only and always (docs/bench.md, "Duplicates where they really land"): the least write units
//! of the three that keep first deliveries at one request, within 2 % of always.
//!
//! # The cost arithmetic
//!
//! For a batch of `n` event ids this sandbox does not remember (the docs' cost model, items
//! under 1 KB, on-demand prices, where a write request unit costs five read request units):
//!
//! - a pre-read is one request per 100 ids and `n / 2` read units (eventually consistent):
//!   `n / 10` write units' worth;
//! - a cancelled transaction bills one write unit per action, at least two per event (its
//!   record and its entry, beside a balance update per account), so at least `2 n`, and one
//!   request more (the rest sent again).
//!
//! So a pre-read pays for itself in units when the chance that a batch holds a duplicate this
//! sandbox did not remember is above `(n / 10) / (2 n)` = 1/20, whatever `n`; in requests it
//! never does (one request always, against one with that chance). A batch reads everything
//! when the running estimate of that chance is at least [`BREAK_EVEN`] (1/16, the break even
//! rounded to a power of two), and the redeliveries whatever it is.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use effectively_once::{ErrorKind, Outcome};
use effectively_once_dynamodb::Member;

use super::{Ledger, Posting};
use crate::payment::PaymentEvent;

/// What a batch's trigger says about one of its records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Delivery {
    /// Nothing: a first delivery as far as the trigger knows (or it cannot tell).
    #[default]
    Unknown,
    /// The record was delivered before (an SQS `ApproximateReceiveCount` above 1): its event
    /// may already be recorded, by this sandbox or another.
    MayBeRedelivery,
}

/// What a batch's trigger says about each of its records: one [`Delivery`] for them all (a
/// [`Delivery`] converts into this), or one per record, in batch order (a record past the end
/// of the list is [`Delivery::Unknown`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deliveries {
    /// The same for every record.
    All(Delivery),
    /// One per record, in batch order.
    Each(Vec<Delivery>),
}

impl Deliveries {
    /// What the trigger says about the record at `position`.
    pub fn of(&self, position: usize) -> Delivery {
        match self {
            Deliveries::All(delivery) => *delivery,
            Deliveries::Each(each) => each.get(position).copied().unwrap_or_default(),
        }
    }
}

impl Default for Deliveries {
    fn default() -> Self {
        Deliveries::All(Delivery::Unknown)
    }
}

impl From<Delivery> for Deliveries {
    fn from(delivery: Delivery) -> Self {
        Deliveries::All(delivery)
    }
}

impl From<Vec<Delivery>> for Deliveries {
    fn from(each: Vec<Delivery>) -> Self {
        Deliveries::Each(each)
    }
}

/// The fixed-point scale of [`Estimate`]: 1.0.
const SCALE: u32 = 1 << 16;
/// The estimate's weight of the latest batch: `1 / 2^WEIGHT_SHIFT` = 1/8, so one batch that met
/// a duplicate from elsewhere raises it from 0 to 1/8, above the break even, for the next six
/// batches (`(7/8)^6 / 8 < 1/16`), and a steady rate is followed within a dozen batches.
const WEIGHT_SHIFT: u32 = 3;
/// The estimated chance that a batch meets a duplicate from elsewhere above which a batch
/// reads every record first: 1/16 (the break even, 1/20, rounded to a power of two).
pub const BREAK_EVEN: f64 = BREAK_EVEN_FIXED as f64 / SCALE as f64;
const BREAK_EVEN_FIXED: u32 = SCALE / 16;

/// A running estimate of the chance that a batch holds a duplicate this sandbox did not
/// remember: an exponentially weighted mean of one bit per batch, in fixed point. Shared by a
/// ledger's clones, as its remembered answers are.
#[derive(Debug, Clone, Default)]
pub(super) struct Estimate(Arc<AtomicU32>);

impl Estimate {
    fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }

    /// Counts a batch that met (or not) a duplicate from elsewhere. Two batches of one sandbox
    /// finishing at once may lose one of their updates: an estimate, not a count.
    fn observe(&self, met: bool) {
        let now = self.get();
        let next = now - (now >> WEIGHT_SHIFT) + if met { SCALE >> WEIGHT_SHIFT } else { 0 };
        self.0.store(next, Ordering::Relaxed);
    }
}

/// Which of a batch's records a pre-read reads (of those this sandbox does not remember).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reads {
    /// Those the trigger says may be redeliveries: a first delivery in the batch of one is not
    /// read for it, nor is the batch read at all when every redelivered id is remembered.
    Redelivered,
    /// Every one.
    All,
}

/// Which records a batch reads first, by the running estimate.
fn decide(estimate: u32) -> Reads {
    if estimate >= BREAK_EVEN_FIXED {
        Reads::All
    } else {
        Reads::Redelivered
    }
}

impl Reads {
    /// Whether a record the trigger says this of is read first.
    pub(super) fn reads(self, delivery: Delivery) -> bool {
        match self {
            Reads::Redelivered => delivery == Delivery::MayBeRedelivery,
            Reads::All => true,
        }
    }
}

impl Ledger {
    /// Which of a batch's records this ledger reads first now, by its estimate:
    /// each is marked [`Member::read_first`], and `commit_batch` reads them in one
    /// eventually consistent `BatchGetItem` (a record found that blocks a claim answers its
    /// duplicate with no write; a failed read reads nothing, and the transaction decides). The
    /// records of a commit cut at the deadline are read first by `commit_batch` itself.
    pub(super) fn reads(&self) -> Reads {
        decide(self.estimate.get())
    }

    /// Counts whether a batch met a duplicate this sandbox did not remember: a replay or key
    /// reuse, answered by the read first or by the transaction, of a member `sent` to
    /// `commit_batch` unanswered whose key no earlier member had (a later copy of an id in the
    /// batch is answered from the first, and says nothing of other sandboxes). A batch answered
    /// from memory alone counts nothing.
    pub(super) fn observe_batch(
        &self,
        members: &[Member<'_, PaymentEvent>],
        sent: &[bool],
        posted: &[Result<Outcome<Posting>, effectively_once::Error>],
    ) {
        if !sent.contains(&true) {
            return;
        }
        let mut earlier = HashSet::with_capacity(members.len());
        let met = members.iter().zip(sent).zip(posted).filter(|((_, sent), _)| **sent).any(|((member, _), result)| {
            let outside = match result {
                Ok(outcome) => outcome.is_replay(),
                Err(error) => error.kind() == ErrorKind::KeyReused,
            };
            let first = earlier.insert(member.key.as_str());
            outside && first
        });
        self.estimate.observe(met);
    }

    /// The running estimate that a batch compares with [`BREAK_EVEN`], from 0 to 1.
    pub fn outside_duplicate_estimate(&self) -> f64 {
        f64::from(self.estimate.get()) / f64::from(SCALE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reads_its_redeliveries_and_past_the_break_even_every_record() {
        let (below, at) = (BREAK_EVEN_FIXED - 1, BREAK_EVEN_FIXED);
        assert_eq!(decide(0), Reads::Redelivered, "a redelivery is read ahead whatever the estimate");
        assert_eq!(decide(below), Reads::Redelivered, "below the break even: only redeliveries");
        assert_eq!(decide(at), Reads::All, "at the break even: every record");
        assert_eq!(decide(SCALE), Reads::All);
        assert!(Reads::Redelivered.reads(Delivery::MayBeRedelivery) && !Reads::Redelivered.reads(Delivery::Unknown));
        assert!(Reads::All.reads(Delivery::Unknown));
    }

    #[test]
    fn a_record_past_the_end_of_the_list_is_a_first_delivery() {
        let each = Deliveries::from(vec![Delivery::Unknown, Delivery::MayBeRedelivery]);
        assert_eq!(
            (each.of(0), each.of(1), each.of(2)),
            (Delivery::Unknown, Delivery::MayBeRedelivery, Delivery::Unknown)
        );
        let all = Deliveries::from(Delivery::MayBeRedelivery);
        assert_eq!((all.of(0), all.of(7)), (Delivery::MayBeRedelivery, Delivery::MayBeRedelivery));
        assert_eq!(Deliveries::default().of(0), Delivery::Unknown);
    }

    #[test]
    fn one_batch_from_elsewhere_turns_auto_on_for_six_batches_and_a_steady_rate_keeps_it() {
        let estimate = Estimate::default();
        estimate.observe(true);
        assert_eq!(estimate.get(), SCALE / 8);
        let mut on = 0;
        while estimate.get() >= BREAK_EVEN_FIXED {
            on += 1;
            estimate.observe(false);
        }
        assert_eq!(on, 6, "batches read ahead after one hit");
        for _ in 0..1000 {
            estimate.observe(true);
        }
        assert!(estimate.get() <= SCALE && estimate.get() > SCALE - SCALE / 64, "{}", estimate.get());
        // One batch in ten meeting a duplicate from elsewhere (above the break even) keeps it
        // on; one in forty (below) lets it fall off.
        let rate = |period: usize| {
            let estimate = Estimate::default();
            let mut on = 0;
            for batch in 0..4000 {
                estimate.observe(batch % period == 0);
                on += usize::from(estimate.get() >= BREAK_EVEN_FIXED);
            }
            on as f64 / 4000.0
        };
        assert!(rate(10) > 0.5, "{}", rate(10));
        assert!(rate(40) < 0.25, "{}", rate(40));
    }

    #[test]
    fn the_break_even_is_one_batch_in_sixteen() {
        assert_eq!(BREAK_EVEN, 1.0 / 16.0);
    }
}
