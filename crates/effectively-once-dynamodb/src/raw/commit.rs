//! Building a commit-once transaction: a [`Commit`] of named [`Write`]s and a record placed
//! on its own ([`Placement::Own`]) or carried by one of the writes, turned into the actions
//! sent; apart from sending, so what a transaction holds reads without how it is answered.

use std::borrow::Cow;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use effectively_once::{Config, Record, Status, StoreError};

use super::{misuse, unbuilt};
use crate::item::{attr, carried, into_item};
use crate::store::DynamoDbStore;
use crate::transaction::{check_limits, WriteUnits};

/// [`RECORD_CONDITION`]'s placeholders: the record's attributes.
const RECORD_NAMES: [(&str, &str); 4] =
    [("#i", attr::ID), ("#e", attr::EXPIRATION), ("#t", attr::STATUS), ("#l", attr::LEASE_EXPIRES_AT)];

/// The claim condition ([`crate::store`]'s), with one-letter placeholders: a batch's
/// transaction carries it once per record, and every byte of a request is serialised, signed
/// and SHA-256-hashed (about 80 bytes less a record than with the claim's own names).
pub(crate) const RECORD_CONDITION: &str = "attribute_not_exists(#i) OR #e < :s OR (#t = :p AND #l < :m)";

/// A named action of a commit-once transaction: the name says which condition fired when the
/// transaction is cancelled.
#[derive(Debug, Clone)]
pub struct Write {
    pub(super) name: Cow<'static, str>,
    item: TransactWriteItem,
}

impl Write {
    /// Names an action.
    pub fn new(name: impl Into<Cow<'static, str>>, item: TransactWriteItem) -> Self {
        Write { name: name.into(), item }
    }

    /// The action's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The action.
    pub fn item(&self) -> &TransactWriteItem {
        &self.item
    }

    /// The action as sent.
    pub fn into_item(self) -> TransactWriteItem {
        self.item
    }
}

/// Where the idempotency record lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// A completed record of its own in the store's table: one more item (2 write units),
    /// unique per key across everything, ending with the dedup window (TTL).
    Own,
    /// On the caller's `Put` named `write`, which must be keyed by the business id already
    /// (a ledger entry keyed by the event id): no extra item, and the record lasts as long as
    /// the item. The put gets the condition `attribute_not_exists(key_attribute)`.
    Carried {
        /// The name of the carrying `Put`.
        write: Cow<'static, str>,
        /// A key attribute of the carrier's table.
        key_attribute: Cow<'static, str>,
    },
}

/// One commit-once transaction.
#[derive(Debug, Clone)]
pub struct Commit {
    record: Record,
    /// `None` until set: the record then lives the default dedup window from the time it is
    /// sent, never 0, which would write a record born expired (claimable at once, so a second
    /// commit of the same key would be `Fresh` again).
    expiration_s: Option<u64>,
    placement: Placement,
    guard: bool,
    pub(super) writes: Vec<Write>,
}

impl Commit {
    /// A transaction completing `id` with `response` (JSON) for a payload with `payload_hash`.
    /// An own record ([`Placement::Own`]) lives the default dedup window
    /// (`Config::default().dedup_window()`, 14 days) from the time it is sent, unless
    /// [`Commit::expiration_s`] says otherwise.
    pub fn new(id: impl Into<String>, payload_hash: impl Into<String>, response: impl Into<String>) -> Self {
        Commit {
            record: Record::completed(id, payload_hash, Some(response.into()), 0),
            expiration_s: None,
            placement: Placement::Own,
            guard: false,
            writes: Vec::new(),
        }
    }

    /// Where the record lives (default [`Placement::Own`]).
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// End of the dedup window of an own record, in seconds since the epoch
    /// ([`NEVER_EXPIRES`](crate::NEVER_EXPIRES) for a record as lasting as the effect it guards).
    pub fn expiration_s(mut self, expiration_s: u64) -> Self {
        self.expiration_s = Some(expiration_s);
        self
    }

    /// The record as written at `now_ms`.
    fn record_at(&self, now_ms: u64) -> Record {
        let expiration_s =
            self.expiration_s.unwrap_or_else(|| now_ms / 1000 + Config::default().dedup_window().as_secs());
        Record { expiration_s, ..self.record.clone() }
    }

    /// With a carried record, also check that the store's table holds no live record for the
    /// key: one written apart from any transaction, such as a recorded business rejection
    /// ([`DynamoDbStore::record_outcome`]), so a duplicate of a rejected event is not applied
    /// later when the condition that rejected it no longer holds. Costs one more item.
    pub fn guard_recorded_outcome(mut self, guard: bool) -> Self {
        self.guard = guard;
        self
    }

    /// Adds an action.
    pub fn write(mut self, write: Write) -> Self {
        self.writes.push(write);
        self
    }

    /// The record id.
    pub fn id(&self) -> &str {
        &self.record.id
    }

    /// The action of the write at `index`, in the order the writes were added.
    pub(crate) fn action(&self, index: usize) -> Option<&TransactWriteItem> {
        self.writes.get(index).map(Write::item)
    }

    /// The actions as sent, with the record's own action (the own put, or the guard) last.
    pub(crate) fn actions(&self, store: &DynamoDbStore, now_ms: u64) -> Result<Vec<TransactWriteItem>, StoreError> {
        self.clone().into_actions(store, now_ms)
    }

    /// [`Commit::actions`], moving the writes' items into the actions rather than copying them:
    /// a batch builds every member's actions once, and its items are most of what it sends.
    pub(crate) fn into_actions(self, store: &DynamoDbStore, now_ms: u64) -> Result<Vec<TransactWriteItem>, StoreError> {
        if let Placement::Carried { write, .. } = &self.placement {
            if !self.writes.iter().any(|w| w.name == *write) {
                return Err(misuse(format!("no write named {write} to carry the record")));
            }
        }
        let record = self.record_action(store, now_ms)?;
        let mut actions = Vec::with_capacity(self.writes.len() + 1);
        for write in self.writes {
            match &self.placement {
                Placement::Carried { write: carrier, key_attribute } if *carrier == write.name => {
                    actions.push(carry(&self.record, &write, key_attribute)?);
                }
                _ => actions.push(write.item),
            }
        }
        actions.extend(record);
        check_limits(&actions)?;
        Ok(actions)
    }

    /// The record's own action: its put (an own record), a check that no record was recorded
    /// apart (a guarded carried record), or none.
    fn record_action(&self, store: &DynamoDbStore, now_ms: u64) -> Result<Option<TransactWriteItem>, StoreError> {
        let names: HashMap<String, String> =
            RECORD_NAMES.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let values = HashMap::from([
            (":s".to_owned(), AttributeValue::N((now_ms / 1000).to_string())),
            (":m".to_owned(), AttributeValue::N(now_ms.to_string())),
            (":p".to_owned(), AttributeValue::S(Status::InProgress.as_str().into())),
        ]);
        if self.placement == Placement::Own {
            // The same condition as a claim: no live record, so a duplicate's transaction is
            // cancelled by this action and its ALL_OLD item is the record to replay.
            let put = Put::builder()
                .table_name(store.table())
                .set_item(Some(into_item(self.record_at(now_ms))))
                .condition_expression(RECORD_CONDITION)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .build()
                .map_err(unbuilt)?;
            return Ok(Some(TransactWriteItem::builder().put(put).build()));
        }
        if !self.guard {
            return Ok(None);
        }
        let check = ConditionCheck::builder()
            .table_name(store.table())
            .key(attr::ID, AttributeValue::S(self.record.id.clone()))
            .condition_expression(RECORD_CONDITION)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(unbuilt)?;
        Ok(Some(TransactWriteItem::builder().condition_check(check).build()))
    }
    /// The indices of the actions whose failed condition means "a record exists".
    pub(super) fn record_indices(&self) -> Vec<usize> {
        let mut indices = Vec::new();
        if let Placement::Carried { write, .. } = &self.placement {
            indices.extend(self.writes.iter().position(|w| w.name == *write));
            if self.guard {
                indices.push(self.writes.len());
            }
        } else {
            indices.push(self.writes.len());
        }
        indices
    }

    /// Modelled write units of this transaction: committed, and cancelled (see [`WriteUnits`]).
    pub fn write_units(&self, store: &DynamoDbStore) -> Result<WriteUnits, StoreError> {
        Ok(WriteUnits::of(&self.actions(store, 0)?))
    }
}

/// `write`'s put with `record` carried on its item, on the condition that the item is absent.
fn carry(record: &Record, write: &Write, key_attribute: &str) -> Result<TransactWriteItem, StoreError> {
    let Some(put) = write.item.put() else {
        return Err(misuse(format!("write {} carries the record but is not a Put", write.name)));
    };
    let mut item = put.item().clone();
    if let Some(name) = item.keys().find(|name| name.starts_with(carried::RESERVED_PREFIX)) {
        return Err(misuse(format!(
            "write {} carries the record but its item has the attribute {name}: the prefix {} is reserved for the record",
            write.name,
            carried::RESERVED_PREFIX
        )));
    }
    item.insert(carried::KEY.into(), AttributeValue::S(record.id.clone()));
    item.insert(carried::PAYLOAD_HASH.into(), AttributeValue::S(record.payload_hash.clone()));
    if let Some(response) = &record.response {
        item.insert(carried::RESPONSE.into(), AttributeValue::S(response.clone()));
    }
    let mut names = put.expression_attribute_names().cloned().unwrap_or_default();
    names.insert("#carrier_key".into(), key_attribute.to_owned());
    // The carrier is keyed by the business id, so its existence is the duplicate test; its
    // ALL_OLD image carries the first delivery's hash and response.
    let condition = match put.condition_expression() {
        Some(own) => format!("attribute_not_exists(#carrier_key) AND ({own})"),
        None => "attribute_not_exists(#carrier_key)".to_owned(),
    };
    let put = Put::builder()
        .table_name(put.table_name())
        .set_item(Some(item))
        .condition_expression(condition)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(put.expression_attribute_values().cloned())
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(unbuilt)?;
    Ok(TransactWriteItem::builder().put(put).build())
}

#[cfg(test)]
mod tests;
