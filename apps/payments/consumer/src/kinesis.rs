//! Payments over Kinesis Data Streams: each record's data is a payment event of the contract
//! (JSON), posted to the ledger once per event id, never per sequence number (a producer that
//! retries a `PutRecord` writes the payment again under a new one). The same [`Payments`]
//! handler and ledger as the SQS consumer; `payments-kinesis-consumer` serves it with
//! `kinesis::run_ordered`.
//!
//! The driver keeps each partition key's records in order; a producer keyed by account gets one
//! lane an account, one keyed otherwise (a region, a merchant) gets several accounts in a lane,
//! and the ledger keeps both orders.

use aws_lambda_events::event::kinesis::KinesisEventRecord;
use effectively_once_lambda::events::Context;
use effectively_once_lambda::{BatchHandler, Handler, OrderedBatch, OrderedBatchHandler, RecordError, RecordResult};
use payments::{Delivery, PaymentEvent};

use crate::Payments;

/// The function's name in metrics where Lambda's `AWS_LAMBDA_FUNCTION_NAME` is absent.
pub const FUNCTION: &str = "payments-kinesis-consumer";

/// A record's payment event, or why it has none (permanent: its data is no payment).
fn parse(record: &KinesisEventRecord) -> Result<PaymentEvent, RecordError> {
    let text = std::str::from_utf8(&record.kinesis.data)
        .map_err(|_| RecordError::permanent("the record's data is not UTF-8"))?;
    PaymentEvent::parse(text).map_err(|e| RecordError::from(payments::Error::from(e)))
}

/// One record at a time (`kinesis::process`): the payment posted in its own transaction.
impl Handler<KinesisEventRecord> for Payments {
    async fn handle(&self, record: &KinesisEventRecord, _context: &Context) -> RecordResult {
        payments::lambda::post(self.ledger(), &parse(record)?).await
    }

    /// The payment's span: its `event_id`, recorded once the data parses.
    fn span(&self, _record: &KinesisEventRecord) -> tracing::Span {
        payments::lambda::span()
    }

    /// The event id: a copy under another sequence number or partition key in the same batch
    /// runs after the first and is answered from it. Data that is no payment has none.
    fn key(&self, record: &KinesisEventRecord) -> Option<String> {
        PaymentEvent::event_id_of(&record.kinesis.data)
    }
}

/// The rounds (`kinesis::run_batch`): the valid payments of each round (the next record of every
/// partition key) in one transaction ([`payments::Ledger::post_batch`]), each answered as if
/// posted alone in order; a record whose data is no payment fails alone.
impl BatchHandler<KinesisEventRecord> for Payments {
    async fn handle_batch(&self, records: &[&KinesisEventRecord], _context: &Context) -> Vec<RecordResult> {
        let parsed = records.iter().map(|record| parse(record)).collect();
        payments::lambda::post_batch(self.ledger(), parsed).await
    }
}

/// The ordered path (`kinesis::run_ordered`): the whole batch's valid payments in one call and
/// one transaction (as few as DynamoDB's limits allow, [`payments::Ledger::post_batch_in_lanes`]),
/// each in its partition key's lane, so a record never takes effect behind an earlier one of its
/// key that may still take effect, whatever their accounts; a record whose data is no payment
/// fails alone and holds nothing back. Kinesis says nothing of redelivery: no pre-read hint.
impl OrderedBatchHandler<KinesisEventRecord> for Payments {
    async fn handle_ordered(
        &self,
        batch: &OrderedBatch<'_, KinesisEventRecord>,
        _context: &Context,
    ) -> Vec<RecordResult> {
        let parsed = batch.records().iter().map(|record| parse(record)).collect();
        let lanes: Vec<Option<&str>> = (0..batch.len()).map(|at| batch.lane(at)).collect();
        payments::lambda::post_batch_in_lanes(self.ledger(), parsed, &lanes, Delivery::Unknown).await
    }
}

#[cfg(test)]
mod tests {
    use effectively_once_dynamodb::DynamoDbStore;
    use payments::Ledger;

    use super::*;

    fn record(data: &[u8], partition_key: &str, sequence: &str) -> KinesisEventRecord {
        let mut record = KinesisEventRecord::default();
        *record.kinesis.data = data.to_vec();
        record.kinesis.partition_key = partition_key.to_owned();
        record.kinesis.sequence_number = sequence.to_owned();
        record
    }

    #[test]
    fn the_batch_key_is_the_event_id_in_the_data_never_the_sequence_number() {
        let config = aws_sdk_dynamodb::Config::builder().behavior_version_latest().build();
        let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), "idempotency");
        let payments = Payments::new(Ledger::new(store, "ledger", None));
        let data = br#"{"event_id":"pay_1","account_id":"acct_1","amount_cents":100,"currency":"EUR"}"#;
        let (first, retry) = (record(data, "acct_1", "4959001"), record(data, "eu", "4959977"));
        assert_eq!(payments.key(&first).as_deref(), Some("pay_1"));
        assert_eq!(payments.key(&first), payments.key(&retry), "a producer retry elsewhere shares the key");
        assert_eq!(payments.key(&record(b"{not json", "acct_1", "1")), None);
        assert_eq!(payments.key(&record(&[0xff, 0xfe], "acct_1", "2")), None);
    }

    #[test]
    fn data_that_is_no_payment_is_a_permanent_error_naming_why() {
        let error = parse(&record(&[0xff, 0xfe], "acct_1", "1")).unwrap_err();
        assert_eq!(
            (error.retry, error.reason.as_str()),
            (effectively_once_lambda::Retry::Never, "the record's data is not UTF-8")
        );
        let zero = br#"{"event_id":"pay_1","account_id":"acct_1","amount_cents":0,"currency":"USD"}"#;
        let error = parse(&record(zero, "acct_1", "2")).unwrap_err();
        assert_eq!(error.retry, effectively_once_lambda::Retry::Never);
        assert_eq!(error.reason, "invalid payment event: amount_cents: must not be zero");
    }
}
