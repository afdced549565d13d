//! Payments over Kafka (Amazon MSK or self-managed): each record's value is a payment event of
//! the fixed contract (JSON), and each payment is posted to the ledger once, however often
//! Kafka delivers it. The same ledger and the same records as the SQS payments consumer: an
//! event id takes effect once across the whole ledger, whichever way it came.
//!
//! The key is the payment's `event_id` in the value, never the record's offset: a producer that
//! retries a send whose answer it lost writes the same payment again at a new offset (maybe in
//! another partition), a consumer group that rebalances delivers records again, and a partition
//! that failed comes again from its first failed record, so records after it come back. All of
//! them find the payment's record and post nothing.
//!
//! No `event-id` header fallback: the contract makes `event_id` a required field of the value,
//! and a second source of the key could disagree with the first, so one payment could take
//! effect under two keys. A value without an `event_id` fails alone, permanently.
#![warn(missing_docs)]

use std::fmt;

use effectively_once_lambda::events::{Context, KafkaRecord};
use effectively_once_lambda::{
    kafka, BatchHandler, Handler, OrderedBatch, OrderedBatchHandler, RecordError, RecordResult,
};
use payments::{InvalidPayment, Ledger, LedgerEnv, PaymentEvent};

/// The function's name in metrics where Lambda's `AWS_LAMBDA_FUNCTION_NAME` is absent.
pub const FUNCTION: &str = "kafka-consumer";

/// Why a record's value is not a payment event. Permanent: no later delivery of the same record
/// changes it, so the record fails alone and its partition goes on (the driver logs and counts
/// it; it is not a resume point).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueError {
    /// The record has no value (a tombstone, say).
    Missing,
    /// The value is not base64, as Lambda sends values.
    NotBase64,
    /// The value is not UTF-8 text.
    NotUtf8,
    /// The value is not a valid payment event; the field at fault is named.
    Invalid(InvalidPayment),
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::Missing => f.write_str("the record has no value"),
            ValueError::NotBase64 => f.write_str("the record's value is not base64"),
            ValueError::NotUtf8 => f.write_str("the record's value is not UTF-8"),
            ValueError::Invalid(error) => fmt::Display::fmt(error, f),
        }
    }
}

impl std::error::Error for ValueError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ValueError::Invalid(error) => Some(error),
            _ => None,
        }
    }
}

/// Permanent, with the reason; an invalid payment as the payments functions map it.
impl From<ValueError> for RecordError {
    fn from(error: ValueError) -> Self {
        match error {
            ValueError::Invalid(invalid) => RecordError::from(payments::Error::from(invalid)),
            other => RecordError::permanent(other.to_string()),
        }
    }
}

/// A record's payment event, read from its value.
pub fn payment(record: &KafkaRecord) -> Result<PaymentEvent, ValueError> {
    if record.value.is_none() {
        return Err(ValueError::Missing);
    }
    let value = kafka::value_bytes(record).ok_or(ValueError::NotBase64)?;
    let text = std::str::from_utf8(&value).map_err(|_| ValueError::NotUtf8)?;
    PaymentEvent::parse(text).map_err(ValueError::Invalid)
}

/// Posts each record's payment to the ledger, once per event id.
#[derive(Debug, Clone)]
pub struct Payments {
    ledger: Ledger,
}

impl Payments {
    /// A handler over a ledger.
    pub fn new(ledger: Ledger) -> Self {
        Payments { ledger }
    }

    /// A handler on the tables `env` names, with its config. The disable switch in it does not
    /// reach the ledger: [`Ledger::post`] never drops its once-only condition.
    pub fn from_env(client: aws_sdk_dynamodb::Client, env: &LedgerEnv) -> Self {
        Payments::new(Ledger::from_env(client, env))
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
}

/// One record at a time (`kafka::process`): the payment posted in its own transaction.
impl Handler<KafkaRecord> for Payments {
    async fn handle(&self, record: &KafkaRecord, _context: &Context) -> RecordResult {
        payments::lambda::post(&self.ledger, &payment(record)?).await
    }

    /// The payment's span: its `event_id`, recorded once the value parses (no account, amount
    /// or address: those stay out of the logs).
    fn span(&self, _record: &KafkaRecord) -> tracing::Span {
        payments::lambda::span()
    }

    /// The event id: a copy at another offset or in another partition of the same batch runs
    /// after the first and is answered from it, instead of finding it in progress and holding
    /// its partition. A value without one has none (it fails on its own in `handle`).
    fn key(&self, record: &KafkaRecord) -> Option<String> {
        PaymentEvent::event_id_of(&kafka::value_bytes(record)?)
    }
}

/// The batch path (`kafka::run_batch`): the valid payments of each round (the next record of
/// every partition) in one transaction (as few as DynamoDB's limits allow,
/// [`Ledger::post_batch`]), each answered as if posted alone in order; a record whose value is
/// not a payment fails alone.
impl BatchHandler<KafkaRecord> for Payments {
    async fn handle_batch(&self, records: &[&KafkaRecord], _context: &Context) -> Vec<RecordResult> {
        let parsed = records.iter().map(|record| payment(record).map_err(RecordError::from)).collect();
        payments::lambda::post_batch(&self.ledger, parsed).await
    }
}

/// The ordered path (`kafka::run_ordered`), the function's default: the whole batch's valid payments in one call and one
/// transaction (as few as DynamoDB's limits allow, [`Ledger::post_batch_in_lanes`]), each in
/// its topic-partition's lane, so a record never takes effect behind an earlier one of its
/// partition that may still take effect, whatever their accounts; a record whose value is not a
/// payment fails alone and holds nothing back.
impl OrderedBatchHandler<KafkaRecord> for Payments {
    async fn handle_ordered(&self, batch: &OrderedBatch<'_, KafkaRecord>, _context: &Context) -> Vec<RecordResult> {
        let parsed = batch.records().iter().map(|record| payment(record).map_err(RecordError::from)).collect();
        let lanes: Vec<Option<&str>> = (0..batch.len()).map(|at| batch.lane(at)).collect();
        payments::lambda::post_batch_in_lanes(&self.ledger, parsed, &lanes, payments::Delivery::Unknown).await
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use effectively_once_lambda::Retry;

    use super::*;

    fn record(value: Option<&str>) -> KafkaRecord {
        let mut record = KafkaRecord::default();
        record.topic = Some("payments".into());
        record.value = value.map(str::to_owned);
        record
    }

    fn encoded(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn a_value_that_is_no_payment_is_a_permanent_error_naming_why() {
        let cases = [
            (record(None), ValueError::Missing, "the record has no value"),
            (record(Some("not base64!")), ValueError::NotBase64, "the record's value is not base64"),
            (record(Some(&encoded(&[0xff, 0xfe]))), ValueError::NotUtf8, "the record's value is not UTF-8"),
        ];
        for (record, expected, reason) in cases {
            let error = payment(&record).unwrap_err();
            assert_eq!(error, expected);
            let error = RecordError::from(error);
            assert_eq!((error.retry, error.reason.as_str()), (Retry::Never, reason));
        }
        let zero = encoded(br#"{"event_id": "pay_1", "account_id": "acct_1", "amount_cents": 0, "currency": "USD"}"#);
        let error = payment(&record(Some(&zero))).unwrap_err();
        assert!(matches!(&error, ValueError::Invalid(invalid) if invalid.field == Some("amount_cents")), "{error:?}");
        let error = RecordError::from(error);
        assert_eq!(error.retry, Retry::Never);
        assert_eq!(error.reason, "invalid payment event: amount_cents: must not be zero");
    }

    #[test]
    fn the_batch_key_is_the_event_id_in_the_value_never_the_offset() {
        let config = aws_sdk_dynamodb::Config::builder().behavior_version_latest().build();
        let store = effectively_once_dynamodb::DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), "idem");
        let payments = Payments::new(Ledger::new(store, "ledger", None));
        let body = br#"{"event_id":"pay_1","account_id":"acct_1","amount_cents":100,"currency":"EUR"}"#;
        let (mut first, mut retry) = (record(Some(&encoded(body))), record(Some(&encoded(body))));
        (first.offset, retry.offset, retry.partition) = (7, 1_000, 3);
        assert_eq!(payments.key(&first).as_deref(), Some("pay_1"));
        assert_eq!(payments.key(&first), payments.key(&retry), "a producer retry elsewhere shares the key");
        assert_eq!(payments.key(&record(Some(&encoded(b"{not json")))), None);
        assert_eq!(payments.key(&record(Some("not base64!"))), None);
        assert_eq!(payments.key(&record(None)), None);
    }
}
