//! Complete and release: the last step of the protocol, which ends an attempt by storing its
//! response or deleting its record, and sends again a write whose answer did not come back;
//! apart from the claim and run steps because its retries and fences are a concern of their own.

use std::time::Duration;

use serde::Serialize;

use super::{outran_lease, Attempt, Idempotency};
use crate::error::{Error, ErrorChain, ErrorKind};
use crate::store::{Completion, Store, StoreErrorKind};

/// Tries of a completion whose answer did not come back (throttled, or unavailable: the write
/// may have landed). A retry that finds the record completed by its own owner succeeds, so
/// retrying is safe; giving up leaves the record in progress until its lease ends, and the
/// effect is run again by the takeover.
const COMPLETE_TRIES: u32 = 3;
/// Pause before the first retry of a completion; doubled for the next.
const COMPLETE_BACKOFF: Duration = Duration::from_millis(25);
/// Tries of a release whose answer did not come back, paced as a completion's
/// ([`COMPLETE_BACKOFF`]). A release left undone keeps the record in progress until its lease
/// ends, and the attempt that takes it over then cannot tell "failed, nothing done" from
/// "crashed mid-effect": an effect that must not repeat (an email at most once) gives up on it.
const RELEASE_TRIES: u32 = 3;

impl<S: Store> Idempotency<S> {
    /// Completes an attempt with its response, which duplicates will receive.
    ///
    /// Refused with [`ErrorKind::LeaseLost`] when the attempt's lease has ended (see
    /// [`run`](Self::run)): checked here before sending, and by the store's condition. A
    /// completion whose answer did not come back (throttled, unavailable) is sent again, up to
    /// three tries, before the record is left to its lease: a retry that finds the record
    /// already completed by this attempt succeeds.
    pub async fn complete<R: Serialize>(&self, attempt: Attempt, response: &R) -> Result<(), Error> {
        self.complete_fenced(attempt, response, Fence::OwnerAndLease).await
    }

    /// Completes an attempt whose effect has already happened, even after its lease ended,
    /// provided the attempt still holds its record in progress: the owner fence alone decides.
    ///
    /// Only for an effect that is over, with a result in hand, when it is recorded, and whose
    /// record nobody settles by its lease alone: keyed email (`effectively_once_effects::send_once`), completing
    /// a marker with the message id the provider returned. Why it is safe there: every claim
    /// writes its own owner token, so a record still in progress under this attempt's owner
    /// proves no other attempt took the key over (nor sent, nor recorded another outcome), and
    /// none can complete it after this write; readers that find an email marker past its lease
    /// claim it before acting on it, and that claim fences this completion. What refusing would
    /// cost: the send is not undone, and the marker is left to a later attempt, which records
    /// the email ambiguous (at most once) or sends a second copy (at least once).
    ///
    /// Not for [`run`](Self::run), whose handlers are cut off at their lease and whose records
    /// are settled by it (see [`Store::complete`]); use [`complete`](Self::complete) elsewhere.
    pub async fn complete_while_owned<R: Serialize>(&self, attempt: Attempt, response: &R) -> Result<(), Error> {
        self.complete_fenced(attempt, response, Fence::Owner).await
    }

    async fn complete_fenced<R: Serialize>(&self, attempt: Attempt, response: &R, fence: Fence) -> Result<(), Error> {
        let json = serde_json::to_string(response)
            .map_err(|e| Error::new(ErrorKind::Serialization, "response is not serialisable").with_source(e))?;
        let too_large = json.len() > self.config.max_response_bytes;
        let now_ms = self.config.now_ms();
        if fence == Fence::OwnerAndLease && now_ms > attempt.lease_expires_at_ms {
            return Err(outran_lease(&attempt, now_ms));
        }
        // Owner only: the store's lease condition is judged at the attempt's own lease end,
        // which the record carries unchanged while this attempt holds it, so only the owner and
        // in-progress conditions can refuse.
        let judged_at = |now_ms: u64| match fence {
            Fence::OwnerAndLease => now_ms,
            Fence::Owner => now_ms.min(attempt.lease_expires_at_ms),
        };
        // A response too large to keep still completes the record: the effect happened, and a
        // duplicate must not repeat it; it gets ResponseTooLarge instead of a replay.
        let mut completion = Completion {
            response: (!too_large).then_some(json.as_str()),
            expiration_s: self.expiration_s(now_ms),
            now_ms: judged_at(now_ms),
        };
        let mut tries = 1;
        loop {
            match self.store.complete(&attempt.id, &attempt.owner, completion.clone()).await {
                Ok(()) => break,
                Err(error)
                    if tries < COMPLETE_TRIES
                        && matches!(error.kind(), StoreErrorKind::Throttled | StoreErrorKind::Unavailable) =>
                {
                    tracing::warn!(key = %attempt.id, error = %ErrorChain(&error), tries, "completion unanswered; sending it again");
                    tokio::time::sleep(COMPLETE_BACKOFF * 2u32.pow(tries - 1)).await;
                    tries += 1;
                    // The retry is judged on the clock as it is now: if the first write did
                    // not land and the lease has ended meanwhile, the store refuses it.
                    completion.now_ms = judged_at(self.config.now_ms());
                }
                Err(error) => return Err(error.into()),
            }
        }
        if too_large {
            return Err(too_large_error(json.len(), self.config.max_response_bytes));
        }
        Ok(())
    }

    /// Releases an attempt: deletes its record so a retry runs the effect again.
    ///
    /// A release whose answer did not come back (throttled, or unavailable: the delete may have
    /// landed) is sent again, up to three tries, as a completion is. A retry that finds the
    /// record gone succeeds (the store's contract). A retry that finds it another attempt's
    /// (or completed) counts as done only while this attempt's lease lasts, by this attempt's
    /// clock: no claim takes a record over before its lease ends, so the other attempt claimed
    /// it after an earlier try had deleted it. Past the lease, that attempt may have taken it
    /// over from this one, unreleased, and judged it as a crash: refused with
    /// [`ErrorKind::LeaseLost`], as is a first try that finds the record not this attempt's.
    /// On any error the record may still be in progress until its lease ends.
    pub async fn release(&self, attempt: Attempt) -> Result<(), Error> {
        let mut tries = 1;
        loop {
            match self.store.release(&attempt.id, &attempt.owner).await {
                Ok(()) => return Ok(()),
                Err(error)
                    if tries < RELEASE_TRIES
                        && matches!(error.kind(), StoreErrorKind::Throttled | StoreErrorKind::Unavailable) =>
                {
                    tracing::warn!(key = %attempt.id, error = %ErrorChain(&error), tries, "release unanswered; sending it again");
                    tokio::time::sleep(COMPLETE_BACKOFF * 2u32.pow(tries - 1)).await;
                    tries += 1;
                }
                Err(error)
                    if tries > 1
                        && error.kind() == StoreErrorKind::Fenced
                        && self.config.now_ms() <= attempt.lease_expires_at_ms =>
                {
                    tracing::info!(key = %attempt.id, "an earlier release landed; the key has been claimed again since");
                    return Ok(());
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
}

/// What a completion is fenced by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fence {
    /// The owner, and the lease not ended: [`Idempotency::complete`].
    OwnerAndLease,
    /// The owner alone: [`Idempotency::complete_while_owned`].
    Owner,
}

fn too_large_error(len: usize, max: usize) -> Error {
    Error::new(ErrorKind::ResponseTooLarge, format!("response has {len} bytes of JSON, at most {max} are kept"))
}
