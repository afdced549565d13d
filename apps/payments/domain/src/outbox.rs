//! The transactional outbox: a receipt row written in the ledger's transaction, streamed (new
//! images) to the receipts relay, which sends the email once and marks the row.
//!
//! The table, not its stream, is the source of truth: a row stays `PENDING` until its receipt's
//! fate is marked on it, and while it does it carries [`PENDING_SHARD`], the partition key of the
//! sparse index [`PENDING_INDEX`], so the outbox sweeper finds the rows the stream never
//! delivered ([`Outbox::pending`]) without scanning the table.
//!
//! DynamoDB stays here: the relay reads a [`ReceiptRow`] out of a stream record
//! ([`ReceiptRow::from_stream_record`], the one place stream images are converted) and marks
//! the row through an [`Outbox`]; it never handles an attribute value or a raw client.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use effectively_once::{StoreError, StoreErrorKind};
use effectively_once_dynamodb::{classify_sdk_error, DynamoDbStore};
use serde::Deserialize;

use crate::payment::PaymentEvent;
use effectively_once::redact::{redact_email, redact_emails};

mod pending;

pub use pending::{Cursor, PendingPage, PendingRow};

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
    /// Not sent: the recipient is neither the account's receipt address nor allowed by the
    /// deployment's rule (`failure_reason` says which). Never retried.
    Refused,
    /// Not sent: the account had its receipts for the window already (`failure_reason` says
    /// the limit). Never retried: a held receipt sent later would arrive out of context.
    RateLimited,
}

impl RowStatus {
    /// Every state.
    pub const ALL: [RowStatus; 6] = [
        RowStatus::Pending,
        RowStatus::Sent,
        RowStatus::Failed,
        RowStatus::Ambiguous,
        RowStatus::Refused,
        RowStatus::RateLimited,
    ];

    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            RowStatus::Pending => "PENDING",
            RowStatus::Sent => "SENT",
            RowStatus::Failed => "FAILED",
            RowStatus::Ambiguous => "AMBIGUOUS",
            RowStatus::Refused => "REFUSED",
            RowStatus::RateLimited => "RATE_LIMITED",
        }
    }

    /// The state a stored form names.
    pub fn parse(stored: &str) -> Option<RowStatus> {
        RowStatus::ALL.into_iter().find(|status| status.as_str() == stored)
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
    /// The address the event asked the receipt to go to. `None` on a row read from the table
    /// once its receipt was sent, refused or limited: the address is removed then (it is
    /// personal data the row no longer needs). The relay decides the actual recipient
    /// (`receipts_relay`'s recipient rule), of which this is only the last choice.
    #[serde(default)]
    pub receipt_email: Option<String>,
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
            .field("receipt_email", &self.receipt_email.as_deref().map(redact_email))
            .field("created_at", &self.created_at)
            .finish()
    }
}

/// The row key of an event's receipt.
pub fn row_key(event_id: &str) -> String {
    format!("receipt#{event_id}")
}

/// The sparse index of the rows still `PENDING`: partition key [`PENDING_SHARD`], sort key
/// `created_at`. A row is in it from the ledger's write until its fate is marked (each mark
/// removes the attribute), so the index holds the receipts not settled yet, and nothing else.
pub const PENDING_INDEX: &str = "pending";

/// The row's attributes, beside the keys, that [`PENDING_INDEX`] projects: what a
/// [`ReceiptRow`] reads, so a swept row needs no read of the table before its status check.
pub const PENDING_PROJECTION: [&str; 5] = ["event_id", "account_id", "amount_cents", "currency", RECEIPT_EMAIL];

/// The attribute (S) holding a pending row's shard of [`PENDING_INDEX`]: `"0"` to
/// `"{PENDING_SHARDS - 1}"` ([`pending_shard`]). Present only while the row is `PENDING`.
pub const PENDING_SHARD: &str = "pending_shard";

/// How many partition keys the pending index spreads rows over. One key would take every
/// receipt's two index writes (the insert, the mark) on one partition, whose write limit then
/// throttles the ledger's transactions; eight take a few thousand receipts a second. Fixed: a
/// row written under a shard the sweeper no longer queries would never be found.
pub const PENDING_SHARDS: u32 = 8;

/// The shard of [`PENDING_INDEX`] an event's row is written under: FNV-1a of the event id, so
/// the ledger and any other writer agree without coordination, and the value never depends on
/// the Rust version (as the standard library's hasher may).
pub fn pending_shard(event_id: &str) -> u32 {
    let hash = event_id.bytes().fold(0x811c_9dc5_u32, |hash, byte| (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193));
    hash % PENDING_SHARDS
}

/// The row the ledger writes for an event with a `receipt_email`, `PENDING`.
pub fn row_item(event: &PaymentEvent, email: &str, created_at: &str) -> HashMap<String, AttributeValue> {
    ReceiptRow::new(event, email, created_at).to_item()
}

/// The `kind` attribute that tells a receipt row from other items in the table.
const KIND: &str = "receipt";

/// The attribute holding the event's address, removed once the receipt's fate is settled.
const RECEIPT_EMAIL: &str = "receipt_email";

/// The receipt's subject: fixed, so no producer-chosen text (an event id, an account id) ever
/// sits in the line a mail client shows first.
pub const RECEIPT_SUBJECT: &str = "Your payment receipt";

impl ReceiptRow {
    /// The receipt of `event`, for `email`, posted at `created_at`.
    pub fn new(event: &PaymentEvent, email: &str, created_at: &str) -> ReceiptRow {
        ReceiptRow {
            event_id: event.event_id.clone(),
            account_id: event.account_id.clone(),
            amount_cents: event.amount_cents,
            currency: event.currency.clone(),
            receipt_email: Some(email.to_owned()),
            created_at: created_at.to_owned(),
        }
    }

    /// The row as the ledger's transaction writes it: `PENDING`, keyed by the event, in the
    /// pending index.
    pub(crate) fn to_item(&self) -> HashMap<String, AttributeValue> {
        let string = |value: &str| AttributeValue::S(value.to_owned());
        let mut item = HashMap::from([
            (KEY.to_owned(), string(&row_key(&self.event_id))),
            ("kind".to_owned(), string(KIND)),
            ("event_id".to_owned(), string(&self.event_id)),
            ("account_id".to_owned(), string(&self.account_id)),
            ("amount_cents".to_owned(), AttributeValue::N(self.amount_cents.to_string())),
            ("currency".to_owned(), string(&self.currency)),
            ("created_at".to_owned(), string(&self.created_at)),
            ("status".to_owned(), string(RowStatus::Pending.as_str())),
            // In the pending index until the row's fate is marked.
            (PENDING_SHARD.to_owned(), string(&pending_shard(&self.event_id).to_string())),
        ]);
        if let Some(email) = &self.receipt_email {
            item.insert(RECEIPT_EMAIL.to_owned(), string(email));
        }
        item
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
        let malformed =
            |e: String| StoreError::new(StoreErrorKind::Malformed, format!("outbox row in the stream image: {e}"));
        let row: ReceiptRow = serde_dynamo::from_item(image.clone()).map_err(|e| malformed(e.to_string()))?;
        // Any writer of the outbox table can put a row: what the email shows is checked here,
        // not trusted because the ledger usually wrote it.
        row.check().map_err(malformed)?;
        Ok(Some(row))
    }

    /// Whether the fields the email shows, and the keys the relay builds, are what the ledger
    /// writes: ids in the payment contract's character set, an amount within its bounds, a
    /// currency of three upper-case letters, an RFC 3339 UTC time. The error names the field.
    pub fn check(&self) -> Result<(), String> {
        let id = |name: &str, value: &str| {
            let ok = (1..=200).contains(&value.len())
                && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '#' | '-'));
            if ok {
                Ok(())
            } else {
                Err(format!("{name} is not a payment id"))
            }
        };
        id("event_id", &self.event_id)?;
        id("account_id", &self.account_id)?;
        if self.amount_cents == 0 || self.amount_cents.unsigned_abs() > crate::MAX_AMOUNT_CENTS as u64 {
            return Err("amount_cents is out of bounds".into());
        }
        if !(self.currency.len() == 3 && self.currency.chars().all(|c| c.is_ascii_uppercase())) {
            return Err("currency is not three upper-case letters".into());
        }
        if !crate::time::is_utc_timestamp(&self.created_at) {
            return Err("created_at is not an RFC 3339 time".into());
        }
        Ok(())
    }

    /// Reads a row (a `GetItem`'s item).
    pub(crate) fn from_item(item: &HashMap<String, AttributeValue>) -> Result<ReceiptRow, StoreError> {
        serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone())
            .map_err(|e| StoreError::new(StoreErrorKind::Malformed, format!("outbox row: {e}")))
    }

    /// The receipt email for this row, to `to` (the recipient the relay chose). The subject is
    /// fixed ([`RECEIPT_SUBJECT`]) and the body shows only what [`check`](Self::check)
    /// validates: the amount, its currency and the day it was posted. Neither the event id nor
    /// the account id is shown, though the contract bounds both to `[A-Za-z0-9._:#-]`: that
    /// set still spells a host name (`pay.evil-site.example`), which mail clients turn into a
    /// link, and 200 characters of producer-chosen words. The customer's reference is the
    /// amount and the date; support finds the row by the SES message id stored on it.
    pub fn message(&self, to: &str) -> effectively_once_effects::EmailMessage {
        let (verb, amount) = if self.amount_cents >= 0 {
            ("credited", self.amount_cents.unsigned_abs())
        } else {
            ("debited", self.amount_cents.unsigned_abs())
        };
        let day = self.created_at.get(..10).unwrap_or_default();
        effectively_once_effects::EmailMessage {
            to: to.to_owned(),
            subject: RECEIPT_SUBJECT.to_owned(),
            text: format!(
                "Your account was {verb} {}.{:02} {} on {day} (UTC).\n\nThis is an automated receipt; no reply is needed.",
                amount / 100,
                amount % 100,
                self.currency,
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

    /// An event's row's status, or `None` when the row is gone (a consistent read of its key
    /// and status alone, 1 read unit). The relay asks before sending: a row deleted after the
    /// stream captured it (an erasure on the customer's request, a cleanup) must not be
    /// emailed, and a row already marked has its fate (a redelivered insert whose address
    /// the row no longer holds must neither send nor fail).
    pub async fn status(&self, event_id: &str) -> Result<Option<RowStatus>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(row_key(event_id)))
            .projection_expression("#pk, #status")
            .expression_attribute_names("#pk", KEY)
            .expression_attribute_names("#status", "status")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify_sdk_error("GetItem", e))?;
        let Some(item) = out.item() else { return Ok(None) };
        let status = match item.get("status") {
            Some(AttributeValue::S(stored)) => RowStatus::parse(stored),
            _ => None,
        };
        status.map(Some).ok_or_else(|| {
            StoreError::new(StoreErrorKind::Malformed, format!("outbox row {event_id}: no known status"))
        })
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
            .map_err(|e| classify_sdk_error("GetItem", e))?;
        out.item().map(OutboxRow::from_item).transpose()
    }

    /// Marks a row with the receipt's fate. Idempotent; a missing row is an error (`Malformed`:
    /// the update's only condition is the row's existence). Marking it `SENT` removes the
    /// event's address from the row in the same update: the row keeps what the receipt was
    /// (amount, date, SES message id), not where it went. `FAILED` and `AMBIGUOUS` keep it for
    /// the operator who checks them against SES's records. Every fate takes the row out of the
    /// pending index ([`PENDING_SHARD`] removed).
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
            .expression_attribute_names("#shard", PENDING_SHARD)
            .expression_attribute_values(":status", AttributeValue::S(status.as_str().into()))
            .expression_attribute_values(":at", AttributeValue::S(at.into()));
        let remove = if status == RowStatus::Sent { " REMOVE #shard, #email" } else { " REMOVE #shard" };
        if status == RowStatus::Sent {
            update = update.expression_attribute_names("#email", RECEIPT_EMAIL);
        }
        update = match message_id {
            Some(id) => update
                .update_expression(format!("SET #status = :status, marked_at = :at, message_id = :id{remove}"))
                .expression_attribute_values(":id", AttributeValue::S(id.into())),
            None => update.update_expression(format!("SET #status = :status, marked_at = :at{remove}")),
        };
        match update.send().await {
            Ok(_) => Ok(()),
            Err(error) if error.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
                Err(StoreError::new(StoreErrorKind::Malformed, format!("no outbox row for {event_id}")))
            }
            Err(error) => Err(classify_sdk_error("UpdateItem", error)),
        }
    }

    /// Marks a row still `PENDING` `FAILED`, with `reason` (addresses redacted here), for a
    /// permanent failure no retry changes. `Ok(false)`, nothing written, when the row is not
    /// pending: already marked (never over a receipt's recorded fate, `SENT` or `AMBIGUOUS`)
    /// or gone.
    pub async fn mark_failed(&self, event_id: &str, reason: &str, at: &str) -> Result<bool, StoreError> {
        self.mark_unsent(event_id, RowStatus::Failed, reason, at).await
    }

    /// Marks a row still `PENDING` `REFUSED` or `RATE_LIMITED` (nothing sent, by the relay's
    /// own rule), with `reason` (addresses redacted here), and removes the event's address:
    /// no receipt will ever go to it. `Ok(false)`, nothing written, when the row is not
    /// pending (already marked, or gone).
    pub async fn mark_held(
        &self,
        event_id: &str,
        status: RowStatus,
        reason: &str,
        at: &str,
    ) -> Result<bool, StoreError> {
        debug_assert!(matches!(status, RowStatus::Refused | RowStatus::RateLimited), "{status:?}");
        self.mark_unsent(event_id, status, reason, at).await
    }

    /// Marks the row keyed `key` (`receipt#{event_id}`) `FAILED` with `reason` (addresses
    /// redacted here) and takes it out of the pending index, on the condition that it is still
    /// `PENDING` and in the index: for a row that is not a receipt the relay may send (a field
    /// missing or out of bounds, read whole: [`Outbox::pending_row_at`]), which no retry changes
    /// and which would otherwise be read, counted and alarmed on by every sweep. `Ok(false)`,
    /// nothing written, when the row is marked (never over its fate), out of the index, or gone.
    pub async fn set_aside(&self, key: &str, reason: &str, at: &str) -> Result<bool, StoreError> {
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(key.into()))
            .condition_expression("attribute_exists(#shard) AND #status = :pending")
            .update_expression("SET #status = :to, marked_at = :at, failure_reason = :reason REMOVE #shard")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#shard", PENDING_SHARD)
            .expression_attribute_values(":pending", AttributeValue::S(RowStatus::Pending.as_str().into()))
            .expression_attribute_values(":to", AttributeValue::S(RowStatus::Failed.as_str().into()))
            .expression_attribute_values(":at", AttributeValue::S(at.into()))
            .expression_attribute_values(":reason", AttributeValue::S(redact_emails(reason)));
        updated(update.send().await)
    }

    /// Takes the row keyed `key` out of the pending index when it is not `PENDING` (a status
    /// another writer set, or a mark by a relay older than the index, that left
    /// [`PENDING_SHARD`]): the index holds the rows still to send, and one that stayed in it
    /// would be read by every sweep, ahead of the newer rows it hides. `Ok(false)`, nothing
    /// written, when the row is `PENDING`, out of the index already, or gone.
    pub async fn unindex(&self, key: &str) -> Result<bool, StoreError> {
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(key.into()))
            .condition_expression("attribute_exists(#shard) AND (attribute_not_exists(#status) OR #status <> :pending)")
            .update_expression("REMOVE #shard")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#shard", PENDING_SHARD)
            .expression_attribute_values(":pending", AttributeValue::S(RowStatus::Pending.as_str().into()));
        updated(update.send().await)
    }

    /// Marks a `PENDING` row `status` with `reason`, on the condition that it is still pending.
    async fn mark_unsent(&self, event_id: &str, status: RowStatus, reason: &str, at: &str) -> Result<bool, StoreError> {
        let mut set = "SET #status = :to, marked_at = :at, failure_reason = :reason REMOVE #shard".to_owned();
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(row_key(event_id)))
            .condition_expression("#status = :pending")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#shard", PENDING_SHARD)
            .expression_attribute_values(":pending", AttributeValue::S(RowStatus::Pending.as_str().into()))
            .expression_attribute_values(":to", AttributeValue::S(status.as_str().into()))
            .expression_attribute_values(":at", AttributeValue::S(at.into()))
            .expression_attribute_values(":reason", AttributeValue::S(redact_emails(reason)));
        if status != RowStatus::Failed {
            set.push_str(", #email");
            update = update.expression_attribute_names("#email", RECEIPT_EMAIL);
        }
        updated(update.update_expression(set).send().await)
    }
}

/// A conditional `UpdateItem`'s outcome: `true` written, `false` its condition failed.
pub(crate) fn updated<O>(
    result: Result<O, aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::update_item::UpdateItemError>>,
) -> Result<bool, StoreError> {
    match result {
        Ok(_) => Ok(true),
        Err(error) if error.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
        Err(error) => Err(classify_sdk_error("UpdateItem", error)),
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
        assert_eq!(row.receipt_email.as_deref(), Some("alice.smith@example.com"), "the row itself keeps the address");
        for text in [format!("{row:?}"), format!("{row:#?}"), format!("{:?}", Ok::<_, ()>(&row))] {
            assert!(!text.contains("alice.smith"), "{text}");
            assert!(
                text.contains("a***@example.com") && text.contains("pay_1") && text.contains("2026-11-30"),
                "{text}"
            );
        }
    }

    /// The ledger writes each row into the pending index, under a shard its event id alone
    /// decides. The values are pinned: a row written under a shard the sweeper does not read
    /// would never be swept.
    #[test]
    fn a_new_row_is_in_the_pending_index_under_a_shard_fixed_by_its_event_id() {
        let shards = ["pay_0001", "pay_0002", "", "acct:pay-9"].map(pending_shard);
        assert_eq!(shards, [5, 4, 5, 0]);
        let mut counts = [0; PENDING_SHARDS as usize];
        for i in 0..1000 {
            counts[pending_shard(&format!("pay_{i:04}")) as usize] += 1;
        }
        assert!(counts.iter().all(|n| (100..=150).contains(n)), "ids spread over every shard: {counts:?}");
        let event = PaymentEvent::parse(
            r#"{"event_id": "pay_0001", "account_id": "acct_1", "amount_cents": 5, "currency": "USD"}"#,
        )
        .unwrap();
        let item = row_item(&event, "a@example.com", "2026-11-30T10:00:00.000Z");
        assert_eq!(item[PENDING_SHARD], AttributeValue::S("5".into()));
        for attribute in PENDING_PROJECTION.into_iter().chain(["created_at", KEY]) {
            assert!(item.contains_key(attribute), "the index carries what a receipt row reads: {attribute}");
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
        assert_eq!(read.message("x@example.com"), row.message("x@example.com"));
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
            (row.receipt_email.as_deref(), row.created_at.as_str()),
            (Some("a@example.com"), "2026-11-18T11:06:40.123Z")
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
        for status in RowStatus::ALL {
            assert_eq!(RowStatus::parse(status.as_str()), Some(status));
        }
        // Sent: the address is gone from the row, which still reads.
        item.insert("status".into(), AttributeValue::S("SENT".into()));
        item.remove("receipt_email");
        assert_eq!(OutboxRow::from_item(&item).unwrap().receipt.receipt_email, None);
    }

    /// The subject is fixed and the body holds no producer-chosen id, only the validated
    /// amount, currency and date.
    #[test]
    fn the_receipt_shows_no_producer_ids() {
        let event = PaymentEvent::parse(
            r#"{"event_id": "Urgent:verify.at.evil-site.example", "account_id": "Call.support.now", "amount_cents": -120005, "currency": "EUR"}"#,
        )
        .unwrap();
        let row = ReceiptRow::new(&event, "a@example.com", "2026-11-30T10:00:00.000Z");
        let message = row.message("b@example.com");
        assert_eq!((message.to.as_str(), message.subject.as_str()), ("b@example.com", RECEIPT_SUBJECT));
        assert!(message.text.contains("debited 1200.05 EUR on 2026-11-30"), "{}", message.text);
        for id in ["evil-site", "Urgent", "Call.support"] {
            assert!(!message.text.contains(id) && !message.subject.contains(id), "{message:?}");
        }
    }

    /// A row any writer put in the outbox is checked before its fields reach an email.
    #[cfg(feature = "lambda")]
    #[test]
    fn an_image_whose_shown_fields_are_not_the_ledgers_is_malformed() {
        for (field, value) in [
            ("currency", r#"{"S": "Visit evil.example"}"#),
            ("created_at", r#"{"S": "tomorrow, call us"}"#),
            ("amount_cents", r#"{"N": "10000000000000"}"#),
            ("account_id", r#"{"S": "acct 1 <a href>"}"#),
        ] {
            let mut item = image("");
            item.insert(field.into(), serde_json::from_str(value).unwrap());
            let err = ReceiptRow::from_image(&item).unwrap_err();
            assert_eq!(err.kind(), StoreErrorKind::Malformed);
            assert!(err.to_string().contains(field), "{err}");
        }
    }
}
