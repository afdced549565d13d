//! The rows still `PENDING`, read from the sparse index [`PENDING_INDEX`] one shard and one
//! page at a time, oldest first: what the outbox sweeper sends when the stream did not.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{StoreError, StoreErrorKind};
use effectively_once_dynamodb::classify_sdk_error;

use super::{Outbox, ReceiptRow, KEY, PENDING_INDEX, PENDING_SHARD};

/// Where the next page of a shard starts: the query's `LastEvaluatedKey`, opaque.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor(HashMap<String, AttributeValue>);

/// One page of a shard of the pending index.
#[derive(Debug)]
pub struct PendingPage {
    /// The rows, oldest first.
    pub rows: Vec<PendingRow>,
    /// Where the shard's next page starts; `None` when this was its last.
    pub next: Option<Cursor>,
}

/// A row of the pending index. The index is eventually consistent: the row may have been marked
/// since (its sender reads its status, consistently, before sending).
#[derive(Debug)]
pub struct PendingRow {
    /// The row's key (`receipt#{event_id}`), to name it when it does not read.
    pub key: String,
    /// The receipt, or why the row is not one the relay may send ([`ReceiptRow::check`]):
    /// any writer of the table can put a row, and its shown fields are checked here as the
    /// stream's are.
    pub receipt: Result<ReceiptRow, StoreError>,
}

impl Outbox {
    /// Up to `limit` rows of `shard` (0 to [`PENDING_SHARDS`](super::PENDING_SHARDS) - 1) of
    /// the pending index written before `before` (RFC 3339, as `created_at`), oldest first, from
    /// `from` (the previous page's [`PendingPage::next`]) or the shard's start. One `Query` on
    /// the index; never a scan of the table.
    pub async fn pending(
        &self,
        shard: u32,
        before: &str,
        limit: i32,
        from: Option<Cursor>,
    ) -> Result<PendingPage, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(PENDING_INDEX)
            .key_condition_expression("#shard = :shard AND created_at < :before")
            .expression_attribute_names("#shard", PENDING_SHARD)
            .expression_attribute_values(":shard", AttributeValue::S(shard.to_string()))
            .expression_attribute_values(":before", AttributeValue::S(before.to_owned()))
            .limit(limit.max(1))
            .set_exclusive_start_key(from.map(|cursor| cursor.0))
            .send()
            .await
            .map_err(|e| classify_sdk_error("Query", e))?;
        let rows = out.items().iter().map(pending_row).collect();
        let next = out.last_evaluated_key().filter(|key| !key.is_empty()).map(|key| Cursor(key.clone()));
        Ok(PendingPage { rows, next })
    }

    /// The row keyed `key` as the table holds it now, read consistently and whole (the index
    /// is eventually consistent and holds a projection): `None` when it is gone or no longer
    /// `PENDING`. What the sweep decides a row by before it sets one aside.
    pub async fn pending_row_at(&self, key: &str) -> Result<Option<PendingRow>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(key.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify_sdk_error("GetItem", e))?;
        let pending = |item: &&HashMap<String, AttributeValue>| matches!(item.get("status"), Some(AttributeValue::S(status)) if status == super::RowStatus::Pending.as_str());
        Ok(out.item().filter(pending).map(pending_row))
    }
}

fn pending_row(item: &HashMap<String, AttributeValue>) -> PendingRow {
    let key = match item.get(KEY) {
        Some(AttributeValue::S(key)) => key.clone(),
        _ => String::new(),
    };
    let receipt = ReceiptRow::from_item(item).and_then(|row| {
        row.check().map_err(|e| StoreError::new(StoreErrorKind::Malformed, format!("outbox row {key}: {e}")))?;
        // The relay reads and marks the row by its event id: one keyed under another id would
        // be settled as that other row while it stayed in the index itself.
        if super::row_key(&row.event_id) != key {
            return Err(StoreError::new(
                StoreErrorKind::Malformed,
                format!("outbox row {key}: its event_id names another row"),
            ));
        }
        Ok(row)
    });
    PendingRow { key, receipt }
}
