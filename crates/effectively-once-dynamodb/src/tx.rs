//! The writes of one commit-once transaction, typed: [`Tx`] holds the caller's puts, updates
//! and checks on [`Table`]s, what a failed condition means ([`Tx::otherwise`]) and where the
//! record lives, and becomes a [`Commit`] for the store to send.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::builders::{ConditionCheckBuilder, UpdateBuilder};
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use effectively_once::{Error, Key, StoreError, StoreErrorKind};
use serde::Serialize;

use crate::item::NEVER_EXPIRES;
use crate::otherwise::{item_of, put_action, unbuilt, update_action, Otherwise};
use crate::raw::{Commit, Placement, Write};

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// A table a transaction writes to: its name and key attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    name: String,
    partition_key: String,
    sort_key: Option<String>,
}

impl Table {
    /// A table whose partition key attribute is `partition_key`.
    pub fn new(name: impl Into<String>, partition_key: impl Into<String>) -> Self {
        Table { name: name.into(), partition_key: partition_key.into(), sort_key: None }
    }

    /// With a sort key attribute.
    pub fn with_sort_key(mut self, sort_key: impl Into<String>) -> Self {
        self.sort_key = Some(sort_key.into());
        self
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The partition key attribute.
    pub fn partition_key(&self) -> &str {
        &self.partition_key
    }

    /// The sort key attribute, if any.
    pub fn sort_key(&self) -> Option<&str> {
        self.sort_key.as_deref()
    }
}

/// A write added to a [`Tx`]: the handle [`Tx::otherwise`] and [`Tx::carry_record`] take, so a
/// write is named by the value that made it, never by a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriteId(usize);

pub(crate) type OtherwiseFn<R> = Box<dyn FnOnce(Option<&Item>) -> Otherwise<R> + Send>;

/// How long the record lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifetime {
    /// The config's dedup window, from the commit.
    Window,
    /// As long as the effect.
    Never,
}

/// The writes of one commit-once transaction, built in
/// [`CommitOnce::commit_once`](crate::CommitOnce::commit_once)'s closure. At most 99 writes with
/// an own record (DynamoDB takes 100 actions), checked before sending.
pub struct Tx<R> {
    pub(crate) writes: Vec<Write>,
    /// The table of each put, for [`Tx::carry_record`].
    puts: HashMap<usize, Table>,
    otherwise: HashMap<usize, OtherwiseFn<R>>,
    pub(crate) carrier: Option<usize>,
    lifetime: Lifetime,
    guard: bool,
}

impl<R> std::fmt::Debug for Tx<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx")
            .field("writes", &self.writes)
            .field("carrier", &self.carrier)
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl<R> Tx<R> {
    pub(crate) fn new() -> Self {
        Tx {
            writes: Vec::new(),
            puts: HashMap::new(),
            otherwise: HashMap::new(),
            carrier: None,
            lifetime: Lifetime::Window,
            guard: false,
        }
    }

    fn push(&mut self, item: TransactWriteItem) -> WriteId {
        let id = WriteId(self.writes.len());
        self.writes.push(Write::new(format!("write {}", id.0), item));
        id
    }

    /// Puts `item` (any `Serialize` whose fields are attributes, keys included) into `table`,
    /// on the condition that no item with its key exists: a put never replaces anything.
    pub fn put<T: Serialize + ?Sized>(&mut self, table: &Table, item: &T) -> Result<WriteId, Error> {
        self.put_item(table, item_of(item, "the put's item").map_err(unbuilt)?)
    }

    /// [`Tx::put`] of an item already in attribute values.
    pub fn put_item(&mut self, table: &Table, item: Item) -> Result<WriteId, Error> {
        let id = self.push(put_action(table, item).map_err(unbuilt)?);
        self.puts.insert(id.0, table.clone());
        Ok(id)
    }

    /// Updates the item of `table` at `key` (a `Serialize` of its key attributes): `update` sets
    /// the expression, its names and values, and any condition, on the SDK's builder; the table,
    /// the key and the return of the old item on a failed condition are set here.
    pub fn update<K: Serialize + ?Sized>(
        &mut self,
        table: &Table,
        key: &K,
        update: impl FnOnce(UpdateBuilder) -> UpdateBuilder,
    ) -> Result<WriteId, Error> {
        Ok(self.push(update_action(table, key, update).map_err(unbuilt)?))
    }

    /// Checks a condition on the item of `table` at `key` without writing it.
    pub fn check<K: Serialize + ?Sized>(
        &mut self,
        table: &Table,
        key: &K,
        check: impl FnOnce(ConditionCheckBuilder) -> ConditionCheckBuilder,
    ) -> Result<WriteId, Error> {
        let builder = ConditionCheck::builder()
            .table_name(&table.name)
            .set_key(Some(item_of(key, "the check's key").map_err(unbuilt)?))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let check = check(builder).build().map_err(|e| unbuilt(e.to_string()))?;
        Ok(self.push(TransactWriteItem::builder().condition_check(check).build()))
    }

    /// Adds an action as the SDK builds it, for what the typed writes do not cover.
    pub fn action(&mut self, action: TransactWriteItem) -> WriteId {
        self.push(action)
    }

    /// What a failed condition of `write` means: an answer to record ([`Otherwise::Answer`]),
    /// with writes of its own ([`Otherwise::AnswerWith`]), or a duplicate the item shows.
    /// Without it a failed condition of a write (other than the record's) is an error of kind
    /// [`ErrorKind::ConditionFailed`](effectively_once::ErrorKind::ConditionFailed) naming the
    /// write (numbered from 0 in the order the writes were added) and its table; retrying does
    /// not fix it.
    pub fn otherwise(&mut self, write: WriteId, answer: impl FnOnce(Option<&Item>) -> Otherwise<R> + Send + 'static) {
        self.otherwise.insert(write.0, Box::new(answer));
    }

    /// Puts the record on `put`'s item instead of in an item of its own: no extra item, and it
    /// lasts as long as that item. The put must be keyed by the business key (one item per
    /// key: an order keyed by its order id), since its absence is the duplicate test. The
    /// record's attributes are prefixed `__once_` ([`carried::RESERVED_PREFIX`](crate::carried::RESERVED_PREFIX));
    /// an item holding one is refused.
    pub fn carry_record(&mut self, put: WriteId) -> Result<(), Error> {
        if !self.puts.contains_key(&put.0) {
            return Err(
                StoreError::new(StoreErrorKind::Misuse, "only a put made by Tx::put can carry the record").into()
            );
        }
        self.carrier = Some(put.0);
        Ok(())
    }

    /// The record never expires: the key stays unique as long as the effect lasts (a ledger's
    /// event ids), at the price of one small item per key.
    pub fn never_expires(&mut self) {
        self.lifetime = Lifetime::Never;
    }

    /// With a carried record, also checks that the idempotency table holds no live record for
    /// the key (an answer recorded by [`Otherwise::Answer`]), so a duplicate of a refused event
    /// is not applied when its condition later passes. One more item.
    pub fn guard_recorded_answers(&mut self) {
        self.guard = true;
    }

    pub(crate) fn into_commit(
        self,
        key: &Key,
        payload_hash: &str,
        response: String,
        now_ms: u64,
        window_s: u64,
    ) -> Parts<R> {
        let expiration_s = match self.lifetime {
            Lifetime::Never => NEVER_EXPIRES,
            Lifetime::Window => now_ms / 1000 + window_s.max(1),
        };
        let mut commit = Commit::new(key.as_str(), payload_hash, response).expiration_s(expiration_s);
        let mut carrier_key = None;
        if let Some(carrier) = self.carrier {
            let write = self.writes[carrier].name().to_owned();
            let table = &self.puts[&carrier];
            // A carried record with an answer recorded apart from it (Otherwise::Answer on
            // another write) must see that answer: the record's table is checked too, so a
            // duplicate of a refused event is not applied once its condition would pass.
            let answers = self.otherwise.keys().any(|&index| index != carrier);
            commit = commit
                .placement(Placement::Carried {
                    write: write.into(),
                    key_attribute: table.partition_key.clone().into(),
                })
                .guard_recorded_outcome(self.guard || answers);
            let item = self.writes[carrier].item().put().map(|put| put.item().clone()).unwrap_or_default();
            let key: Item = [Some(table.partition_key.as_str()), table.sort_key()]
                .into_iter()
                .flatten()
                .filter_map(|name| item.get(name).map(|value| (name.to_owned(), value.clone())))
                .collect();
            carrier_key = Some((table.name.clone(), key, table.partition_key.clone()));
        }
        for write in self.writes {
            commit = commit.write(write);
        }
        Parts { commit, otherwise: self.otherwise, expiration_s, carrier_key }
    }
}

pub(crate) struct Parts<R> {
    pub(crate) commit: Commit,
    pub(crate) otherwise: HashMap<usize, OtherwiseFn<R>>,
    pub(crate) expiration_s: u64,
    /// A carried record's carrier: its table, key, and partition key attribute.
    pub(crate) carrier_key: Option<Carrier>,
}

pub(crate) use crate::raw::Carrier;

impl<R> Tx<R> {
    /// The conditions of these writes, as condition checks, with nothing written: what a member
    /// a batch refuses on its group's shared item keeps ([`crate::BatchWrites::decide`]), so an
    /// item that would fail one of its writes (an entry already there) still cancels the
    /// transaction, and the member goes alone, where its own answer applies as one by one. The
    /// record's lifetime is kept. `None` when a write cannot be checked so (an update or a
    /// delete with a condition, whose expression values may not all be the condition's).
    pub(crate) fn into_checks(self) -> Option<Tx<R>> {
        let mut checks = Tx::new();
        checks.lifetime = self.lifetime;
        checks.guard = self.guard;
        for (index, write) in self.writes.iter().enumerate() {
            let action = write.item();
            if let Some(put) = action.put() {
                let Some(condition) = put.condition_expression() else { continue };
                let table = &self.puts[&index];
                let key: Item = [Some(table.partition_key.as_str()), table.sort_key()]
                    .into_iter()
                    .flatten()
                    .filter_map(|name| put.item().get(name).map(|value| (name.to_owned(), value.clone())))
                    .collect();
                let check = ConditionCheck::builder()
                    .table_name(put.table_name())
                    .set_key(Some(key))
                    .condition_expression(condition)
                    .set_expression_attribute_names(put.expression_attribute_names().cloned())
                    .set_expression_attribute_values(put.expression_attribute_values().cloned())
                    .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                    .build()
                    .ok()?;
                checks.push(TransactWriteItem::builder().condition_check(check).build());
            } else if let Some(check) = action.condition_check() {
                checks.push(TransactWriteItem::builder().condition_check(check.clone()).build());
            } else if action.update().is_some_and(|u| u.condition_expression().is_some())
                || action.delete().is_some_and(|d| d.condition_expression().is_some())
            {
                return None;
            }
        }
        Some(checks)
    }
}

impl<R> Tx<R> {
    /// Appends `other`'s writes (and what they answer otherwise) after this one's.
    pub(crate) fn append(&mut self, other: Tx<R>) {
        let offset = self.writes.len();
        for (index, write) in other.writes.into_iter().enumerate() {
            self.writes.push(Write::new(format!("write {}", offset + index), write.into_item()));
        }
        self.puts.extend(other.puts.into_iter().map(|(index, key)| (offset + index, key)));
        self.otherwise.extend(other.otherwise.into_iter().map(|(index, answer)| (offset + index, answer)));
        if self.carrier.is_none() {
            self.carrier = other.carrier.map(|index| offset + index);
        }
        if other.lifetime == Lifetime::Never {
            self.lifetime = Lifetime::Never;
        }
        self.guard |= other.guard;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused member keeps its puts' conditions as checks on their keys, drops writes with no
    /// condition, keeps its checks and its record's lifetime, and cannot keep an update's.
    #[test]
    fn a_refused_members_writes_become_checks_of_their_conditions() {
        let table = Table::new("ledger", "pk").with_sort_key("sk");
        let mut tx = Tx::<()>::new();
        tx.never_expires();
        tx.put(&table, &serde_json::json!({"pk": "a", "sk": "entry#1", "amount": 5})).unwrap();
        tx.update(&table, &serde_json::json!({"pk": "a", "sk": "n"}), |u| u.update_expression("SET x = :x")).unwrap();
        tx.check(&table, &serde_json::json!({"pk": "a", "sk": "c"}), |c| {
            c.condition_expression("attribute_exists(pk)")
        })
        .unwrap();
        let checks = tx.into_checks().expect("checkable");
        assert_eq!(checks.lifetime, Lifetime::Never);
        assert_eq!(checks.writes.len(), 2, "the put's condition and the check; the update had none");
        let check = checks.writes[0].item().condition_check().expect("a check");
        assert_eq!(check.condition_expression(), "attribute_not_exists(#pk)");
        assert_eq!(check.key().len(), 2, "the table's key, not the item: {:?}", check.key());
        assert_eq!(check.key()["sk"], AttributeValue::S("entry#1".into()));
        assert_eq!(check.expression_attribute_names().unwrap()["#pk"], "pk");
        let kept = checks.writes[1].item().condition_check().expect("the check kept");
        assert_eq!(kept.condition_expression(), "attribute_exists(pk)");
        let mut conditioned = Tx::<()>::new();
        conditioned
            .update(&table, &serde_json::json!({"pk": "a", "sk": "n"}), |u| {
                u.update_expression("SET x = :x").condition_expression("attribute_exists(pk)")
            })
            .unwrap();
        assert!(conditioned.into_checks().is_none(), "an update's values may not all be its condition's");
        let mut deleting = Tx::<()>::new();
        let key = [("pk".to_owned(), AttributeValue::S("a".into()))].into();
        let delete = aws_sdk_dynamodb::types::Delete::builder().table_name("ledger").set_key(Some(key));
        deleting.action(TransactWriteItem::builder().delete(delete.clone().build().unwrap()).build());
        assert_eq!(deleting.into_checks().map(|t| t.writes.len()), Some(0), "a delete with no condition is dropped");
        let mut guarded = Tx::<()>::new();
        let delete = delete.condition_expression("attribute_exists(pk)").build().unwrap();
        guarded.action(TransactWriteItem::builder().delete(delete).build());
        assert!(guarded.into_checks().is_none(), "a delete's condition is not kept");
    }
}
