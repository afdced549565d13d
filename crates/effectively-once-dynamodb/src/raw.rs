//! Commit once at the level of SDK actions: a [`Commit`] is the record and the effect's own
//! actions ([`Write`]s) in one `TransactWriteItems`, sent by [`DynamoDbStore::transact`], which
//! answers what happened ([`Committed`]). [`CommitOnce`](crate::CommitOnce) builds these from
//! typed writes; this level is for actions the typed writes do not express.
//!
//! The building of a transaction ([`Commit`], [`Write`], [`Placement`]) is in `commit`; this
//! file sends it and reads what DynamoDB answered.

use std::borrow::Cow;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use effectively_once::{Record, StoreError, StoreErrorKind};

use crate::item::{from_item, record_carried_by};
use crate::store::DynamoDbStore;
use crate::transaction::{self, backoff, Cancellation, Sent};

mod commit;

pub use self::commit::{Commit, Placement, Write};

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
