//! Commit once: the idempotency record written completed in the same `TransactWriteItems` as
//! the effect's own items, so a first delivery is one request and there is no window between
//! the effect and its record.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use effectively_once::{Config, Record, Status, StoreError, StoreErrorKind};

use crate::error::classify;
use crate::item::{attr, from_item, to_item};
use crate::store::{DynamoDbStore, CLAIM_CONDITION};

/// DynamoDB's limit on actions in one transaction.
pub(crate) const MAX_TRANSACTION_ITEMS: usize = 100;
/// DynamoDB's limit on the aggregate size of one transaction.
pub(crate) const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;
/// DynamoDB's limit on one item.
pub(crate) const MAX_ITEM_BYTES: usize = 400 * 1024;

/// Attributes a carried record adds to its carrier item. They share a reserved prefix, so they
/// cannot collide with the caller's own attributes: a carrier item that already holds an
/// attribute under the prefix is refused before sending, never overwritten.
pub mod carried {
    /// The prefix no caller attribute may use.
    pub const RESERVED_PREFIX: &str = "__once_";
    /// The idempotency key (S), `{prefix}#{business key}`.
    pub const KEY: &str = "__once_key";
    /// Hash of the canonical payload (S).
    pub const PAYLOAD_HASH: &str = "__once_payload_hash";
    /// The stored response, JSON (S).
    pub const RESPONSE: &str = "__once_response";

    /// The names carried records had before the reserved prefix (a ledger entry written by an
    /// earlier build): still read, never written.
    pub mod legacy {
        /// The idempotency key (S).
        pub const KEY: &str = "idempotency_key";
        /// Hash of the canonical payload (S).
        pub const PAYLOAD_HASH: &str = "payload_hash";
        /// The stored response, JSON (S).
        pub const RESPONSE: &str = "response";
    }
}

/// A named action of a commit-once transaction: the name says which condition fired when the
/// transaction is cancelled.
#[derive(Debug, Clone)]
pub struct Write {
    name: Cow<'static, str>,
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

/// The expiration of a record that never expires: DynamoDB's TTL deletes only items whose
/// expiration has passed, and the claim condition's `expiration < now` never holds for it.
pub const NEVER_EXPIRES: u64 = u64::MAX;

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
    writes: Vec<Write>,
}

impl Commit {
    /// A transaction completing `id` with `response` (JSON) for a payload with `payload_hash`.
    /// An own record ([`Placement::Own`]) lives the default dedup window
    /// (`Config::default().dedup_window()`, 14 days) from the time it is sent, unless
    /// [`Commit::expiration_s`] says otherwise.
    pub fn new(id: impl Into<String>, payload_hash: impl Into<String>, response: impl Into<String>) -> Self {
        Commit {
            record: Record {
                id: id.into(),
                status: Status::Completed,
                lease_expires_at_ms: 0,
                expiration_s: 0,
                payload_hash: payload_hash.into(),
                owner: String::new(),
                response: Some(response.into()),
            },
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
    /// ([`NEVER_EXPIRES`] for a record as lasting as the effect it guards).
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
        let mut actions = Vec::with_capacity(self.writes.len() + 1);
        for write in &self.writes {
            match &self.placement {
                Placement::Carried { write: carrier, key_attribute } if *carrier == write.name => {
                    actions.push(self.carry(write, key_attribute)?);
                }
                _ => actions.push(write.item.clone()),
            }
        }
        if let Placement::Carried { write, .. } = &self.placement {
            if !self.writes.iter().any(|w| w.name == *write) {
                return Err(StoreError::new(
                    StoreErrorKind::Other,
                    format!("no write named {write} to carry the record"),
                ));
            }
        }
        let live = [
            ("#id", attr::ID),
            ("#expiration", attr::EXPIRATION),
            ("#status", attr::STATUS),
            ("#lease", attr::LEASE_EXPIRES_AT),
        ];
        let values = [
            (":now_s", AttributeValue::N((now_ms / 1000).to_string())),
            (":now_ms", AttributeValue::N(now_ms.to_string())),
            (":in_progress", AttributeValue::S(Status::InProgress.as_str().into())),
        ];
        let names: HashMap<String, String> = live.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let values: HashMap<String, AttributeValue> = values.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let built = |e: aws_sdk_dynamodb::error::BuildError| StoreError::new(StoreErrorKind::Other, e.to_string());
        if self.placement == Placement::Own {
            // The same condition as a claim: no live record, so a duplicate's transaction is
            // cancelled by this action and its ALL_OLD item is the record to replay.
            let put = Put::builder()
                .table_name(store.table())
                .set_item(Some(to_item(&self.record_at(now_ms))))
                .condition_expression(CLAIM_CONDITION)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .build()
                .map_err(built)?;
            actions.push(TransactWriteItem::builder().put(put).build());
        } else if self.guard {
            let check = ConditionCheck::builder()
                .table_name(store.table())
                .key(attr::ID, AttributeValue::S(self.record.id.clone()))
                .condition_expression(CLAIM_CONDITION)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .build()
                .map_err(built)?;
            actions.push(TransactWriteItem::builder().condition_check(check).build());
        }
        check_limits(&actions)?;
        Ok(actions)
    }

    fn carry(&self, write: &Write, key_attribute: &str) -> Result<TransactWriteItem, StoreError> {
        let Some(put) = write.item.put() else {
            return Err(StoreError::new(
                StoreErrorKind::Other,
                format!("write {} carries the record but is not a Put", write.name),
            ));
        };
        let mut item = put.item().clone();
        if let Some(name) = item.keys().find(|name| name.starts_with(carried::RESERVED_PREFIX)) {
            return Err(StoreError::new(
                StoreErrorKind::Other,
                format!(
                    "write {} carries the record but its item has the attribute {name}: the prefix {} is reserved for the record",
                    write.name,
                    carried::RESERVED_PREFIX
                ),
            ));
        }
        item.insert(carried::KEY.into(), AttributeValue::S(self.record.id.clone()));
        item.insert(carried::PAYLOAD_HASH.into(), AttributeValue::S(self.record.payload_hash.clone()));
        if let Some(response) = &self.record.response {
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
            .map_err(|e| StoreError::new(StoreErrorKind::Other, e.to_string()))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The index of the action whose failed condition means "a record exists".
    fn record_indices(&self) -> Vec<usize> {
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
        let actions = self.actions(store, 0)?;
        let kb: Vec<u64> = actions.iter().map(|a| action_size(a).div_ceil(1024).max(1) as u64).collect();
        Ok(WriteUnits { committed: kb.iter().map(|k| 2 * k).sum(), cancelled: kb.iter().sum() })
    }
}

/// Write units a transaction is modelled to cost. DynamoDB bills a transactional write at two
/// units per item per KB (prepare and commit). The local AWS reports no consumed capacity, so
/// these are computed from the actions' sizes; a cancelled transaction is modelled as its
/// prepare phase, one unit per item per KB, as a failed conditional write costs its unit.
/// Update and condition-check actions are sized by the attributes they send, a lower bound of
/// the item they touch (a balance item stays well under 1 KB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteUnits {
    /// When the transaction commits (a first delivery).
    pub committed: u64,
    /// When it is cancelled (a duplicate, or a failed business condition).
    pub cancelled: u64,
}

/// What a commit-once transaction did.
#[derive(Debug, Clone, PartialEq)]
pub enum Committed {
    /// Every action was applied, the record with them.
    Fresh,
    /// A live record blocked the transaction: a duplicate (or the key reused with another
    /// payload; compare [`Record::payload_hash`]). Nothing was written.
    Exists(Record),
    /// The condition of the action named `write` failed: a business condition. Nothing was
    /// written; `item` is that action's item as it stood (ALL_OLD), when it existed.
    ConditionFailed {
        /// The action's position among the writes, in the order they were added.
        index: usize,
        /// The action's name.
        write: Cow<'static, str>,
        /// Its item as it stood.
        item: Option<HashMap<String, AttributeValue>>,
    },
}

/// What recording an answer did ([`DynamoDbStore::record_answer`]).
#[derive(Debug)]
pub(crate) enum Answer {
    /// The record and the fallback's writes were written.
    Written,
    /// A live record, or a carrier holding one (a duplicate applied the effect meanwhile),
    /// was there: nothing was written.
    Exists(Record),
    /// The fallback's write at this index failed its condition: nothing was written.
    FallbackRefused(usize),
    /// Anything else the transaction answered.
    Unexpected(Committed),
}

/// Transaction conflicts (another transaction on the same items in flight) are retried this
/// many times: concurrent duplicates end as one commit and the rest as replays.
const CONFLICT_RETRIES: u32 = 8;

impl DynamoDbStore {
    /// Runs a commit-once transaction: one `TransactWriteItems` request on a first delivery and
    /// on a duplicate; a conflicting concurrent transaction is retried.
    pub async fn commit_once(&self, commit: &Commit, now_ms: u64) -> Result<Committed, StoreError> {
        let actions = commit.actions(self, now_ms)?;
        let mut attempt = 0;
        loop {
            let result = self.client().transact_write_items().set_transact_items(Some(actions.clone())).send().await;
            let err = match result {
                Ok(_) => return Ok(Committed::Fresh),
                Err(err) => err,
            };
            let reasons = match &err {
                SdkError::ServiceError(service) => match service.err() {
                    TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                        cancelled.cancellation_reasons().to_vec()
                    }
                    _ => return Err(classify("TransactWriteItems", err)),
                },
                _ => return Err(classify("TransactWriteItems", err)),
            };
            match self.cancelled(commit, &reasons).await? {
                Some(committed) => return Ok(committed),
                None if attempt < CONFLICT_RETRIES => {
                    attempt += 1;
                    // Back off with jitter so the conflicting transactions do not meet again.
                    let jitter = (uuid::Uuid::new_v4().as_u128() % 20) as u64;
                    tokio::time::sleep(Duration::from_millis(10 * u64::from(attempt) + jitter)).await;
                }
                None => {
                    return Err(StoreError::new(
                        StoreErrorKind::Unavailable,
                        format!("transaction for {} kept conflicting after {CONFLICT_RETRIES} retries", commit.id()),
                    ))
                }
            }
        }
    }

    /// Reads a cancellation: `None` means a conflict worth retrying.
    async fn cancelled(
        &self,
        commit: &Commit,
        reasons: &[CancellationReason],
    ) -> Result<Option<Committed>, StoreError> {
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        for index in commit.record_indices() {
            if code(index) == "ConditionalCheckFailed" {
                let item = reasons[index].item();
                let record = match (item, index < commit.writes.len()) {
                    (Some(item), true) => match carried_from_item(item) {
                        Ok(record) => record,
                        // The carrier's item is there without a record (written apart from
                        // commit once): not a duplicate this layer can tell; the write's own
                        // answer (`Otherwise`) decides.
                        Err(_) => {
                            let write = commit.writes[index].name.clone();
                            return Ok(Some(Committed::ConditionFailed { index, write, item: Some(item.clone()) }));
                        }
                    },
                    (Some(item), false) => from_item(item)?,
                    (None, _) => match self.get_record(commit.id()).await? {
                        Some(record) => record,
                        None => return Ok(None),
                    },
                };
                return Ok(Some(Committed::Exists(record)));
            }
        }
        if let Some((index, _)) = reasons.iter().enumerate().find(|(_, r)| r.code() == Some("ConditionalCheckFailed")) {
            let write = commit.writes.get(index).map_or(Cow::Borrowed("record"), |w| w.name.clone());
            return Ok(Some(Committed::ConditionFailed { index, write, item: reasons[index].item().cloned() }));
        }
        let codes: Vec<&str> = (0..reasons.len()).map(code).filter(|c| *c != "None").collect();
        if codes.contains(&"TransactionConflict") {
            return Ok(None);
        }
        let kind = if codes
            .iter()
            .any(|c| matches!(*c, "ThrottlingError" | "ProvisionedThroughputExceeded" | "RequestLimitExceeded"))
        {
            StoreErrorKind::Throttled
        } else if codes.contains(&"ItemCollectionSizeLimitExceeded") {
            // A partition key's items under a local secondary index reached 10 GB: an operator
            // moves data or the index; no verdict on the message, which waits for the fix.
            StoreErrorKind::Misconfigured
        } else if codes.contains(&"ValidationError") {
            StoreErrorKind::Other
        } else {
            // A reason this code does not know is not a verdict on the message: giving the
            // message up for good on it could lose an event that a retry would post.
            StoreErrorKind::Unavailable
        };
        Err(StoreError::new(kind, format!("transaction for {} cancelled: {codes:?}", commit.id())))
    }

    /// Writes a completed record outside any transaction (a recorded business rejection), unless
    /// a live record exists, which it returns. Pass the carrier's key in `unless_exists` to make
    /// the write conditional on the effect not having been applied meanwhile (a concurrent
    /// duplicate that committed): then `Some(Exists)` comes back too.
    pub async fn record_outcome(
        &self,
        record: &Record,
        now_ms: u64,
        unless_exists: Option<(String, HashMap<String, AttributeValue>, String)>,
    ) -> Result<Option<Committed>, StoreError> {
        Ok(match self.record_answer(record, now_ms, unless_exists, &[]).await? {
            Answer::Written => None,
            Answer::Exists(existing) => Some(Committed::Exists(existing)),
            Answer::Unexpected(other) => Some(other),
            Answer::FallbackRefused(_) => unreachable!("no fallback writes were sent"),
        })
    }

    /// [`DynamoDbStore::record_outcome`] with `fallback`'s actions in the same transaction, so
    /// the record and its fallback are written together or not at all.
    pub(crate) async fn record_answer(
        &self,
        record: &Record,
        now_ms: u64,
        unless_exists: Option<(String, HashMap<String, AttributeValue>, String)>,
        fallback: &[TransactWriteItem],
    ) -> Result<Answer, StoreError> {
        let mut commit = Commit::new(&record.id, &record.payload_hash, record.response.clone().unwrap_or_default())
            .expiration_s(record.expiration_s);
        let applied_check = unless_exists.is_some();
        if let Some((table, key, key_attribute)) = unless_exists {
            let check = ConditionCheck::builder()
                .table_name(table)
                .set_key(Some(key))
                .condition_expression("attribute_not_exists(#k)")
                .expression_attribute_names("#k", key_attribute)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .build()
                .map_err(|e| StoreError::new(StoreErrorKind::Other, e.to_string()))?;
            commit = commit.write(Write::new("applied", TransactWriteItem::builder().condition_check(check).build()));
        }
        let first_fallback = usize::from(applied_check);
        for (index, action) in fallback.iter().enumerate() {
            commit = commit.write(Write::new(format!("fallback write {index}"), action.clone()));
        }
        // The record's own put is checked first (`cancelled`): a live record answers, whatever
        // else failed beside it, so a duplicate never reports its fallback refused.
        Ok(match self.commit_once(&commit, now_ms).await? {
            Committed::Fresh => Answer::Written,
            Committed::Exists(existing) => Answer::Exists(existing),
            // Only a write is `ConditionFailed`: the record's own put answers `Exists`.
            Committed::ConditionFailed { index, .. } if index >= first_fallback => {
                Answer::FallbackRefused(index - first_fallback)
            }
            Committed::ConditionFailed { item: Some(item), .. } => Answer::Exists(carried_from_item(&item)?),
            other => Answer::Unexpected(other),
        })
    }

    async fn get_record(&self, id: &str) -> Result<Option<Record>, StoreError> {
        effectively_once::Store::get(self, id).await
    }
}

/// Reads the record a carrier item holds.
/// Reads the record a carrier item holds, under the reserved names or, for an item written by an
/// earlier build, the legacy ones ([`carried::legacy`]).
pub fn carried_from_item(item: &HashMap<String, AttributeValue>) -> Result<Record, StoreError> {
    let names = if item.contains_key(carried::KEY) {
        [carried::KEY, carried::PAYLOAD_HASH, carried::RESPONSE]
    } else {
        [carried::legacy::KEY, carried::legacy::PAYLOAD_HASH, carried::legacy::RESPONSE]
    };
    let string = |name: &str| match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v.clone()),
        _ => Err(StoreError::new(StoreErrorKind::Malformed, format!("carried record: {name} missing"))),
    };
    Ok(Record {
        id: string(names[0])?,
        status: Status::Completed,
        lease_expires_at_ms: 0,
        expiration_s: u64::MAX,
        payload_hash: string(names[1])?,
        owner: String::new(),
        response: string(names[2]).ok(),
    })
}

pub(crate) fn check_limits(actions: &[TransactWriteItem]) -> Result<(), StoreError> {
    if actions.len() > MAX_TRANSACTION_ITEMS {
        return Err(StoreError::new(
            StoreErrorKind::TooLarge,
            format!("transaction has {} actions; DynamoDB allows {MAX_TRANSACTION_ITEMS}", actions.len()),
        ));
    }
    let mut total = 0;
    for (position, action) in actions.iter().enumerate() {
        let size = action_size(action);
        if size > MAX_ITEM_BYTES {
            return Err(StoreError::new(
                StoreErrorKind::TooLarge,
                format!("transaction action {position} has an item of {size} bytes; DynamoDB allows {MAX_ITEM_BYTES}"),
            ));
        }
        total += size;
    }
    if total > MAX_TRANSACTION_BYTES {
        return Err(StoreError::new(
            StoreErrorKind::TooLarge,
            format!("transaction holds {total} bytes; DynamoDB allows {MAX_TRANSACTION_BYTES}"),
        ));
    }
    Ok(())
}

/// The size DynamoDB counts for an action's item: for a put, its item; otherwise the key and
/// the values it sends.
pub(crate) fn action_size(action: &TransactWriteItem) -> usize {
    let map_size = item_size;
    let values = |v: Option<&HashMap<String, AttributeValue>>| v.map(|m| m.values().map(value_size).sum()).unwrap_or(0);
    if let Some(put) = action.put() {
        map_size(put.item())
    } else if let Some(update) = action.update() {
        map_size(update.key()) + values(update.expression_attribute_values())
    } else if let Some(check) = action.condition_check() {
        map_size(check.key())
    } else if let Some(delete) = action.delete() {
        map_size(delete.key())
    } else {
        0
    }
}

/// Item size rules: strings by UTF-8 length, numbers about one byte per two digits plus one.
fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(string) => string.len(),
        AttributeValue::N(number) => number.len().div_ceil(2) + 1,
        AttributeValue::B(bytes) => bytes.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(strings) => strings.iter().map(String::len).sum(),
        AttributeValue::Ns(numbers) => numbers.iter().map(|n| n.len().div_ceil(2) + 1).sum(),
        AttributeValue::L(list) => 3 + list.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        AttributeValue::M(map) => 3 + map.iter().map(|(k, v)| 1 + k.len() + value_size(v)).sum::<usize>(),
        _ => 0,
    }
}
