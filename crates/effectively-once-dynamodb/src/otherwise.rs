//! What a failed condition of a commit-once write means: the answers [`Tx::otherwise`] gives
//! ([`Otherwise`]), the writes an answer may carry ([`Fallback`]), and the error when no answer
//! is given.

use aws_sdk_dynamodb::types::builders::UpdateBuilder;
use aws_sdk_dynamodb::types::{Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};
use effectively_once::{Error, Key, Record, StoreError, StoreErrorKind};
use serde::Serialize;

#[cfg(doc)]
use crate::tx::Tx;
use crate::tx::{Item, Table};

/// What a failed condition of one write means, as [`Tx::otherwise`]'s closure says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Otherwise<R> {
    /// A business answer (a refused debit, say): nothing was written; the answer is recorded as
    /// the key's outcome, so every duplicate gets it too, even after the condition would pass.
    Answer(R),
    /// A business answer recorded together with writes of its own: a backordered reservation
    /// beside the refused one, a row for a person to review. The answer's record and the
    /// fallback's writes go in one `TransactWriteItems`, so both are written or neither: one
    /// `commit_once` decides the refusal and records it with what it leaves behind, under the
    /// one key, where without a fallback a second commit under a second key would be needed.
    ///
    /// The fallback is written once per key: a duplicate meets the recorded answer and is
    /// answered from it (`Replayed`) without sending the fallback again, and of concurrent
    /// duplicates refused alike one records the answer with its fallback and the others replay
    /// it. A fallback write whose own condition fails (a [`Fallback::put`] whose item is there
    /// already) writes nothing, the answer included, and is an error of kind
    /// [`ErrorKind::ConditionFailed`](effectively_once::ErrorKind::ConditionFailed) naming it.
    ///
    /// It costs the request that records the answer, as [`Otherwise::Answer`] does: the
    /// cancelled transaction decides, a second one records (DynamoDB cancels a transaction
    /// whole, so the refusal cannot be written by the transaction it cancels).
    AnswerWith {
        /// The answer, recorded as the key's outcome.
        answer: R,
        /// The writes recorded with it.
        fallback: Fallback,
    },
    /// The effect is already there, written without a record this transaction could see (by an
    /// earlier build, or a record deleted by hand): a duplicate answered with `response` when
    /// `same_payload`, key reuse otherwise. Nothing is recorded.
    AlreadyApplied {
        /// The answer the duplicate gets.
        response: R,
        /// Whether the item shows this payload's effect.
        same_payload: bool,
    },
    /// The item holds the record of an earlier delivery (a carried record, say, read with
    /// [`record_carried_by`](crate::record_carried_by)): it answers, as a record the claim met
    /// would (a replay, or key reuse when its payload hash differs).
    Recorded(Record),
}

/// The writes [`Otherwise::AnswerWith`] records with its answer, built like a [`Tx`]'s: a put
/// never replaces an item, an update sets its own expression and condition.
///
/// Built by value inside [`Tx::otherwise`]'s closure, which returns no `Result`: a write that
/// does not build (an item that is no DynamoDB item, a put without its partition key) is kept
/// as an error and returned by `commit_once`, before anything is recorded, as `reqwest`'s
/// request builder keeps its errors until it is sent.
///
/// ```
/// use effectively_once_dynamodb::{Fallback, Otherwise, Table};
/// use serde::Serialize;
///
/// #[derive(Serialize)]
/// struct Backorder<'a> { pk: &'a str, order_id: &'a str, wanted: u32 }
///
/// let backorders = Table::new("backorders", "pk");
/// let otherwise: Otherwise<&str> = Otherwise::AnswerWith {
///     answer: "backordered",
///     fallback: Fallback::new().put(&backorders, &Backorder { pk: "backorder#o-1", order_id: "o-1", wanted: 3 }),
/// };
/// # let _ = otherwise;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fallback {
    pub(crate) writes: Vec<TransactWriteItem>,
    /// The first write that did not build.
    pub(crate) error: Option<String>,
}

// Every value in an action is a string, a number as a string, bytes or a boolean, never a
// float: `PartialEq` is reflexive, so `Otherwise` stays `Eq`.
impl Eq for Fallback {}

impl Fallback {
    /// No writes yet.
    pub fn new() -> Self {
        Fallback::default()
    }

    /// Puts `item` (any `Serialize` whose fields are attributes, keys included) into `table`, on
    /// the condition that no item with its key exists, as [`Tx::put`].
    pub fn put<T: Serialize + ?Sized>(self, table: &Table, item: &T) -> Self {
        let action = item_of(item, "the fallback's put item").and_then(|item| put_action(table, item));
        self.push(action)
    }

    /// [`Fallback::put`] of an item already in attribute values.
    pub fn put_item(self, table: &Table, item: Item) -> Self {
        let action = put_action(table, item);
        self.push(action)
    }

    /// Updates the item of `table` at `key`, as [`Tx::update`]: `update` sets the expression,
    /// its names and values, and any condition.
    pub fn update<K: Serialize + ?Sized>(
        self,
        table: &Table,
        key: &K,
        update: impl FnOnce(UpdateBuilder) -> UpdateBuilder,
    ) -> Self {
        let action = update_action(table, key, update);
        self.push(action)
    }

    /// Adds an action as the SDK builds it.
    pub fn action(self, action: TransactWriteItem) -> Self {
        self.push(Ok(action))
    }

    /// How many writes it holds.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// Whether it holds no write.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    fn push(mut self, action: Result<TransactWriteItem, String>) -> Self {
        match action {
            Ok(action) => self.writes.push(action),
            Err(error) => {
                self.error.get_or_insert_with(|| format!("fallback write {}: {error}", self.writes.len()));
            }
        }
        self
    }
}

/// Why a write does not build: the caller's programmer error (kind
/// [`Misuse`](effectively_once::ErrorKind::Misuse)), permanent.
pub(crate) fn unbuilt(message: String) -> Error {
    StoreError::new(StoreErrorKind::Misuse, message).into()
}

pub(crate) fn item_of<T: Serialize + ?Sized>(value: &T, what: &str) -> Result<Item, String> {
    serde_dynamo::to_item(value).map_err(|e| format!("{what} is not a DynamoDB item: {e}"))
}

/// A put of `item` into `table` that replaces nothing: its condition is the key's absence.
pub(crate) fn put_action(table: &Table, item: Item) -> Result<TransactWriteItem, String> {
    if !item.contains_key(table.partition_key()) {
        return Err(format!("the put into {} has no {} (its partition key)", table.name(), table.partition_key()));
    }
    let put = Put::builder()
        .table_name(table.name())
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(#pk)")
        .expression_attribute_names("#pk", table.partition_key())
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// An update of the item of `table` at `key`, returning the item on a failed condition.
pub(crate) fn update_action<K: Serialize + ?Sized>(
    table: &Table,
    key: &K,
    update: impl FnOnce(UpdateBuilder) -> UpdateBuilder,
) -> Result<TransactWriteItem, String> {
    let builder = Update::builder()
        .table_name(table.name())
        .set_key(Some(item_of(key, "the update's key")?))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    let update = update(builder).build().map_err(|e| e.to_string())?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// An action as an error names it: what it does, and to which table (never its key or items,
/// which may hold personal data).
pub(crate) fn describe(action: &TransactWriteItem) -> String {
    if let Some(put) = action.put() {
        format!("a Put into table {}", put.table_name())
    } else if let Some(update) = action.update() {
        format!("an Update of table {}", update.table_name())
    } else if let Some(check) = action.condition_check() {
        format!("a ConditionCheck on table {}", check.table_name())
    } else if let Some(delete) = action.delete() {
        format!("a Delete from table {}", delete.table_name())
    } else {
        "an empty action".to_owned()
    }
}

/// A write whose condition failed with no answer for it: `what` names it ("write 1",
/// "fallback write 0"), `action` is the write as sent.
pub(crate) fn refused(key: &Key, what: &str, action: Option<&TransactWriteItem>, unanswered: &str) -> Error {
    let described = action.map_or_else(|| "an action".to_owned(), describe);
    StoreError::new(
        StoreErrorKind::ConditionFailed,
        format!("the condition of {what} ({described}) failed for {key}: {unanswered}"),
    )
    .into()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Delete};
    use effectively_once::ErrorKind;

    use super::*;

    fn key() -> HashMap<String, AttributeValue> {
        [("pk".to_owned(), AttributeValue::S("a".into()))].into()
    }

    #[test]
    fn each_action_is_named_by_what_it_does_and_its_table() {
        let table = Table::new("orders", "pk");
        let put = put_action(&table, key()).unwrap();
        assert_eq!(describe(&put), "a Put into table orders");
        let update =
            update_action(&table, &serde_json::json!({"pk": "a"}), |u| u.update_expression("SET n = :n")).unwrap();
        assert_eq!(describe(&update), "an Update of table orders");
        let check = ConditionCheck::builder()
            .table_name("stock")
            .set_key(Some(key()))
            .condition_expression("attribute_exists(pk)")
            .build()
            .unwrap();
        assert_eq!(
            describe(&TransactWriteItem::builder().condition_check(check).build()),
            "a ConditionCheck on table stock"
        );
        let delete = Delete::builder().table_name("holds").set_key(Some(key())).build().unwrap();
        assert_eq!(describe(&TransactWriteItem::builder().delete(delete).build()), "a Delete from table holds");
        assert_eq!(describe(&TransactWriteItem::builder().build()), "an empty action");
    }

    /// The error says which write, what it is, which table and which key, and is its own kind.
    #[test]
    fn a_refused_write_names_itself_its_table_and_the_key() {
        let table = Table::new("accounts", "pk");
        let update =
            update_action(&table, &serde_json::json!({"pk": "a"}), |u| u.update_expression("SET n = :n")).unwrap();
        let key = Key::new("take", "two").unwrap();
        let err = refused(&key, "write 1", Some(&update), "no Tx::otherwise answers it");
        assert_eq!(err.kind(), ErrorKind::ConditionFailed);
        assert_eq!(
            effectively_once::ErrorChain(&err).to_string(),
            "the condition of write 1 (an Update of table accounts) failed for take#two: no Tx::otherwise answers it"
        );
        assert_eq!(err.retry(), effectively_once::Retry::AfterFix);
        let unknown = refused(&key, "write 7", None, "x");
        assert!(unknown.to_string().contains("write 7 (an action)"), "{unknown}");
    }

    /// A write that does not build is kept, the first one only, and the writes before it stay.
    #[test]
    fn a_fallback_keeps_its_first_error() {
        let table = Table::new("backorders", "pk");
        let fallback = Fallback::new()
            .put(&table, &serde_json::json!({"pk": "b#1"}))
            .put(&table, &serde_json::json!({"no_key": 1}))
            .put(&table, &42)
            .put_item(&table, key());
        assert_eq!(fallback.len(), 2);
        let error = fallback.error.as_deref().unwrap();
        assert!(error.starts_with("fallback write 1: ") && error.contains("has no pk"), "{error}");
        assert!(Fallback::new().is_empty() && Fallback::new().error.is_none());
        let ok = Fallback::new().action(put_action(&table, key()).unwrap());
        assert_eq!((ok.len(), ok.is_empty(), ok.error.is_none()), (1, false, true));
        assert_eq!(ok, ok.clone());
    }
}
