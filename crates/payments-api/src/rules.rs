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

#[cfg(test)]
mod tests {
    use effectively_once::Config;
    use payments::PaymentEvent;

    use super::*;

    fn event(cents: i64) -> PaymentEvent {
        PaymentEvent {
            event_id: "k".into(),
            account_id: "a".into(),
            amount_cents: cents,
            currency: "USD".into(),
            receipt_email: None,
        }
    }

    fn hash(cents: i64) -> PayloadHash {
        Config::default().payload_hash(&event(cents)).unwrap()
    }

    /// A record of body `cents`, completed with `answer`, or in progress without one.
    fn record(cents: i64, answer: Option<Answer>) -> Record {
        Record {
            id: "api#k".into(),
            status: if answer.is_some() { Status::Completed } else { Status::InProgress },
            lease_expires_at_ms: 1,
            expiration_s: 1,
            payload_hash: hash(cents).as_str().to_owned(),
            owner: "o".into(),
            response: answer.map(|a| serde_json::to_string(&a).unwrap()),
        }
    }

    fn refusal(held_for: Option<i64>) -> Answer {
        Answer { held_for: held_for.map(|c| hash(c).as_str().to_owned()), ..crate::key_reused(&event(0)) }
    }

    fn claim(first: Record) -> Replaced {
        Replaced::Record(first)
    }

    #[test]
    fn a_claim_sends_only_for_the_body_the_key_is_bound_to() {
        let x = hash(100);
        assert_eq!(on_claim(&Replaced::Nothing, &x), OnClaim::Send);
        assert_eq!(on_claim(&Replaced::Unknown, &x), OnClaim::Hold);
        assert_eq!(on_claim(&claim(record(100, None)), &x), OnClaim::Send, "this body's send, maybe landed");
        assert_eq!(on_claim(&claim(record(100, Some(crate::accepted(&event(100))))), &x), OnClaim::Send);
        let y_in_progress = on_claim(&claim(record(999, None)), &x);
        assert_eq!(y_in_progress, OnClaim::Refuse { held_for: Some(hash(999).as_str().to_owned()) });
        let y_accepted = on_claim(&claim(record(999, Some(crate::accepted(&event(999))))), &x);
        assert_eq!(y_accepted, OnClaim::Refuse { held_for: Some(hash(999).as_str().to_owned()) }, "on the queue");
        let y_refused_for_good = on_claim(&claim(record(999, Some(crate::key_reused(&event(999))))), &x);
        assert_eq!(y_refused_for_good, OnClaim::Refuse { held_for: None }, "a refusal of its own, nothing queued");
    }

    #[test]
    fn a_stored_refusal_passes_on_whom_it_held_the_key_for() {
        let x = hash(100);
        // Refused for this body before, held for nobody: refused again.
        assert_eq!(on_claim(&claim(record(100, Some(refusal(None)))), &x), OnClaim::Refuse { held_for: None });
        // Y's refusal, held for X: the key is X's.
        assert_eq!(on_claim(&claim(record(999, Some(refusal(Some(100))))), &x), OnClaim::Send);
        // Y's refusal held for Z: refused, still held for Z.
        let z = Some(hash(7).as_str().to_owned());
        assert_eq!(on_claim(&claim(record(999, Some(refusal(Some(7))))), &x), OnClaim::Refuse { held_for: z });
        // Held for everyone.
        assert_eq!(on_claim(&claim(record(100, Some(crate::key_held(&event(100))))), &x), OnClaim::Hold);
    }

    #[test]
    fn a_run_of_takeovers_is_judged_by_its_first_record() {
        let x = hash(100);
        let run = Replaced::Run { replaced: record(100, None), first: record(999, None) };
        assert_eq!(on_claim(&run, &x), OnClaim::Refuse { held_for: Some(hash(999).as_str().to_owned()) });
        let run = Replaced::Run { replaced: record(999, None), first: record(100, None) };
        assert_eq!(on_claim(&run, &x), OnClaim::Send);
    }

    #[test]
    fn only_a_refusal_on_a_free_key_releases_it() {
        assert_eq!(on_failed_send(true, &Replaced::Nothing), OnFailedSend::Release);
        assert_eq!(on_failed_send(false, &Replaced::Nothing), OnFailedSend::Hold);
        assert_eq!(on_failed_send(true, &Replaced::Unknown), OnFailedSend::Hold);
        assert_eq!(on_failed_send(true, &claim(record(100, None))), OnFailedSend::Hold);
    }

    #[test]
    fn another_bodys_record_refuses_only_when_it_binds_the_key_for_good() {
        let x = hash(100);
        assert_eq!(on_reused(None, &x), OnReused::InProgress, "gone since the claim: retry");
        assert_eq!(on_reused(Some(&record(999, None)), &x), OnReused::InProgress, "in progress: its lease decides");
        let mine = record(100, Some(crate::accepted(&event(100))));
        assert_eq!(on_reused(Some(&mine), &x), OnReused::InProgress, "this body's now: the retry replays it");
        let y = record(999, Some(crate::accepted(&event(999))));
        assert_eq!(on_reused(Some(&y), &x), OnReused::Refuse);
        assert_eq!(on_reused(Some(&record(999, Some(refusal(Some(100))))), &x), OnReused::SendAgain);
        assert_eq!(on_reused(Some(&record(999, Some(refusal(Some(7))))), &x), OnReused::Refuse);
        assert_eq!(on_reused(Some(&record(999, Some(crate::key_held(&event(999))))), &x), OnReused::Held);
        // Held only by a stored `503 key_held`, not by any 503 nor any `key_held` code.
        let other_503 = crate::error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "try again");
        assert_eq!(on_reused(Some(&record(999, Some(other_503))), &x), OnReused::Refuse);
        let other_status = crate::error(StatusCode::CONFLICT, KEY_HELD, "not held");
        assert_eq!(on_reused(Some(&record(999, Some(other_status))), &x), OnReused::Refuse);
        let garbled = Record { response: Some("not json".into()), ..y };
        assert_eq!(on_reused(Some(&garbled), &x), OnReused::Refuse);
    }
}
