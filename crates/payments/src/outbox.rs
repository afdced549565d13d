//! The transactional outbox: a receipt row written in the ledger's transaction, streamed (new
//! images) to the receipts relay, which sends the email once and marks the row.
//!
//! DynamoDB stays here: the relay reads a [`ReceiptRow`] out of a stream record
//! ([`ReceiptRow::from_stream_record`], the one place stream images are converted) and marks
//! the row through an [`Outbox`]; it never handles an attribute value or a raw client.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use effectively_once::{StoreError, StoreErrorKind};
use effectively_once_dynamodb::{store_error, DynamoDbStore};
use serde::Deserialize;

use crate::payment::PaymentEvent;
use effectively_once_redact::{redact_email, redact_emails};

/// The row's partition key attribute (S): `receipt#{event_id}`.
pub(crate) const KEY: &str = "pk";

/// A receipt row's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowStatus {
    /// Written with the ledger entry; the email is not sent yet.
    Pending,
    /// The email was sent (SES accepted it).
    Sent,
    /// The provider refused it for good (say, an unverified or suppressed address).
    Failed,
    /// A send may or may not have happened; not resent (at most once). For an operator.
    Ambiguous,
}

impl RowStatus {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            RowStatus::Pending => "PENDING",
            RowStatus::Sent => "SENT",
            RowStatus::Failed => "FAILED",
            RowStatus::Ambiguous => "AMBIGUOUS",
        }
    }

    /// The state a stored form names.
    pub fn parse(stored: &str) -> Option<RowStatus> {
        [RowStatus::Pending, RowStatus::Sent, RowStatus::Failed, RowStatus::Ambiguous]
            .into_iter()
            .find(|status| status.as_str() == stored)
    }
}

/// What the receipt needs, as the outbox row carries it. Read from a stream record
/// ([`from_stream_record`](ReceiptRow::from_stream_record)) or, with its fate, from the table
/// ([`Outbox::row`]); the row's other attributes are ignored.
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct ReceiptRow {
    /// The payment's event id.
    pub event_id: String,
    /// The account posted to.
    pub account_id: String,
    /// The amount posted.
    pub amount_cents: i64,
    /// Its currency.
    pub currency: String,
    /// The recipient.
    pub receipt_email: String,
    /// When the payment was posted (RFC 3339).
    pub created_at: String,
}

// By hand, so that `{:?}` in a log line, an error or a panic message never shows the address.
impl fmt::Debug for ReceiptRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceiptRow")
            .field("event_id", &self.event_id)
            .field("account_id", &self.account_id)
            .field("amount_cents", &self.amount_cents)
            .field("currency", &self.currency)
            .field("receipt_email", &redact_email(&self.receipt_email))
            .field("created_at", &self.created_at)
            .finish()
    }
}

/// The row key of an event's receipt.
pub fn row_key(event_id: &str) -> String {
    format!("receipt#{event_id}")
}

/// The row the ledger writes for an event with a `receipt_email`, `PENDING`.
pub fn row_item(event: &PaymentEvent, email: &str, created_at: &str) -> HashMap<String, AttributeValue> {
    ReceiptRow::new(event, email, created_at).to_item()
}

/// The `kind` attribute that tells a receipt row from other items in the table.
const KIND: &str = "receipt";

impl ReceiptRow {
    /// The receipt of `event`, for `email`, posted at `created_at`.
    pub fn new(event: &PaymentEvent, email: &str, created_at: &str) -> ReceiptRow {
        ReceiptRow {
            event_id: event.event_id.clone(),
            account_id: event.account_id.clone(),
            amount_cents: event.amount_cents,
            currency: event.currency.clone(),
            receipt_email: email.to_owned(),
            created_at: created_at.to_owned(),
        }
    }

    /// The row as the ledger's transaction writes it: `PENDING`, keyed by the event.
    pub(crate) fn to_item(&self) -> HashMap<String, AttributeValue> {
        let string = |value: &str| AttributeValue::S(value.to_owned());
        HashMap::from([
            (KEY.to_owned(), string(&row_key(&self.event_id))),
            ("kind".to_owned(), string(KIND)),
            ("event_id".to_owned(), string(&self.event_id)),
            ("account_id".to_owned(), string(&self.account_id)),
            ("amount_cents".to_owned(), AttributeValue::N(self.amount_cents.to_string())),
            ("currency".to_owned(), string(&self.currency)),
            ("receipt_email".to_owned(), string(&self.receipt_email)),
            ("created_at".to_owned(), string(&self.created_at)),
            ("status".to_owned(), string(RowStatus::Pending.as_str())),
        ])
    }

    /// The receipt row in a stream record's new image: `None` when the image is not a receipt
    /// row (its `kind` is not `"receipt"`); an error (`Malformed`, permanent) when it is one
    /// without the row's fields. Every DynamoDB type decodes (binary and sets included), and
    /// attributes the row does not name are ignored: another writer's attributes never hold
    /// the stream's checkpoint.
    #[cfg(feature = "lambda")]
    pub fn from_stream_record(
        record: &aws_lambda_events::event::dynamodb::EventRecord,
    ) -> Result<Option<ReceiptRow>, StoreError> {
        ReceiptRow::from_image(&record.change.new_image)
    }

    /// The receipt row in a stream image (see [`from_stream_record`](Self::from_stream_record)).
    #[cfg(feature = "lambda")]
    pub(crate) fn from_image(image: &serde_dynamo::Item) -> Result<Option<ReceiptRow>, StoreError> {
        if !matches!(image.get("kind"), Some(serde_dynamo::AttributeValue::S(kind)) if kind == KIND) {
            return Ok(None);
        }
        serde_dynamo::from_item(image.clone())
            .map(Some)
            .map_err(|e| StoreError::new(StoreErrorKind::Malformed, format!("outbox row in the stream image: {e}")))
    }

    /// Reads a row (a `GetItem`'s item).
    pub(crate) fn from_item(item: &HashMap<String, AttributeValue>) -> Result<ReceiptRow, StoreError> {
        serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone())
            .map_err(|e| StoreError::new(StoreErrorKind::Malformed, format!("outbox row: {e}")))
    }

    /// The receipt email for this row.
    pub fn message(&self) -> effectively_once_effects::EmailMessage {
        let (verb, amount) =
            if self.amount_cents >= 0 { ("credited", self.amount_cents) } else { ("debited", -self.amount_cents) };
        effectively_once_effects::EmailMessage {
            to: self.receipt_email.clone(),
            subject: format!("Receipt for payment {}", self.event_id),
            text: format!(
                "Account {} was {verb} {}.{:02} {} on {} (payment {}).",
                self.account_id,
                amount / 100,
                amount % 100,
                self.currency,
                self.created_at,
                self.event_id
            ),
        }
    }
}

/// A row as the table holds it: the receipt and its fate so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    /// What the receipt needs.
    pub receipt: ReceiptRow,
    /// Its state.
    pub status: RowStatus,
    /// SES's message id, once `SENT`.
    pub message_id: Option<String>,
    /// When the relay marked it (RFC 3339).
    pub marked_at: Option<String>,
    /// Why it failed for good (addresses redacted), once `FAILED` by a permanent failure.
    pub failure_reason: Option<String>,
}

/// The attributes the relay writes, read back with the row.
#[derive(Deserialize)]
struct Fate {
    status: String,
    message_id: Option<String>,
    marked_at: Option<String>,
    failure_reason: Option<String>,
}

impl OutboxRow {
    fn from_item(item: &HashMap<String, AttributeValue>) -> Result<OutboxRow, StoreError> {
        let malformed = |e: String| StoreError::new(StoreErrorKind::Malformed, format!("outbox row: {e}"));
        let fate: Fate =
            serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone()).map_err(|e| malformed(e.to_string()))?;
        let status = RowStatus::parse(&fate.status).ok_or_else(|| malformed(format!("status {:?}", fate.status)))?;
        Ok(OutboxRow {
            receipt: ReceiptRow::from_item(item)?,
            status,
            message_id: fate.message_id,
            marked_at: fate.marked_at,
            failure_reason: fate.failure_reason,
        })
    }
}

/// The outbox table, as the relay (and a test or a tool) uses it: whether a row is there, and
/// marking it with its receipt's fate.
#[derive(Debug, Clone)]
pub struct Outbox {
    client: Client,
    table: String,
}

impl Outbox {
    /// The outbox `table`, through `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Outbox { client, table: table.into() }
    }

    /// The outbox `table`, through the client of `store` (the email markers' store).
    pub fn beside(store: &DynamoDbStore, table: impl Into<String>) -> Self {
        Outbox::new(store.client().clone(), table)
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Whether an event's receipt row is still there (a consistent read of its key alone, 1
    /// read unit). The relay asks before sending: a row deleted after the stream captured it
    /// (an erasure on the customer's request, a cleanup) must not be emailed.
    pub async fn exists(&self, event_id: &str) -> Result<bool, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(row_key(event_id)))
            .projection_expression("#pk")
            .expression_attribute_names("#pk", KEY)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem", e))?;
        Ok(out.item().is_some())
    }

    /// An event's row with its fate, read consistently; `None` when there is none.
    pub async fn row(&self, event_id: &str) -> Result<Option<OutboxRow>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(row_key(event_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem", e))?;
        out.item().map(OutboxRow::from_item).transpose()
    }

    /// Marks a row with the receipt's fate. Idempotent; a missing row is an error (`Malformed`:
    /// the update's only condition is the row's existence).
    pub async fn mark(
        &self,
        event_id: &str,
        status: RowStatus,
        message_id: Option<&str>,
        at: &str,
    ) -> Result<(), StoreError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(row_key(event_id)))
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", KEY)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":status", AttributeValue::S(status.as_str().into()))
            .expression_attribute_values(":at", AttributeValue::S(at.into()));
        update = match message_id {
            Some(id) => update
                .update_expression("SET #status = :status, marked_at = :at, message_id = :id")
                .expression_attribute_values(":id", AttributeValue::S(id.into())),
            None => update.update_expression("SET #status = :status, marked_at = :at"),
        };
        match update.send().await {
            Ok(_) => Ok(()),
            Err(error) if error.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                Err(StoreError::new(StoreErrorKind::Malformed, format!("no outbox row for {event_id}")))
            }
            Err(error) => Err(store_error("UpdateItem", error)),
        }
    }

    /// Marks a row still `PENDING` `FAILED`, with `reason` (addresses redacted here), for a
    /// permanent failure no retry changes. `Ok(false)`, nothing written, when the row is not
    /// pending: already marked (never over a receipt's recorded fate, `SENT` or `AMBIGUOUS`)
    /// or gone.
    pub async fn mark_failed(&self, event_id: &str, reason: &str, at: &str) -> Result<bool, StoreError> {
        let written = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(row_key(event_id)))
            .condition_expression("#status = :pending")
            .update_expression("SET #status = :failed, marked_at = :at, failure_reason = :reason")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":pending", AttributeValue::S(RowStatus::Pending.as_str().into()))
            .expression_attribute_values(":failed", AttributeValue::S(RowStatus::Failed.as_str().into()))
            .expression_attribute_values(":at", AttributeValue::S(at.into()))
            .expression_attribute_values(":reason", AttributeValue::S(redact_emails(reason)))
            .send()
            .await;
        match written {
            Ok(_) => Ok(true),
            Err(error) if error.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                Ok(false)
            }
            Err(error) => Err(store_error("UpdateItem", error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_address() {
        let event = PaymentEvent::parse(
            r#"{"event_id": "pay_1", "account_id": "acct_1", "amount_cents": 5, "currency": "USD"}"#,
        )
        .unwrap();
        let row = ReceiptRow::from_item(&row_item(&event, "alice.smith@example.com", "2026-11-30T10:00:00Z")).unwrap();
        assert_eq!(row.receipt_email, "alice.smith@example.com", "the row itself keeps the address");
        for text in [format!("{row:?}"), format!("{row:#?}"), format!("{:?}", Ok::<_, ()>(&row))] {
            assert!(!text.contains("alice.smith"), "{text}");
            assert!(
                text.contains("a***@example.com") && text.contains("pay_1") && text.contains("2026-11-30"),
                "{text}"
            );
        }
    }

    /// A stream record (as Lambda delivers it, DynamoDB JSON) whose new image is `image`.
    #[cfg(feature = "lambda")]
    fn record(image: serde_json::Value) -> aws_lambda_events::event::dynamodb::EventRecord {
        serde_json::from_value(serde_json::json!({
            "eventID": "ev-1",
            "eventName": "INSERT",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": {
                "ApproximateCreationDateTime": 1795000000,
                "Keys": {"pk": image["pk"].clone()},
                "NewImage": image,
                "SequenceNumber": "111000000000000000000001",
                "SizeBytes": 300,
                "StreamViewType": "NEW_IMAGE"
            },
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:000000000000:table/outbox/stream/2026-11-18T00:00:00.000"
        }))
        .unwrap()
    }

    /// Row to item (as the ledger writes it) to stream image (the SDK's attribute values as
    /// the stream's DynamoDB JSON) to row: the same row.
    #[cfg(feature = "lambda")]
    #[test]
    fn a_row_round_trips_through_its_item_and_stream_image() {
        let event = PaymentEvent::parse(
            r#"{"event_id": "pay_rt", "account_id": "acct_9", "amount_cents": -1250, "currency": "EUR"}"#,
        )
        .unwrap();
        let row = ReceiptRow::new(&event, "bob@example.com", "2026-11-18T11:06:40.123Z");
        let item = row.to_item();
        assert_eq!(ReceiptRow::from_item(&item).unwrap(), row, "item to row");
        let image = serde_json::to_value(serde_dynamo::Item::from(item)).unwrap();
        assert_eq!(image["amount_cents"], serde_json::json!({"N": "-1250"}), "{image}");
        assert_eq!(image["status"], serde_json::json!({"S": "PENDING"}));
        let read = ReceiptRow::from_stream_record(&record(image)).unwrap().expect("a receipt row");
        assert_eq!(read, row);
        assert_eq!(read.message(), row.message());
    }

    /// A receipt row's new image in DynamoDB JSON, with `extra` attributes of the caller's.
    #[cfg(feature = "lambda")]
    fn image(extra: &str) -> serde_dynamo::Item {
        serde_json::from_str(&format!(
            r#"{{"pk": {{"S": "receipt#pay_1"}}, "kind": {{"S": "receipt"}}, "event_id": {{"S": "pay_1"}},
                "account_id": {{"S": "acct_1"}}, "amount_cents": {{"N": "-1250"}}, "currency": {{"S": "USD"}},
                "receipt_email": {{"S": "a@example.com"}}, "created_at": {{"S": "2026-11-18T11:06:40.123Z"}},
                "status": {{"S": "PENDING"}}{extra}}}"#
        ))
        .unwrap()
    }

    /// Every DynamoDB type in an image decodes (binary and number sets were rejected, which
    /// held the stream's checkpoint); attributes the row does not name are ignored.
    #[cfg(feature = "lambda")]
    #[test]
    fn an_image_with_every_attribute_type_reads_as_its_row() {
        let extra = r#", "blob": {"B": "AAEC"}, "numbers": {"NS": ["1", "2.5", "-3e2"]},
            "blobs": {"BS": ["AAE=", "Ag=="]}, "strings": {"SS": ["a", "b"]},
            "list": {"L": [{"N": "1"}, {"B": "AA=="}, {"NULL": true}, {"L": []}]},
            "map": {"M": {"x": {"BOOL": false}, "y": {"NS": ["3"]}, "z": {"M": {}}}},
            "nothing": {"NULL": true}, "flag": {"BOOL": true}"#;
        let row = ReceiptRow::from_image(&image(extra)).unwrap().expect("a receipt row");
        assert_eq!(row, ReceiptRow::from_image(&image("")).unwrap().unwrap(), "the extra attributes change nothing");
        assert_eq!(
            (row.event_id.as_str(), row.account_id.as_str(), row.amount_cents, row.currency.as_str()),
            ("pay_1", "acct_1", -1250, "USD")
        );
        assert_eq!(
            (row.receipt_email.as_str(), row.created_at.as_str()),
            ("a@example.com", "2026-11-18T11:06:40.123Z")
        );
    }

    #[cfg(feature = "lambda")]
    #[test]
    fn only_receipt_rows_are_read_and_a_receipt_row_needs_its_fields() {
        let mut other = image("");
        other.insert("kind".into(), serde_dynamo::AttributeValue::S("audit".into()));
        assert_eq!(ReceiptRow::from_image(&other).unwrap(), None);
        other.insert("kind".into(), serde_dynamo::AttributeValue::N("1".into()));
        assert_eq!(ReceiptRow::from_image(&other).unwrap(), None);
        other.remove("kind");
        assert_eq!(ReceiptRow::from_image(&other).unwrap(), None);
        let mut broken = image("");
        broken.remove("amount_cents");
        let err = ReceiptRow::from_image(&broken).unwrap_err().to_string();
        assert!(err.contains("amount_cents"), "{err}");
        broken.insert("amount_cents".into(), serde_dynamo::AttributeValue::S("many".into()));
        assert!(ReceiptRow::from_image(&broken).is_err());
    }

    #[test]
    fn a_stored_row_reads_with_its_fate() {
        let event = PaymentEvent::parse(
            r#"{"event_id": "pay_2", "account_id": "acct_1", "amount_cents": 5, "currency": "USD"}"#,
        )
        .unwrap();
        let mut item = row_item(&event, "a@example.com", "2026-11-30T10:00:00Z");
        let pending = OutboxRow::from_item(&item).unwrap();
        assert_eq!((pending.status, pending.message_id, pending.failure_reason), (RowStatus::Pending, None, None));
        item.insert("status".into(), AttributeValue::S("SENT".into()));
        item.insert("message_id".into(), AttributeValue::S("m-1".into()));
        item.insert("marked_at".into(), AttributeValue::S("2026-11-30T10:00:01Z".into()));
        let sent = OutboxRow::from_item(&item).unwrap();
        assert_eq!((sent.status, sent.message_id.as_deref()), (RowStatus::Sent, Some("m-1")));
        assert_eq!(sent.receipt.event_id, "pay_2");
        item.insert("status".into(), AttributeValue::S("LOST".into()));
        assert_eq!(OutboxRow::from_item(&item).unwrap_err().kind(), StoreErrorKind::Malformed);
        for status in [RowStatus::Pending, RowStatus::Sent, RowStatus::Failed, RowStatus::Ambiguous] {
            assert_eq!(RowStatus::parse(status.as_str()), Some(status));
        }
    }
}
