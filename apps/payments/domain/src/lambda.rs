//! The payments functions' side of the batch drivers (feature `lambda`), whatever trigger the
//! payments come by (an SQS body, a Kafka value): a post's answer as the record's result, and a
//! batch's payments posted together. Each consumer keeps only how it reads a payment out of its
//! record.

use effectively_once::Outcome;
use effectively_once_lambda::{Handled, RecordError, RecordResult, Retry};

use crate::{Deliveries, Delivery, Error, Ledger, PaymentEvent, Posting};

/// A post's answer as the record's result, logged at debug (the batch's counts are at info, a
/// failure has its own line from the driver): applied; rejected (recorded, not retried); a
/// duplicate, answered from the first delivery. A failure is in progress elsewhere, permanent
/// for a verdict on the payment, retryable else (`From<Error> for RecordError`).
pub fn disposition(posted: Result<Outcome<Posting>, Error>) -> RecordResult {
    match posted {
        Ok(Outcome::Fresh(Posting::Applied)) => Ok(Handled::Applied),
        Ok(Outcome::Fresh(Posting::Rejected { reason })) => {
            tracing::debug!(?reason, "payment rejected; recorded, not retried");
            Ok(Handled::Rejected)
        }
        Ok(Outcome::Replayed(posting)) => {
            tracing::debug!(?posting, "duplicate; answered from the first delivery");
            Ok(Handled::Duplicate)
        }
        Err(error) => Err(error.into()),
    }
}

/// A handler's span for one record (its `Handler::span`): `payment`, with an `event_id` field
/// that [`post`] records once the record parses. Only the event id: no account, amount or
/// address in the logs.
pub fn span() -> tracing::Span {
    tracing::info_span!("payment", event_id = tracing::field::Empty)
}

/// Posts one record's payment ([`Ledger::post`], one transaction: no lease to bound by the
/// deadline), with its `event_id` recorded on the current span (the handler's, [`span`]).
pub async fn post(ledger: &Ledger, event: &PaymentEvent) -> RecordResult {
    tracing::Span::current().record("event_id", event.event_id.as_str());
    disposition(ledger.post(event).await)
}

/// Posts a batch's payments: `parsed` holds each record's payment, or why it has none (that
/// record's failure, answered as it is). The valid payments go to [`Ledger::post_batch`] in
/// record order, so each is answered as if posted alone in that order. One result per record,
/// in order, each logged (at debug) in a `payment` span with its `event_id`.
pub async fn post_batch(ledger: &Ledger, parsed: Vec<Result<PaymentEvent, RecordError>>) -> Vec<RecordResult> {
    post_batch_as(ledger, parsed, Delivery::Unknown).await
}

/// [`post_batch`], told what the trigger knows of each record's redelivery, in record order
/// ([`Ledger::post_batch_as`]: the SQS consumer passes [`Delivery::MayBeRedelivery`] for a
/// record whose receive count is above 1).
pub async fn post_batch_as(
    ledger: &Ledger,
    parsed: Vec<Result<PaymentEvent, RecordError>>,
    deliveries: impl Into<Deliveries>,
) -> Vec<RecordResult> {
    post_batch_in_lanes(ledger, parsed, &[], deliveries).await
}

/// [`post_batch_as`], each record in a lane (`lanes`: one per record, in order, or none at all),
/// for an ordered trigger's whole batch in one call ([`Ledger::post_batch_in_lanes`]): no
/// payment takes effect behind an earlier record of its lane that failed in a way a retry may
/// undo; it is answered retryable, not started. A record with no payment holds its lane only
/// when its failure is retryable: a permanent one (a malformed value) holds nothing back.
///
/// # Panics
///
/// When `lanes` is neither empty nor one per record.
pub async fn post_batch_in_lanes(
    ledger: &Ledger,
    parsed: Vec<Result<PaymentEvent, RecordError>>,
    lanes: &[Option<&str>],
    deliveries: impl Into<Deliveries>,
) -> Vec<RecordResult> {
    assert!(lanes.is_empty() || lanes.len() == parsed.len(), "one lane per record, or none");
    let deliveries = deliveries.into();
    let lane = |position: usize| lanes.get(position).copied().flatten();
    let mut failures = Vec::with_capacity(parsed.len());
    let (mut events, mut valid, mut event_lanes) = (Vec::new(), Vec::new(), Vec::new());
    // Lanes behind a record that failed before the ledger saw it, in a way a retry may undo;
    // and, as the ledger's own hold-back does, the event ids of the events held behind one here
    // (the ledger never sees those, so it cannot hold their copies in other lanes). Not their
    // accounts: the trigger orders nothing across lanes (`Ledger::post_batch_in_lanes`).
    let mut waiting: Vec<&str> = Vec::new();
    let mut held_ids: Vec<String> = Vec::new();
    for (position, record) in parsed.into_iter().enumerate() {
        let behind_lane = lane(position).is_some_and(|lane| waiting.contains(&lane));
        match record {
            Ok(event) if behind_lane || held_ids.contains(&event.event_id) => {
                waiting.extend(lane(position));
                held_ids.push(event.event_id.clone());
                failures.push(Some(held_back(&event)));
            }
            Ok(event) => {
                events.push(event);
                valid.push(deliveries.of(position));
                event_lanes.push(lane(position));
                failures.push(None);
            }
            Err(error) => {
                if error.retry != Retry::Never {
                    waiting.extend(lane(position));
                }
                failures.push(Some(error));
            }
        }
    }
    let event_lanes = if lanes.is_empty() { Vec::new() } else { event_lanes };
    let posted = ledger.post_batch_in_lanes(&events, &event_lanes, valid).await;
    // The span only when its lines are on: its field is formatted when it is made.
    let logged = tracing::enabled!(tracing::Level::DEBUG);
    let mut answers = posted.into_iter().zip(&events).map(|(result, event)| {
        if !logged {
            return disposition(result);
        }
        let span = tracing::info_span!("payment", event_id = event.event_id.as_str());
        span.in_scope(|| disposition(result))
    });
    failures
        .into_iter()
        .map(|failure| match failure {
            Some(error) => Err(error),
            None => answers.next().expect("Ledger::post_batch answers every payment"),
        })
        .collect()
}

/// A payment not started behind an earlier record of its lane that failed before reaching the
/// ledger, in a way a retry may undo: retryable, so it comes again after that record.
fn held_back(event: &PaymentEvent) -> RecordError {
    RecordError::retryable(format!(
        "payment {}: not started, an earlier record of its lane in this batch failed; retried",
        event.event_id
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rejection;

    #[test]
    fn each_answer_of_a_post_is_its_disposition() {
        let rejected = Posting::Rejected { reason: Rejection::InsufficientFunds { balance_cents: 0 } };
        assert_eq!(disposition(Ok(Outcome::Fresh(Posting::Applied))), Ok(Handled::Applied));
        assert_eq!(disposition(Ok(Outcome::Fresh(rejected.clone()))), Ok(Handled::Rejected));
        assert_eq!(disposition(Ok(Outcome::Replayed(Posting::Applied))), Ok(Handled::Duplicate));
        assert_eq!(disposition(Ok(Outcome::Replayed(rejected))), Ok(Handled::Duplicate));
        let reused = Error::from(effectively_once::Key::new("payments", "").unwrap_err());
        assert_eq!(disposition(Err(reused)).unwrap_err().retry, Retry::Never);
    }
}
