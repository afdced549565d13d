//! What an attempt holds: the result of a claim ([`Begin`]), the attempt that owns a key until it
//! completes or releases ([`Attempt`]), and what its claim replaced ([`Replaced`]); kept apart
//! from the protocol's steps so the two-phase API's types read on their own.

use crate::record::{Record, Status};

/// The result of [`Idempotency::begin`](super::Idempotency::begin).
#[derive(Debug)]
pub enum Begin<R> {
    /// This attempt owns the key: run the effect, then complete or release.
    Claimed(Attempt),
    /// A duplicate: the stored response.
    Replayed(R),
}

/// An attempt that owns a key until it completes, releases, or its lease ends.
///
/// Dropping it without completing leaves the record in progress until the lease ends, which is
/// what a crash does: no other attempt runs the effect before then.
#[derive(Debug)]
#[must_use = "an attempt holds its key until completed or released"]
pub struct Attempt {
    pub(super) id: String,
    pub(super) owner: String,
    pub(super) lease_expires_at_ms: u64,
    /// Boxed: two records, on the rare takeover path only.
    pub(super) replaced: Box<Replaced>,
}

impl Attempt {
    /// The record id this attempt owns.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// This attempt's owner token.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// When this attempt's lease ends, in milliseconds since the Unix epoch.
    pub fn lease_expires_at_ms(&self) -> u64 {
        self.lease_expires_at_ms
    }

    /// The record this attempt's claim overwrote: past its dedup window, or in progress with
    /// its lease ended.
    pub fn replaced(&self) -> Option<&Record> {
        self.replaced.record()
    }

    /// What this attempt's claim replaced: nothing (a free key), a record (past its window, or
    /// in progress past its lease), or something unknown (an item that could not be read, or
    /// a store that could not say what a claim whose answer was lost had replaced). An effect
    /// that must not repeat takes [`Replaced::Unknown`] for the worst.
    pub fn what_it_replaced(&self) -> &Replaced {
        &self.replaced
    }

    /// Whether this attempt may have taken the key over from an attempt that died (or timed
    /// out) while in progress, whose effect may or may not have happened. True when the claim
    /// replaced such a record, and also when what it replaced is unknown
    /// ([`Replaced::is_takeover`]). Stores keep what a claim replaced with the record, so a
    /// claim whose answer was lost learns it on the retry; a store that cannot answers
    /// [`Replaced::Unknown`], and an effect that must not repeat assumes the worst.
    pub fn took_over(&self) -> bool {
        self.replaced.is_takeover()
    }
}

/// What a claim replaced: [`Attempt::what_it_replaced`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Replaced {
    /// The key was free.
    Nothing,
    /// This record, as it was stored: past its dedup window, or in progress past its lease.
    Record(Record),
    /// `replaced`, an attempt that died in progress after taking the key over itself; `first`
    /// began that run of takeovers ([`Claim::AcquiredInRun`](crate::Claim::AcquiredInRun)).
    Run {
        /// The record overwritten.
        replaced: Record,
        /// The record the run of takeovers began with.
        first: Record,
    },
    /// Not known: assume the worst (an attempt that died mid-effect, with another payload).
    Unknown,
}

impl Replaced {
    /// Whether the claim may have taken the key over from an attempt that died (or timed out)
    /// in progress, whose effect may or may not have happened: it replaced such a record, or
    /// what it replaced is unknown.
    pub fn is_takeover(&self) -> bool {
        match self {
            Replaced::Nothing => false,
            Replaced::Record(record) => record.status == Status::InProgress,
            Replaced::Run { .. } | Replaced::Unknown => true,
        }
    }

    /// The record overwritten, if known.
    pub fn record(&self) -> Option<&Record> {
        match self {
            Replaced::Record(record) | Replaced::Run { replaced: record, .. } => Some(record),
            Replaced::Nothing | Replaced::Unknown => None,
        }
    }

    /// The record that held the key before the attempts that died taking it over: the record
    /// overwritten, or, after a run of takeovers, the one the run began with. What the key was
    /// bound to is this record's.
    pub fn first(&self) -> Option<&Record> {
        match self {
            Replaced::Record(record) | Replaced::Run { first: record, .. } => Some(record),
            Replaced::Nothing | Replaced::Unknown => None,
        }
    }
}
