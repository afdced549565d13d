//! The payments functions' side of the batch drivers (feature `lambda`), whatever trigger the
//! payments come by (an SQS body, a Kafka value): a post's answer as the record's result, and a
//! batch's payments posted together. Each consumer keeps only how it reads a payment out of its
//! record.

use effectively_once::Outcome;
use effectively_once_lambda::{Disposition, RecordError, RecordResult};

use crate::{Deliveries, Delivery, Error, Ledger, PaymentEvent, Posting};

/// A post's answer as the record's result, logged at debug (the batch's counts are at info, a
/// failure has its own line from the driver): applied; rejected (recorded, not retried); a
/// duplicate, answered from the first delivery. A failure is in progress elsewhere, permanent
/// for a verdict on the payment, retryable else (`From<Error> for RecordError`).
pub fn disposition(posted: Result<Outcome<Posting>, Error>) -> RecordResult {
    match posted {
        Ok(Outcome::Fresh(Posting::Applied)) => Ok(Disposition::Applied),
        Ok(Outcome::Fresh(Posting::Rejected { reason })) => {
            tracing::debug!(?reason, "payment rejected; recorded, not retried");
            Ok(Disposition::Rejected)
        }
        Ok(Outcome::Replayed(posting)) => {
            tracing::debug!(?posting, "duplicate; answered from the first delivery");
            Ok(Disposition::Duplicate)
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
    let deliveries = deliveries.into();
    let mut failures = Vec::with_capacity(parsed.len());
    let mut events = Vec::with_capacity(parsed.len());
    let mut valid = Vec::with_capacity(parsed.len());
    for (position, record) in parsed.into_iter().enumerate() {
        match record {
            Ok(event) => {
                events.push(event);
                valid.push(deliveries.of(position));
                failures.push(None);
            }
            Err(error) => failures.push(Some(error)),
        }
    }
    let posted = ledger.post_batch_as(&events, valid).await;
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

#[cfg(test)]
mod tests {
    use effectively_once_lambda::Retry;

    use super::*;
    use crate::Rejection;

    #[test]
    fn each_answer_of_a_post_is_its_disposition() {
        let rejected = Posting::Rejected { reason: Rejection::InsufficientFunds { balance_cents: 0 } };
        assert_eq!(disposition(Ok(Outcome::Fresh(Posting::Applied))), Ok(Disposition::Applied));
        assert_eq!(disposition(Ok(Outcome::Fresh(rejected.clone()))), Ok(Disposition::Rejected));
        assert_eq!(disposition(Ok(Outcome::Replayed(Posting::Applied))), Ok(Disposition::Duplicate));
        assert_eq!(disposition(Ok(Outcome::Replayed(rejected))), Ok(Disposition::Duplicate));
        let reused = Error::from(effectively_once::Key::new("payments", "").unwrap_err());
        assert_eq!(disposition(Err(reused)).unwrap_err().retry, Retry::Permanent);
    }
}
