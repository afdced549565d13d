//! The held-key rules: what the layer does with a key, as pure functions of what the key's
//! record says. The service follows them, and the protocol model (`apps/payments/model` in the
//! workspace) explores them against every interleaving of claims, lost answers, crashes and
//! leases.
//!
//! The invariant they keep: a key is bound to one body. Two bodies must never both be run and
//! answered under one key, and a body whose effect may have happened keeps its key.

use effectively_once::{PayloadHash, Record, Replaced, Status};

use crate::answer::Answer;

/// What to do with a key just claimed, from what the claim replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnClaim {
    /// Run the handler: the key was free, or held by this body.
    Run,
    /// Refuse (`422`): the key is another body's, or refused this one before. `held_for`: the
    /// other body's hash when its effect may have happened (its record was in progress, or
    /// holds the handler's answer), so its retries may still run: the refusal is then not
    /// stored, and the attempt is left in progress until its lease ends, so the other body's
    /// retry takes the key over (its claim's run of takeovers begins with that body's record).
    /// Without `held_for`, the refusal is stored for this body.
    Refuse {
        /// The payload hash the key stays held for.
        held_for: Option<String>,
    },
    /// What the claim replaced is unknown (an unreadable item, or a store that lost it with a
    /// claim's answer): it may be another body's effect. Run nothing, store a `503`
    /// `key_held` for good; an operator decides.
    Hold,
}

/// The rule for a claimed key. The key is bound to the body of the record that held it before
/// the attempts that died taking it over ([`Replaced::first`]): such an attempt may have died
/// before deciding anything, so its own body proves nothing.
pub fn on_claim(replaced: &Replaced, hash: &PayloadHash) -> OnClaim {
    let first = match replaced.first() {
        Some(first) => first,
        None if *replaced == Replaced::Nothing => return OnClaim::Run,
        None => return OnClaim::Hold,
    };
    let answer = stored_answer(first);
    match &answer {
        Some(answer) if answer.is_key_held() => return OnClaim::Hold,
        Some(answer) if answer.is_refusal() => {
            // A refusal, stored for some body: the key is the body it was held for, if any.
            return match answer.held_for() {
                Some(held_for) if hash.matches(held_for) => OnClaim::Run,
                held_for => OnClaim::Refuse { held_for: held_for.map(str::to_owned) },
            };
        }
        _ if hash.matches(&first.payload_hash) => return OnClaim::Run,
        _ => {}
    }
    // Another body's: its effect may have happened if it was in progress, or if the handler
    // answered it (any stored answer of the handler's: a refusal of its own may have effects).
    let maybe_done = first.status == Status::InProgress || answer.is_some();
    OnClaim::Refuse { held_for: maybe_done.then(|| first.payload_hash.clone()) }
}

/// What to do when the handler's answer is not to be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// Release the key: nothing was done, and no earlier attempt did anything.
    Release,
    /// Keep the key in progress until its lease ends (`Retry-After`): this attempt's effect may
    /// have happened, or an earlier attempt's did.
    Hold,
}

/// The rule for a handler's answer that is not stored: only one that did nothing for sure
/// (`nothing_done`) on a key that was free releases it. A claim that replaced a record, or does
/// not know what it replaced, keeps the key: the replaced attempt's effect may have happened.
pub fn on_failure(nothing_done: bool, replaced: &Replaced) -> OnFailure {
    match (nothing_done, replaced) {
        (true, Replaced::Nothing) => OnFailure::Release,
        _ => OnFailure::Hold,
    }
}

/// What to do when the key is bound to another body (the claim found its record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnReused {
    /// `422`.
    Refuse,
    /// `409` with `Retry-After` to the record's window end: the record is a refusal stored
    /// over this body's attempt whose outcome was unknown ([`Answer::held_for`], as earlier
    /// versions stored it), so the key is this body's; but the handler runs only under a
    /// claim, and the store lets a claim replace the refusal once its window ends ([`on_claim`]
    /// then answers [`OnClaim::Run`] for this body). Refusals are no longer stored so:
    /// [`OnClaim::Refuse`] with `held_for` leaves its attempt in progress instead, and this
    /// body's retry takes the key over when that lease ends.
    WaitForWindow,
    /// Answer the stored `503 key_held`: the key is held for every body ([`OnClaim::Hold`]).
    Held,
    /// `409` with `Retry-After`: the record is in progress, its answer not stored yet (a
    /// refusal, say, over this very body's attempt), or gone since the claim met it: its lease,
    /// or the next claim, decides, not this read.
    InProgress,
}

/// The rule for a key bound to another body, from its record as read back.
pub fn on_reused(record: Option<&Record>, hash: &PayloadHash) -> OnReused {
    let Some(record) = record else {
        // Gone since the claim met it (released): the key is free again, so this body's retry
        // may take it.
        return OnReused::InProgress;
    };
    // In progress, or this body's since the claim met another's (released, then claimed by
    // this body's other request): a retry decides.
    if record.status == Status::InProgress || hash.matches(&record.payload_hash) {
        return OnReused::InProgress;
    }
    let Some(answer) = stored_answer(record) else { return OnReused::Refuse };
    if answer.is_key_held() {
        return OnReused::Held;
    }
    match answer.held_for() {
        Some(held_for) if hash.matches(held_for) => OnReused::WaitForWindow,
        _ => OnReused::Refuse,
    }
}

/// The answer a record stores, if it is one of the layer's.
fn stored_answer(record: &Record) -> Option<Answer> {
    record.response.as_deref().and_then(|json| serde_json::from_str::<Answer>(json).ok())
}

#[cfg(test)]
mod tests {
    use effectively_once::Config;
    use http::StatusCode;
    use serde_json::json;

    use super::*;
    use crate::answer::{KEY_HELD, UNAVAILABLE};

    fn hash(cents: i64) -> PayloadHash {
        Config::default().payload_hash(&json!({ "amount_cents": cents })).unwrap()
    }

    fn accepted() -> Answer {
        Answer::json(StatusCode::ACCEPTED, &json!({"event_id": "k"}))
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
        Answer::key_reused("k").holding_for(held_for.map(|c| hash(c).as_str().to_owned()))
    }

    fn claim(first: Record) -> Replaced {
        Replaced::Record(first)
    }

    #[test]
    fn a_claim_runs_only_for_the_body_the_key_is_bound_to() {
        let x = hash(100);
        assert_eq!(on_claim(&Replaced::Nothing, &x), OnClaim::Run);
        assert_eq!(on_claim(&Replaced::Unknown, &x), OnClaim::Hold);
        assert_eq!(on_claim(&claim(record(100, None)), &x), OnClaim::Run, "this body's attempt, maybe done");
        assert_eq!(on_claim(&claim(record(100, Some(accepted()))), &x), OnClaim::Run);
        let y_in_progress = on_claim(&claim(record(999, None)), &x);
        assert_eq!(y_in_progress, OnClaim::Refuse { held_for: Some(hash(999).as_str().to_owned()) });
        let y_answered = on_claim(&claim(record(999, Some(accepted()))), &x);
        assert_eq!(y_answered, OnClaim::Refuse { held_for: Some(hash(999).as_str().to_owned()) }, "maybe done");
        let y_refused_for_good = on_claim(&claim(record(999, Some(Answer::key_reused("k")))), &x);
        assert_eq!(y_refused_for_good, OnClaim::Refuse { held_for: None }, "a refusal of its own, nothing done");
    }

    #[test]
    fn a_stored_refusal_passes_on_whom_it_held_the_key_for() {
        let x = hash(100);
        assert_eq!(on_claim(&claim(record(100, Some(refusal(None)))), &x), OnClaim::Refuse { held_for: None });
        assert_eq!(on_claim(&claim(record(999, Some(refusal(Some(100))))), &x), OnClaim::Run);
        let z = Some(hash(7).as_str().to_owned());
        assert_eq!(on_claim(&claim(record(999, Some(refusal(Some(7))))), &x), OnClaim::Refuse { held_for: z });
        assert_eq!(on_claim(&claim(record(100, Some(Answer::key_held("k")))), &x), OnClaim::Hold);
    }

    #[test]
    fn a_run_of_takeovers_is_judged_by_its_first_record() {
        let x = hash(100);
        let run = Replaced::Run { replaced: record(100, None), first: record(999, None) };
        assert_eq!(on_claim(&run, &x), OnClaim::Refuse { held_for: Some(hash(999).as_str().to_owned()) });
        let run = Replaced::Run { replaced: record(999, None), first: record(100, None) };
        assert_eq!(on_claim(&run, &x), OnClaim::Run);
    }

    #[test]
    fn only_nothing_done_on_a_free_key_releases_it() {
        assert_eq!(on_failure(true, &Replaced::Nothing), OnFailure::Release);
        assert_eq!(on_failure(false, &Replaced::Nothing), OnFailure::Hold);
        assert_eq!(on_failure(true, &Replaced::Unknown), OnFailure::Hold);
        assert_eq!(on_failure(true, &claim(record(100, None))), OnFailure::Hold);
    }

    #[test]
    fn another_bodys_record_refuses_only_when_it_binds_the_key_for_good() {
        let x = hash(100);
        assert_eq!(on_reused(None, &x), OnReused::InProgress, "gone since the claim: retry");
        assert_eq!(on_reused(Some(&record(999, None)), &x), OnReused::InProgress, "in progress: its lease decides");
        let mine = record(100, Some(accepted()));
        assert_eq!(on_reused(Some(&mine), &x), OnReused::InProgress, "this body's now: the retry replays it");
        let y = record(999, Some(accepted()));
        assert_eq!(on_reused(Some(&y), &x), OnReused::Refuse);
        assert_eq!(on_reused(Some(&record(999, Some(refusal(Some(100))))), &x), OnReused::WaitForWindow);
        assert_eq!(on_reused(Some(&record(999, Some(refusal(Some(7))))), &x), OnReused::Refuse);
        assert_eq!(on_reused(Some(&record(999, Some(Answer::key_held("k")))), &x), OnReused::Held);
        let other_503 = Answer::error(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE, "try again");
        assert_eq!(on_reused(Some(&record(999, Some(other_503))), &x), OnReused::Refuse);
        let other_status = Answer::error(StatusCode::CONFLICT, KEY_HELD, "not held");
        assert_eq!(on_reused(Some(&record(999, Some(other_status))), &x), OnReused::Refuse);
        let garbled = Record { response: Some("not json".into()), ..y };
        assert_eq!(on_reused(Some(&garbled), &x), OnReused::Refuse);
    }
}
