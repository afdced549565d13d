//! The record protocol's steps as pure functions of the stored item: what a claim, a completion
//! and a release do to one key's slot, and what each answers.
//!
//! [`InMemoryStore`](crate::InMemoryStore) applies them under its lock; the DynamoDB store's
//! condition expressions and the Redis store's scripts state the same rules, and the store
//! contract suite holds all three to them; the protocol model (`apps/payments/model`) explores them
//! exhaustively, so the model and the stores cannot drift apart.

use crate::idempotency::Replaced;
use crate::record::{Record, Status};
use crate::store::{Claim, Completion, StoreError, StoreErrorKind};

/// What one key's slot holds: the record, and, while it is in progress, the record its claim
/// replaced (`None`: the key was free).
///
/// Why a record keeps what it replaced: a claim whose answer is lost is sent again (an SDK
/// retry, a resend after a dropped connection) and meets its own record; without this, what
/// the first write replaced (another attempt's send that may have landed, another body's
/// hash) would be gone with the lost answer, and the retry would look like a fresh key.
///
/// A claim over a record in progress whose attempt had itself taken the key over keeps the
/// record that run of takeovers began with (`first`): an attempt that died before it finished
/// may have died before it decided anything, so what the key was bound to is the run's first
/// record's (the payments API's "one body per key" rests on it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Stored {
    /// The record.
    pub record: Record,
    /// What its claim replaced; dropped at completion (a completed record is never claimed by
    /// its own owner again, and the copy would double the item).
    pub replaced: Option<Record>,
    /// The record the run of takeovers this claim continued began with: `replaced` itself,
    /// unless `replaced` was in progress and had taken the key over too. `None` with
    /// `replaced`; dropped at completion.
    pub first: Option<Record>,
}

impl Stored {
    /// What a claim that replaces this record keeps as its run's first record.
    pub fn first_for_successor(&self) -> &Record {
        match (&self.first, self.record.status) {
            (Some(first), Status::InProgress) => first,
            _ => &self.record,
        }
    }

    /// The claim's answer for this record's own attempt: what its claim replaced.
    pub fn acquired(&self) -> Claim {
        acquired(self.replaced.clone(), self.first.clone())
    }
}

/// The answer of a claim that replaced `replaced`, its run having begun with `first`.
pub fn acquired(replaced: Option<Record>, first: Option<Record>) -> Claim {
    match (replaced, first) {
        (Some(replaced), Some(first)) if first != replaced => Claim::AcquiredInRun { replaced, first },
        (replaced, _) => Claim::Acquired { replaced },
    }
}

/// A claim of `record` at `now_ms` on `slot`.
///
/// - A record that blocks the claim ([`Record::blocks_claim_at`]) and is not the claimant's own
///   is answered [`Claim::Exists`], unchanged.
/// - The claimant's own record still in progress (its earlier write landed, the answer was
///   lost) is answered [`Claim::Acquired`] with what that write replaced, as the lost answer
///   would have been, and unchanged: a claim never overwrites its own owner's record, so a
///   late copy of a claim cannot rewrite what the first one replaced.
/// - Otherwise the record is written, and what it replaced is kept with it.
pub fn claim(slot: &mut Option<Stored>, record: &Record, now_ms: u64) -> Claim {
    if let Some(stored) = slot.as_ref() {
        if stored.record.owner == record.owner {
            return match stored.record.status {
                Status::InProgress => stored.acquired(),
                Status::Completed => Claim::Exists(stored.record.clone()),
            };
        }
        if stored.record.blocks_claim_at(now_ms) {
            return Claim::Exists(stored.record.clone());
        }
    }
    let stored = Stored {
        record: record.clone(),
        first: slot.as_ref().map(|old| old.first_for_successor().clone()),
        replaced: slot.take().map(|old| old.record),
    };
    let answer = stored.acquired();
    *slot = Some(stored);
    answer
}

/// What a claim's answer means to the attempt that sent `mine`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Judged {
    /// The attempt holds the key; what its claim replaced.
    Claimed(Replaced),
    /// Another record blocks the claim: a replay, an attempt in progress, or the key reused
    /// with another payload, as [`Record::replay`] tells.
    Blocked(Record),
}

/// Judges a claim's answer, from the answer alone (no second read). The attempt's own record in
/// progress, from a store that could not say what the claim's first write replaced (the answer
/// was lost), is claimed with [`Replaced::Unknown`].
pub fn judge(claim: Claim, mine: &Record) -> Judged {
    match claim {
        Claim::Acquired { replaced: Some(record) } => Judged::Claimed(Replaced::Record(record)),
        Claim::AcquiredInRun { replaced, first } => Judged::Claimed(Replaced::Run { replaced, first }),
        Claim::Acquired { replaced: None } => Judged::Claimed(Replaced::Nothing),
        Claim::AcquiredOverUnreadable => Judged::Claimed(Replaced::Unknown),
        Claim::Exists(existing) if existing.owner == mine.owner && existing.status == Status::InProgress => {
            Judged::Claimed(Replaced::Unknown)
        }
        Claim::Exists(existing) => Judged::Blocked(existing),
    }
}

/// A completion of `slot` by `owner` (see [`Store::complete`](crate::Store::complete)): done
/// if `owner` holds it in progress and its lease has not ended at `completion.now_ms`; already
/// done if `owner` completed it; anything else is refused as fenced.
pub fn complete(slot: &mut Option<Stored>, owner: &str, completion: &Completion<'_>) -> Result<(), StoreError> {
    let Some(stored) = slot.as_mut() else { return Err(fenced("the record is gone")) };
    let record = &mut stored.record;
    if record.owner != owner {
        return Err(fenced("the record is another attempt's"));
    }
    match record.status {
        Status::Completed => Ok(()),
        Status::InProgress if record.lease_expires_at_ms >= completion.now_ms => {
            record.status = Status::Completed;
            record.response = completion.response.map(str::to_owned);
            record.expiration_s = completion.expiration_s;
            stored.replaced = None;
            stored.first = None;
            Ok(())
        }
        Status::InProgress => {
            Err(fenced(&format!("the lease ended at {} ms; not completed", record.lease_expires_at_ms)))
        }
    }
}

/// A release of `slot` by `owner` (see [`Store::release`](crate::Store::release)): deletes a
/// record `owner` holds in progress; a slot already empty is released; a completed record, or
/// another owner's, is refused as fenced and left as it is.
pub fn release(slot: &mut Option<Stored>, owner: &str) -> Result<(), StoreError> {
    match slot.as_ref().map(|stored| &stored.record) {
        None => Ok(()),
        Some(record) if record.status == Status::Completed => {
            Err(fenced("the record is completed; a completed record is never released"))
        }
        Some(record) if record.owner != owner => Err(fenced("the record is another attempt's")),
        Some(_) => {
            *slot = None;
            Ok(())
        }
    }
}

fn fenced(why: &str) -> StoreError {
    StoreError::new(StoreErrorKind::Fenced, why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(owner: &str, hash: &str, lease: u64) -> Record {
        Record {
            id: "t#k".into(),
            status: Status::InProgress,
            lease_expires_at_ms: lease,
            expiration_s: 1_000,
            payload_hash: hash.into(),
            owner: owner.into(),
            response: None,
        }
    }

    fn completion(now_ms: u64) -> Completion<'static> {
        Completion { response: Some("1"), expiration_s: 2_000, now_ms }
    }

    #[test]
    fn a_retried_claim_learns_what_its_first_write_replaced() {
        let mut slot = None;
        let x = record("x", "hx", 100);
        claim(&mut slot, &x, 10);
        let y = record("y", "hy", 300);
        assert_eq!(claim(&mut slot, &y, 150), Claim::Acquired { replaced: Some(x.clone()) });
        assert_eq!(
            claim(&mut slot, &y, 151),
            Claim::Acquired { replaced: Some(x) },
            "the retry's answer is the first's"
        );
        // Even past its own lease: a claim never overwrites its own owner's record.
        assert_eq!(slot.as_ref().unwrap().record, y);
        assert!(matches!(claim(&mut slot, &y, 400), Claim::Acquired { replaced: Some(r) } if r.owner == "x"));
    }

    #[test]
    fn a_run_of_takeovers_keeps_the_record_it_began_with() {
        let mut slot = None;
        let x = record("x", "hx", 100);
        claim(&mut slot, &x, 10);
        let y = record("y", "hy", 300);
        assert_eq!(claim(&mut slot, &y, 150), Claim::Acquired { replaced: Some(x.clone()) });
        let z = record("z", "hx", 500);
        let run = Claim::AcquiredInRun { replaced: y.clone(), first: x.clone() };
        assert_eq!(claim(&mut slot, &z, 400), run, "y died in progress after taking x over");
        assert_eq!(claim(&mut slot, &z, 401), run, "the retry's answer is the same");
        complete(&mut slot, "z", &completion(450)).unwrap();
        let w = record("w", "hw", 2_000);
        slot.as_mut().unwrap().record.expiration_s = 0;
        let done = slot.as_ref().unwrap().record.clone();
        let expired = done.clone();
        assert_eq!(
            claim(&mut slot, &w, 1_500),
            Claim::Acquired { replaced: Some(expired) },
            "a completion ends the run"
        );
        let v = record("v", "hv", 4_000);
        let run = Claim::AcquiredInRun { replaced: w, first: done };
        assert_eq!(claim(&mut slot, &v, 3_000), run, "a run may begin with a completed record");
    }

    #[test]
    fn an_own_record_from_a_store_that_cannot_say_what_it_replaced_is_an_unknown_takeover() {
        let mine = record("x", "hx", 100);
        assert_eq!(judge(Claim::Exists(mine.clone()), &mine), Judged::Claimed(Replaced::Unknown));
        let other = record("y", "hx", 100);
        assert_eq!(judge(Claim::Exists(other.clone()), &mine), Judged::Blocked(other.clone()));
        let done = Record { status: Status::Completed, response: Some("1".into()), ..mine.clone() };
        assert_eq!(judge(Claim::Exists(done.clone()), &mine), Judged::Blocked(done), "completed: a replay");
        assert_eq!(judge(Claim::AcquiredOverUnreadable, &mine), Judged::Claimed(Replaced::Unknown));
        let run = Claim::AcquiredInRun { replaced: other.clone(), first: mine.clone() };
        assert_eq!(judge(run, &mine), Judged::Claimed(Replaced::Run { replaced: other, first: mine }));
    }

    #[test]
    fn a_claim_of_a_completed_own_record_is_answered_with_it() {
        let mut slot = None;
        let x = record("x", "hx", 100);
        claim(&mut slot, &x, 10);
        complete(&mut slot, "x", &completion(50)).unwrap();
        assert!(slot.as_ref().unwrap().replaced.is_none(), "completion drops the copy");
        assert!(slot.as_ref().unwrap().first.is_none());
        assert!(matches!(claim(&mut slot, &x, 60), Claim::Exists(r) if r.status == Status::Completed));
    }

    #[test]
    fn blocking_records_are_answered_unchanged() {
        let mut slot = None;
        claim(&mut slot, &record("x", "hx", 100), 10);
        let before = slot.clone();
        assert!(matches!(claim(&mut slot, &record("y", "hy", 300), 100), Claim::Exists(r) if r.owner == "x"));
        assert_eq!(slot, before, "the lease ends after 100, not at it");
    }

    #[test]
    fn completion_and_release_are_fenced_by_owner_status_and_lease() {
        let mut slot = None;
        claim(&mut slot, &record("x", "hx", 100), 10);
        assert_eq!(complete(&mut slot, "y", &completion(50)).unwrap_err().kind(), StoreErrorKind::Fenced);
        assert_eq!(release(&mut slot, "y").unwrap_err().kind(), StoreErrorKind::Fenced);
        assert_eq!(complete(&mut slot, "x", &completion(101)).unwrap_err().kind(), StoreErrorKind::Fenced);
        complete(&mut slot, "x", &completion(100)).unwrap();
        complete(&mut slot, "x", &completion(500)).unwrap();
        assert_eq!(release(&mut slot, "x").unwrap_err().kind(), StoreErrorKind::Fenced, "completed: never released");
        let mut slot = None;
        claim(&mut slot, &record("x", "hx", 100), 10);
        release(&mut slot, "x").unwrap();
        assert!(slot.is_none());
        release(&mut slot, "x").unwrap();
        assert_eq!(complete(&mut slot, "x", &completion(50)).unwrap_err().kind(), StoreErrorKind::Fenced);
    }
}
