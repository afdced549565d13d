//! The transactional outbox: a receipt row written in the ledger's transaction, streamed (new
//! images) to the receipts relay, which sends the email once and marks the row.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use effectively_once::{StoreError, StoreErrorKind};
use effectively_once_dynamodb::classify;
use effectively_once_redact::redact_email;
use serde::Deserialize;

use crate::payment::PaymentEvent;

/// The row's partition key attribute (S): `receipt#{event_id}`.
pub const KEY: &str = "pk";

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
}

/// What the receipt needs, as the outbox row carries it. Deserialises from an item (with
/// `serde_dynamo`); the row's other attributes are ignored.
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

/// The row the ledger writes for an event with a `receipt_email`.
pub fn row_item(event: &PaymentEvent, email: &str, created_at: &str) -> HashMap<String, AttributeValue> {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    HashMap::from([
        (KEY.to_owned(), s(&row_key(&event.event_id))),
        ("kind".to_owned(), s("receipt")),
        ("event_id".to_owned(), s(&event.event_id)),
        ("account_id".to_owned(), s(&event.account_id)),
        ("amount_cents".to_owned(), AttributeValue::N(event.amount_cents.to_string())),
        ("currency".to_owned(), s(&event.currency)),
        ("receipt_email".to_owned(), s(email)),
        ("created_at".to_owned(), s(created_at)),
        ("status".to_owned(), s(RowStatus::Pending.as_str())),
    ])
}

impl ReceiptRow {
    /// Reads a row (a `GetItem`'s item) with `serde_dynamo`; a stream's new image deserialises
    /// the same way (`serde_dynamo::from_item`).
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Result<ReceiptRow, StoreError> {
        serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone())
            .map_err(|e| StoreError::new(StoreErrorKind::Malformed, format!("outbox row: {e}")))
    }

    /// The receipt email for this row.
    pub fn message(&self) -> crate::email::EmailMessage {
        let (verb, amount) =
            if self.amount_cents >= 0 { ("credited", self.amount_cents) } else { ("debited", -self.amount_cents) };
        crate::email::EmailMessage {
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

/// Whether an event's receipt row is still there (a consistent read of its key alone, 1 read
/// unit). The relay asks before sending: a row deleted after the stream captured it (an erasure
/// on the customer's request, a cleanup) must not be emailed.
pub async fn exists(client: &Client, table: &str, event_id: &str) -> Result<bool, StoreError> {
    let out = client
        .get_item()
        .table_name(table)
        .key(KEY, AttributeValue::S(row_key(event_id)))
        .projection_expression("#pk")
        .expression_attribute_names("#pk", KEY)
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| classify("GetItem", e))?;
    Ok(out.item().is_some())
}

/// Marks a row with the receipt's fate. Idempotent; a missing row is an error (`Malformed`).
pub async fn mark(
    client: &Client,
    table: &str,
    event_id: &str,
    status: RowStatus,
    message_id: Option<&str>,
    at: &str,
) -> Result<(), StoreError> {
    let mut update = client
        .update_item()
        .table_name(table)
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
        Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {
            Err(StoreError::new(StoreErrorKind::Malformed, format!("no outbox row for {event_id}")))
        }
        Err(e) => Err(classify("UpdateItem", e)),
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
}
