//! Commit once at the level of SDK actions: a [`Commit`] is the record and the effect's own
//! actions ([`Write`]s) in one `TransactWriteItems`, sent by [`DynamoDbStore::transact`], which
//! answers what happened ([`Committed`]). [`CommitOnce`](crate::CommitOnce) builds these from
//! typed writes; this level is for actions the typed writes do not express.

use std::borrow::Cow;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use effectively_once::{Config, Record, Status, StoreError, StoreErrorKind};

use crate::item::{attr, carried, from_item, into_item, record_carried_by};
use crate::store::DynamoDbStore;
use crate::transaction::{self, backoff, check_limits, Cancellation, Sent, WriteUnits};

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

/// A request the SDK's builder refused (a required field missing).
fn unbuilt(error: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::new(StoreErrorKind::Other, error.to_string())
}

/// A programmer error: the commit's writes do not fit how it is placed.
fn misuse(message: String) -> StoreError {
    StoreError::new(StoreErrorKind::Misuse, message)
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

/// The carrier of a record an answer is recorded beside: its table, its key, and the key
/// attribute whose absence says the effect was not applied.
pub(crate) type Carrier = (String, HashMap<String, AttributeValue>, String);

impl DynamoDbStore {
    /// Sends a commit-once transaction: one `TransactWriteItems` request on a first delivery
    /// and on a duplicate; a conflicting concurrent transaction is retried (with a jittered
    /// backoff).
    pub async fn transact(&self, commit: &Commit, now_ms: u64) -> Result<Committed, StoreError> {
        let actions = commit.actions(self, now_ms)?;
        let mut attempt = 0;
        loop {
            let cancellation = match transaction::send(self.client(), actions.clone()).await? {
                Sent::Committed => return Ok(Committed::Fresh),
                Sent::Cancelled(cancellation) => cancellation,
            };
            match self.read_cancellation(commit, &cancellation).await? {
                Some(committed) => return Ok(committed),
                None if attempt < CONFLICT_RETRIES => {
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
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
    async fn read_cancellation(
        &self,
        commit: &Commit,
        cancellation: &Cancellation,
    ) -> Result<Option<Committed>, StoreError> {
        if let Some(index) = commit.record_indices().into_iter().find(|&at| cancellation.condition_failed(at)) {
            return self.existing(commit, index, cancellation.item(index)).await;
        }
        if let Some(index) = cancellation.first_condition_failed() {
            let write = commit.writes.get(index).map_or(Cow::Borrowed("record"), |w| w.name.clone());
            return Ok(Some(Committed::ConditionFailed { index, write, item: cancellation.item(index).cloned() }));
        }
        if cancellation.conflicted() {
            return Ok(None);
        }
        let codes = cancellation.codes();
        Err(StoreError::new(cancellation.failure(), format!("transaction for {} cancelled: {codes:?}", commit.id())))
    }

    /// The record whose action at `index` failed its condition, from the item it returned (or a
    /// read, from a server that returns none): `None` when it is gone since, worth retrying.
    async fn existing(
        &self,
        commit: &Commit,
        index: usize,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> Result<Option<Committed>, StoreError> {
        let record = match (item, index < commit.writes.len()) {
            (Some(item), true) => match record_carried_by(item) {
                Ok(record) => record,
                // The carrier's item is there without a record (written apart from commit
                // once): not a duplicate this layer can tell; the write's own answer
                // (`Otherwise`) decides.
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
        Ok(Some(Committed::Exists(record)))
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
        unless_exists: Option<Carrier>,
        fallback: &[TransactWriteItem],
    ) -> Result<Answer, StoreError> {
        let mut commit = Commit::new(&record.id, &record.payload_hash, record.response.clone().unwrap_or_default())
            .expiration_s(record.expiration_s);
        let applied_check = unless_exists.is_some();
        if let Some(carrier) = unless_exists {
            commit = commit.write(Write::new("applied", not_applied(carrier)?));
        }
        let first_fallback = usize::from(applied_check);
        for (index, action) in fallback.iter().enumerate() {
            commit = commit.write(Write::new(format!("fallback write {index}"), action.clone()));
        }
        // The record's own put is checked first (`read_cancellation`): a live record answers,
        // whatever else failed beside it, so a duplicate never reports its fallback refused.
        Ok(match self.transact(&commit, now_ms).await? {
            Committed::Fresh => Answer::Written,
            Committed::Exists(existing) => Answer::Exists(existing),
            // Only a write is `ConditionFailed`: the record's own put answers `Exists`.
            Committed::ConditionFailed { index, .. } if index >= first_fallback => {
                Answer::FallbackRefused(index - first_fallback)
            }
            Committed::ConditionFailed { item: Some(item), .. } => Answer::Exists(record_carried_by(&item)?),
            other => Answer::Unexpected(other),
        })
    }

    async fn get_record(&self, id: &str) -> Result<Option<Record>, StoreError> {
        effectively_once::Store::get(self, id).await
    }
}

/// A check that the carrier is still absent: the effect was not applied meanwhile.
fn not_applied((table, key, key_attribute): Carrier) -> Result<TransactWriteItem, StoreError> {
    let check = ConditionCheck::builder()
        .table_name(table)
        .set_key(Some(key))
        .condition_expression("attribute_not_exists(#k)")
        .expression_attribute_names("#k", key_attribute)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(unbuilt)?;
    Ok(TransactWriteItem::builder().condition_check(check).build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::CLAIM_CONDITION;

    /// A store whose client never sends: building actions needs only its table's name.
    fn offline_store() -> DynamoDbStore {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build();
        DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), "idempotency")
    }

    fn put(item: HashMap<String, AttributeValue>) -> TransactWriteItem {
        let put = Put::builder().table_name("ledger").set_item(Some(item)).build().unwrap();
        TransactWriteItem::builder().put(put).build()
    }

    /// A transaction DynamoDB would refuse is refused before it is sent, as too large (a verdict
    /// on the message, never retried): 99 writes and the record fit, 100 do not, and neither does
    /// an item over 400 KB, whether built by reference or by moving the writes.
    #[test]
    fn a_commit_over_dynamodbs_limits_is_refused_before_sending() {
        let store = offline_store();
        let writes = |n: usize| {
            (0..n).fold(Commit::new("payments#e", "v2:h", "{}"), |commit, i| {
                let item = HashMap::from([("pk".to_owned(), AttributeValue::S(format!("k{i}")))]);
                commit.write(Write::new(format!("write {i}"), put(item)))
            })
        };
        let fits = writes(99);
        assert_eq!(fits.actions(&store, 1).unwrap().len(), 100, "99 writes and the record");
        assert_eq!(fits.into_actions(&store, 1).unwrap().len(), 100);
        let too_many = writes(100);
        for error in [too_many.actions(&store, 1).unwrap_err(), too_many.into_actions(&store, 1).unwrap_err()] {
            assert_eq!(error.kind(), StoreErrorKind::TooLarge, "{error}");
            assert!(error.to_string().contains("101 actions"), "{error}");
        }
        let big = HashMap::from([
            ("pk".to_owned(), AttributeValue::S("k".into())),
            ("blob".to_owned(), AttributeValue::S("x".repeat(400 * 1024))),
        ]);
        let error = Commit::new("payments#e", "v2:h", "{}").write(Write::new("big", put(big))).into_actions(&store, 1);
        assert_eq!(error.unwrap_err().kind(), StoreErrorKind::TooLarge);
    }

    /// The record's condition in a transaction is the claim's, placeholder for placeholder, on
    /// the same attributes: a duplicate is cancelled, and a record past its window or its lease
    /// taken over, exactly as a claim would.
    #[test]
    fn the_record_condition_is_the_claim_condition_under_shorter_names() {
        let claim_names = [
            ("#id", attr::ID),
            ("#expiration", attr::EXPIRATION),
            ("#status", attr::STATUS),
            ("#lease", attr::LEASE_EXPIRES_AT),
        ];
        let values = [(":s", ":now_s"), (":m", ":now_ms"), (":p", ":in_progress")];
        let rename = |token: &str| -> String {
            let name = RECORD_NAMES.iter().find(|(short, _)| *short == token).map(|(_, attribute)| {
                claim_names.iter().find(|(_, a)| a == attribute).expect("an attribute the claim names").0
            });
            let value = values.iter().find(|(short, _)| *short == token).map(|(_, long)| *long);
            name.or(value).unwrap_or(token).to_owned()
        };
        let tokens = |condition: &str| -> Vec<String> {
            condition.replace('(', " ( ").replace(')', " ) ").split_whitespace().map(str::to_owned).collect()
        };
        let renamed: Vec<String> = tokens(RECORD_CONDITION).iter().map(|token| rename(token)).collect();
        assert_eq!(renamed, tokens(CLAIM_CONDITION));
        assert!(RECORD_CONDITION.len() + 30 < CLAIM_CONDITION.len(), "shorter, or why have two");
    }
}
