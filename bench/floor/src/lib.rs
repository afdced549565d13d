//! The floor of `make bench` (issue 26, item 2): what it costs to do the payments consumer's work
//! and nothing more. It reads the same SQS batch and writes the same ledger items as
//! `payments::Ledger` (`apps/payments/domain/src/ledger.rs`), an entry per event and one balance update
//! per account, in one `TransactWriteItems` per batch (a new one every 100 actions), with no
//! idempotency at all: no record, no condition, no replay, no answers remembered. A redelivered
//! message is posted again, and a debit may take a balance below zero: this is a yardstick,
//! never a consumer to run.
//!
//! With a record table ([`handle`]'s `records`; the binary's `FLOOR_RECORD=1`, table from
//! `IDEMPOTENCY_TABLE`), the floor also puts, in the same transaction, the least record the
//! contract's duplicate detection needs: per event an item `id` = `payments#{event_id}`, `status`
//! = `COMPLETED`, `payload_hash` = `v2:` and the hex SHA-256 of the message body (a stand-in, of
//! the same length, for ours' hash of the canonical JSON), `response` = `{"outcome":"applied"}`,
//! conditioned on `attribute_not_exists(#i)`. A record is an action like any other in the
//! 100-action split. Nothing else: no replay and no reading of cancellation reasons, so an event
//! whose record exists cancels its transaction and fails the batch, like any other error. A batch
//! of several transactions whose later one fails keeps its earlier ones, so its redelivery is
//! cancelled by their records for good and its later events are never posted: one more reason
//! this is a yardstick for first deliveries, never a consumer. Ours'
//! record put carries more (`ReturnValuesOnConditionCheckFailure` `ALL_OLD`, to tell a duplicate
//! from key reuse without a read; the claim's longer condition, which also takes over expired and
//! abandoned records; and the record's expiry, lease and owner), so this mode bounds from below
//! what a consumer that writes the record atomically with the entry can cost.

use std::collections::HashSet;
use std::num::NonZeroU8;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use time::format_description::well_known::iso8601::{Config, EncodedConfig, TimePrecision};
use time::format_description::well_known::Iso8601;
use time::OffsetDateTime;

/// DynamoDB's limit of actions in one `TransactWriteItems`.
pub const MAX_ACTIONS: usize = 100;

/// The largest body read: a payment event is a few hundred bytes.
const MAX_BODY: usize = 16 * 1024;

/// The largest absolute amount, in cents (contract: payment event).
const MAX_AMOUNT_CENTS: i64 = 1_000_000_000_000;

/// The payment event's fields the ledger stores; unknown fields (`receipt_email`) are ignored.
#[derive(Deserialize)]
struct Payment {
    event_id: String,
    account_id: String,
    amount_cents: i64,
    currency: String,
}

impl Payment {
    /// The body as a payment, if it is one by the contract's rules.
    fn parse(body: &str) -> Option<Payment> {
        if body.len() > MAX_BODY {
            return None;
        }
        let payment: Payment = serde_json::from_str(body).ok()?;
        let id = |s: &str| {
            (1..=200).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:#-".contains(&b))
        };
        let valid = id(&payment.event_id)
            && id(&payment.account_id)
            && payment.amount_cents != 0
            && payment.amount_cents.abs() <= MAX_AMOUNT_CENTS
            && payment.currency.len() == 3
            && payment.currency.bytes().all(|b| b.is_ascii_uppercase());
        valid.then_some(payment)
    }
}

/// The key prefix of the payments consumer's records (`payments::ledger::PREFIX`).
const RECORD_PREFIX: &str = "payments#";

/// The response ours stores for an applied payment (`payments::Posting::Applied`, serialised).
const APPLIED: &str = r#"{"outcome":"applied"}"#;

/// One transaction's worth: its puts (each event's entry, then its record when there is one),
/// and per account (in order of first appearance) the sum, count and currency its balance update
/// adds.
#[derive(Default)]
struct Chunk {
    puts: Vec<TransactWriteItem>,
    accounts: Vec<(String, i64, i64, String)>,
}

impl Chunk {
    fn actions(&self) -> usize {
        self.puts.len() + self.accounts.len()
    }
}

/// Handles one SQS batch: writes every valid message's entry and its account's balance, and
/// reports the invalid messages as failed. With `records` (a table), also puts each event's
/// record there (see the crate's documentation). A failed write fails the whole batch (SQS
/// redelivers it; the floor has no way to tell what was written).
pub async fn handle(
    client: &Client,
    table: &str,
    records: Option<&str>,
    event: SqsEvent,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let posted_at = rfc3339(OffsetDateTime::now_utc());
    let mut response = SqsBatchResponse::default();
    let mut chunks = vec![Chunk::default()];
    // Not idempotency: DynamoDB refuses two actions on one item in a transaction, so an event id
    // twice in the batch is written once.
    let mut ids = HashSet::new();
    for message in &event.records {
        let body = message.body.as_deref();
        let Some(payment) = body.and_then(Payment::parse) else {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = message.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
            continue;
        };
        if !ids.insert(payment.event_id.clone()) {
            continue;
        }
        let mut chunk = chunks.last_mut().expect("one chunk at least");
        let known = chunk.accounts.iter().any(|(a, ..)| *a == payment.account_id);
        let puts = 1 + usize::from(records.is_some());
        if chunk.actions() + puts + usize::from(!known) > MAX_ACTIONS {
            chunks.push(Chunk::default());
            chunk = chunks.last_mut().expect("just pushed");
        }
        chunk.puts.push(entry(table, &payment, &posted_at)?);
        if let Some(records) = records {
            chunk.puts.push(record(records, &payment.event_id, body.unwrap_or_default())?);
        }
        match chunk.accounts.iter_mut().find(|(a, ..)| *a == payment.account_id) {
            Some((_, sum, count, _)) => {
                *sum += payment.amount_cents;
                *count += 1;
            }
            None => chunk.accounts.push((payment.account_id, payment.amount_cents, 1, payment.currency)),
        }
    }
    for chunk in chunks {
        if chunk.puts.is_empty() {
            continue;
        }
        let mut items = chunk.puts;
        for (account, sum, count, currency) in &chunk.accounts {
            items.push(balance(table, account, *sum, *count, currency)?);
        }
        client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map_err(|e| format!("TransactWriteItems: {}", DisplayErrorContext(e)))?;
    }
    Ok(response)
}

/// The entry item (contract: `pk`, `sk`, `amount_cents`, `currency`, `event_id`, `posted_at`).
fn entry(table: &str, payment: &Payment, posted_at: &str) -> Result<TransactWriteItem, lambda_runtime::Error> {
    let put = Put::builder()
        .table_name(table)
        .item("pk", s(format!("account#{}", payment.account_id)))
        .item("sk", s(format!("entry#{}", payment.event_id)))
        .item("amount_cents", n(payment.amount_cents))
        .item("currency", s(payment.currency.clone()))
        .item("event_id", s(payment.event_id.clone()))
        .item("posted_at", s(posted_at.to_owned()))
        .build()?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// The event's record: what a duplicate is detected by, and nothing more (see the crate's
/// documentation for what ours adds).
fn record(table: &str, event_id: &str, body: &str) -> Result<TransactWriteItem, lambda_runtime::Error> {
    let put = Put::builder()
        .table_name(table)
        .item("id", s(format!("{RECORD_PREFIX}{event_id}")))
        .item("status", s("COMPLETED".to_owned()))
        .item("payload_hash", s(format!("v2:{}", hex::encode(Sha256::digest(body.as_bytes())))))
        .item("response", s(APPLIED.to_owned()))
        // A record already there is a duplicate (or key reuse): the transaction is cancelled.
        .condition_expression("attribute_not_exists(#i)")
        .expression_attribute_names("#i", "id")
        .build()?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// The balance update (contract: `balance_cents`, `entry_count`, `currency`), unconditioned.
fn balance(
    table: &str,
    account: &str,
    sum: i64,
    count: i64,
    currency: &str,
) -> Result<TransactWriteItem, lambda_runtime::Error> {
    let update = Update::builder()
        .table_name(table)
        .key("pk", s(format!("account#{account}")))
        .key("sk", s("balance".to_owned()))
        .update_expression(
            "SET #balance = if_not_exists(#balance, :zero) + :amount, #currency = if_not_exists(#currency, :currency) \
             ADD #count :count",
        )
        .expression_attribute_names("#balance", "balance_cents")
        .expression_attribute_names("#currency", "currency")
        .expression_attribute_names("#count", "entry_count")
        .expression_attribute_values(":zero", n(0))
        .expression_attribute_values(":amount", n(sum))
        .expression_attribute_values(":count", n(count))
        .expression_attribute_values(":currency", s(currency.to_owned()))
        .build()?;
    Ok(TransactWriteItem::builder().update(update).build())
}

fn s(value: String) -> AttributeValue {
    AttributeValue::S(value)
}

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as the payments crate stores `posted_at`.
const MILLIS_UTC: EncodedConfig =
    Config::DEFAULT.set_time_precision(TimePrecision::Second { decimal_digits: NonZeroU8::new(3) }).encode();

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Iso8601::<MILLIS_UTC>).unwrap_or_default()
}
