//! The held-key rules: what the API does with a key, as pure functions of what the key's record
//! says. The handler ([`Api`](crate::Api)) follows them, and the protocol model (`tests/model`)
//! explores them against every interleaving of claims, lost answers, crashes and leases.
//!
//! The invariant they keep: a key is bound to one body. An event id names one payment in the
//! ledger for good, so two bodies must never both be answered `202` (the consumer would post
//! one and send the other to the DLQ), and a body that may be on the queue keeps its key.

use effectively_once::{PayloadHash, Record, Replaced, Status};
use lambda_http::http::StatusCode;

use crate::Answer;

/// What to do with a key just claimed, from what the claim replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnClaim {
    /// Send the event: the key was free, or held by this body.
    Send,
    /// Refuse (`422`), and store the refusal for this body: the key is another body's, or
    /// refused this one before. `held_for`: the other body's hash when its send's outcome was
    /// unknown (its record was in progress), so its retries may still send.
    Refuse {
        /// The payload hash the key stays held for.
        held_for: Option<String>,
    },
    /// What the claim replaced is unknown (an unreadable item, or a store that lost it with a
    /// claim's answer): it may be another body's send. Send nothing, store a `503`
    /// `key_held` for good; an operator decides from the ledger (docs/operations.md).
    Hold,
}

/// The rule for a claimed key. The key is bound to the body of the record that held it before
/// the attempts that died taking it over ([`Replaced::first`]): such an attempt may have died
/// before deciding anything, so its own body proves nothing.
pub fn on_claim(replaced: &Replaced, hash: &PayloadHash) -> OnClaim {
    let first = match replaced.first() {
        Some(first) => first,
        None if *replaced == Replaced::Nothing => return OnClaim::Send,
        None => return OnClaim::Hold,
    };
    let answer = stored_answer(first);
    match &answer {
        Some(answer) if is_key_held(answer) => return OnClaim::Hold,
        Some(answer) if answer.status == StatusCode::UNPROCESSABLE_ENTITY => {
            // A refusal, stored for some body: the key is the body it was held for, if any.
            return match &answer.held_for {
                Some(held_for) if hash.matches(held_for) => OnClaim::Send,
                held_for => OnClaim::Refuse { held_for: held_for.clone() },
            };
        }
        _ if hash.matches(&first.payload_hash) => return OnClaim::Send,
        _ => {}
    }
    // Another body's: it may be on the queue if it was accepted, or its send's outcome unknown.
    let maybe_queued = first.status == Status::InProgress || answer.is_some_and(|a| a.status == StatusCode::ACCEPTED);
    OnClaim::Refuse { held_for: maybe_queued.then(|| first.payload_hash.clone()) }
}

/// What to do when the send failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailedSend {
    /// Release the key: nothing is on the queue, and no earlier attempt sent anything.
    Release,
    /// Keep the key in progress until its lease ends (`503` with `Retry-After`): this send may
    /// have landed, or an earlier attempt's did.
    Hold,
}

/// The rule for a failed send: only a definite refusal (`refused`) on a key that was free
/// releases it. A claim that replaced a record, or does not know what it replaced, keeps the
/// key: the replaced attempt's send may have landed.
pub fn on_failed_send(refused: bool, replaced: &Replaced) -> OnFailedSend {
    match (refused, replaced) {
        (true, Replaced::Nothing) => OnFailedSend::Release,
        _ => OnFailedSend::Hold,
    }
}

/// What to do when the key is bound to another body (the claim found its record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnReused {
    /// `422`.
    Refuse,
    /// Send again and answer `202`, storing nothing: the record is a refusal stored over this
    /// body's send whose outcome was unknown ([`Answer::held_for`]), so the key is this body's.
    SendAgain,
    /// Answer the stored `503 key_held`: the key is held for every body ([`OnClaim::Hold`]).
    Held,
    /// `409` with `Retry-After`: the record is in progress, its answer not stored yet (a
    /// refusal, say, over this very body's send), or gone since the claim met it: its lease,
    /// or the next claim, decides, not this read.
    InProgress,
}

/// The rule for a key bound to another body, from its record as read back.
pub fn on_reused(record: Option<&Record>, hash: &PayloadHash) -> OnReused {
    let Some(record) = record else {
        // Gone since the claim met it (released: its send was refused): the key is free again,
        // so this body's retry may take it.
        return OnReused::InProgress;
    };
    // In progress, or this body's since the claim met another's (released, then claimed by
    // this body's other request): a retry decides.
    if record.status == Status::InProgress || hash.matches(&record.payload_hash) {
        return OnReused::InProgress;
    }
    let Some(answer) = stored_answer(record) else { return OnReused::Refuse };
    if is_key_held(&answer) {
        return OnReused::Held;
    }
    match answer.held_for {
        Some(held_for) if hash.matches(&held_for) => OnReused::SendAgain,
        _ => OnReused::Refuse,
    }
}

/// The code of a held key's stored answer.
pub const KEY_HELD: &str = "key_held";

fn is_key_held(answer: &Answer) -> bool {
    answer.status == StatusCode::SERVICE_UNAVAILABLE && answer.body["error"] == KEY_HELD
}

/// The answer a record stores, if it is one of the API's.
fn stored_answer(record: &Record) -> Option<Answer> {
    record.response.as_deref().and_then(|json| serde_json::from_str::<Answer>(json).ok())
}
