//! Commit once, the way a handler writes it: [`CommitOnce::commit_once`] takes a key, the
//! payload and a closure that adds typed writes to a [`Tx`]; the payload hash, the clock, the
//! dedup window and the replay come from the [`Idempotency`]'s [`Config`](effectively_once::Config).
//!
//! ```no_run
//! use effectively_once::{Config, Idempotency, Key, Outcome};
//! use effectively_once_dynamodb::{CommitOnce, DynamoDbStore, Table};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Order { pk: String, total_cents: i64 }
//!
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let idempotency = Idempotency::new(DynamoDbStore::new(client, "idempotency"), Config::default());
//! let orders = Table::new("orders", "pk");
//! let order = Order { pk: "order#o-1".into(), total_cents: 4200 };
//! let key = Key::new("orders", "o-1")?;
//! let outcome: Outcome<String> = idempotency
//!     .commit_once(&key, &order, |tx| {
//!         tx.put(&orders, &order)?;
//!         Ok("stored".to_owned())
//!     })
//!     .await?;
//! println!("replayed: {}", outcome.is_replay());
//! # Ok(())
//! # }
//! ```
//!
//! What no setting can do: write twice within the dedup window. The record is part of the
//! transaction and expires at the end of the dedup window counted from the commit (never at 0,
//! never before it is written, and never sooner than the lease, whatever the window says), or
//! never ([`Tx::never_expires`]); a carried record ([`Tx::carry_record`]) lives as long as its
//! item. Puts are conditional on their item's absence, so not even a record past its window or
//! lost by hand lets a put overwrite what an earlier delivery wrote; an update alone is applied
//! again by a delivery after the window, which is why the window must outlast every redelivery
//! (14 days by default: SQS's longest retention).

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::types::builders::{ConditionCheckBuilder, UpdateBuilder};
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use effectively_once::{Error, Idempotency, Key, Outcome, PayloadHash, Record, Status, StoreError, StoreErrorKind};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::commit::{Answer, Commit, Committed, Placement, Write, NEVER_EXPIRES};
use crate::otherwise::{item_of, put_action, refused, unbuilt, update_action, Fallback, Otherwise};
use crate::store::DynamoDbStore;

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

type OtherwiseFn<R> = Box<dyn FnOnce(Option<&Item>) -> Otherwise<R> + Send>;

/// How long the record lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifetime {
    /// The config's dedup window, from the commit.
    Window,
    /// As long as the effect.
    Never,
}

/// The writes of one commit-once transaction, built in [`CommitOnce::commit_once`]'s closure.
/// At most 99 writes with an own record (DynamoDB takes 100 actions), checked before sending.
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
                StoreError::new(StoreErrorKind::Other, "only a put made by Tx::put can carry the record").into()
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
    otherwise: HashMap<usize, OtherwiseFn<R>>,
    expiration_s: u64,
    /// A carried record's carrier: its table, key, and partition key attribute.
    carrier_key: Option<(String, Item, String)>,
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

/// Commit once on an [`Idempotency`] over DynamoDB.
pub trait CommitOnce {
    /// Runs `build`'s writes and the key's completed record in one `TransactWriteItems`, unless
    /// the key has a live record: `Fresh` with `build`'s response when this call committed,
    /// `Replayed` with the first response for a duplicate (key reuse with another payload is
    /// [`ErrorKind::KeyReused`](effectively_once::ErrorKind::KeyReused)). A write whose own
    /// condition fails answers through [`Tx::otherwise`]. One request either way; transaction
    /// conflicts between concurrent duplicates are retried, and end as one commit and replays.
    ///
    /// `build` runs once per call, before anything is sent; its error is returned as it is.
    fn commit_once<P, R, F>(
        &self,
        key: &Key,
        payload: &P,
        build: F,
    ) -> impl Future<Output = Result<Outcome<R>, Error>> + Send
    where
        P: Serialize + ?Sized + Sync,
        R: Serialize + DeserializeOwned + Send,
        F: FnOnce(&mut Tx<R>) -> Result<R, Error> + Send;

    /// The modelled write units of the transaction `build` makes, committed and cancelled
    /// ([`WriteUnits`](crate::WriteUnits)); nothing is sent.
    fn write_units<R, F>(&self, key: &Key, build: F) -> Result<crate::WriteUnits, Error>
    where
        R: Serialize,
        F: FnOnce(&mut Tx<R>) -> Result<R, Error>;

    /// Commits a batch's members in as few transactions as DynamoDB's limits (100 actions,
    /// 4 MB) allow, and answers each as [`CommitOnce::commit_once`] would have, committed one
    /// by one in batch order: the result at each position is that member's.
    ///
    /// - A key twice in the batch is answered from its first occurrence, with no request (key
    ///   reuse when the payloads differ).
    /// - A cancelled transaction is read reason by reason: a member whose record exists is a
    ///   duplicate, answered from the record returned with the reason; a group whose shared
    ///   write failed (a balance that would not cover its debits) falls back to one transaction
    ///   per member, in order, so exactly the members that would fail alone fail; a member whose
    ///   own write failed does too; conflicts back off (capped, jittered) and the rest is sent
    ///   again as a batch, at most [`MAX_ROUNDS`](crate::MAX_ROUNDS) rounds.
    /// - In a group, a member that failed with no verdict on the message
    ///   ([`Error::is_verdict_on_the_message`]: it is delivered again) holds back the group's
    ///   later members, answered retryable, so none overtakes it.
    ///
    /// A first delivery of a batch of ten members with no duplicates is one request.
    fn commit_batch<P, R, B>(
        &self,
        members: &[crate::Member<'_, P>],
        writes: &B,
    ) -> impl Future<Output = Vec<Result<Outcome<R>, Error>>> + Send
    where
        P: Serialize + ?Sized + Sync,
        R: Serialize + DeserializeOwned + Clone + Send + Sync,
        B: crate::BatchWrites<R>;
}

impl CommitOnce for Idempotency<DynamoDbStore> {
    async fn commit_once<P, R, F>(&self, key: &Key, payload: &P, build: F) -> Result<Outcome<R>, Error>
    where
        P: Serialize + ?Sized + Sync,
        R: Serialize + DeserializeOwned + Send,
        F: FnOnce(&mut Tx<R>) -> Result<R, Error> + Send,
    {
        let hash = self.config().payload_hash(payload)?;
        let mut tx = Tx::new();
        let response = build(&mut tx)?;
        settle(self, key, &hash, tx, response).await
    }

    async fn commit_batch<P, R, B>(
        &self,
        members: &[crate::Member<'_, P>],
        writes: &B,
    ) -> Vec<Result<Outcome<R>, Error>>
    where
        P: Serialize + ?Sized + Sync,
        R: Serialize + DeserializeOwned + Clone + Send + Sync,
        B: crate::BatchWrites<R>,
    {
        crate::batch::commit_batch(self, members, writes).await
    }

    fn write_units<R, F>(&self, key: &Key, build: F) -> Result<crate::WriteUnits, Error>
    where
        R: Serialize,
        F: FnOnce(&mut Tx<R>) -> Result<R, Error>,
    {
        let config = self.config();
        let mut tx = Tx::new();
        let response = build(&mut tx)?;
        let json = response_json(&response, config.max_response_bytes())?;
        // A hash's length, so the record is sized as sent.
        let hash = format!("{}:{}", effectively_once::PAYLOAD_HASH_VERSION, "0".repeat(64));
        let parts = tx.into_commit(key, &hash, json, config.now_ms(), window_s(config));
        Ok(parts.commit.write_units(self.store())?)
    }
}

/// Sends one key's transaction and reads what happened.
pub(crate) async fn settle<R>(
    idempotency: &Idempotency<DynamoDbStore>,
    key: &Key,
    hash: &PayloadHash,
    tx: Tx<R>,
    response: R,
) -> Result<Outcome<R>, Error>
where
    R: Serialize + DeserializeOwned + Send,
{
    let config = idempotency.config();
    let json = response_json(&response, config.max_response_bytes())?;
    let now_ms = config.now_ms();
    let Parts { commit, mut otherwise, expiration_s, carrier_key } =
        tx.into_commit(key, hash.as_str(), json, now_ms, window_s(config));
    match idempotency.store().commit_once(&commit, now_ms).await? {
        Committed::Fresh => Ok(Outcome::Fresh(response)),
        Committed::Exists(record) => replay_own(key, hash, record),
        Committed::ConditionFailed { index, item, .. } => {
            let Some(answer) = otherwise.remove(&index) else {
                let what = format!("write {index}");
                return Err(refused(
                    key,
                    &what,
                    commit.action(index),
                    "no Tx::otherwise answers it; nothing was written",
                ));
            };
            let (answer, fallback) = match answer(item.as_ref()) {
                Otherwise::AlreadyApplied { response, same_payload: true } => return Ok(Outcome::Replayed(response)),
                Otherwise::AlreadyApplied { same_payload: false, .. } => return Err(key_reused(key, hash)),
                Otherwise::Recorded(earlier) => return earlier.replay::<R>(hash).map(Outcome::Replayed),
                Otherwise::Answer(answer) => (answer, Fallback::new()),
                Otherwise::AnswerWith { answer, fallback } => (answer, fallback),
            };
            let recorded = Answered { expiration_s, now_ms, carrier_key };
            record_answer(idempotency, key, hash, answer, fallback, recorded).await
        }
    }
}

/// When and how an answer is recorded.
struct Answered {
    expiration_s: u64,
    now_ms: u64,
    /// A carried record's carrier: its table, key, and partition key attribute.
    carrier_key: Option<(String, Item, String)>,
}

/// Records `answer` as `key`'s outcome, with `fallback`'s writes in the same transaction.
async fn record_answer<R>(
    idempotency: &Idempotency<DynamoDbStore>,
    key: &Key,
    hash: &PayloadHash,
    answer: R,
    fallback: Fallback,
    Answered { expiration_s, now_ms, carrier_key }: Answered,
) -> Result<Outcome<R>, Error>
where
    R: Serialize + DeserializeOwned + Send,
{
    if let Some(error) = fallback.error {
        return Err(unbuilt(format!("{key}: {error}")));
    }
    let json = response_json(&answer, idempotency.config().max_response_bytes())?;
    let recorded = record(key, hash.to_string(), Some(json), expiration_s);
    // With a carried record, only while the carrier is absent: a concurrent duplicate whose
    // condition passed may have applied the effect meanwhile.
    match idempotency.store().record_answer(&recorded, now_ms, carrier_key, &fallback.writes).await? {
        Answer::Written => Ok(Outcome::Fresh(answer)),
        // A concurrent duplicate committed (the condition passed for it), or recorded its own
        // answer (and its fallback) first.
        Answer::Exists(existing) => replay_own(key, hash, existing),
        Answer::FallbackRefused(index) => Err(refused(
            key,
            &format!("fallback write {index}"),
            fallback.writes.get(index),
            "the answer and its fallback were not recorded",
        )),
        Answer::Unexpected(other) => {
            Err(StoreError::new(StoreErrorKind::Other, format!("recording the answer of {key} failed: {other:?}"))
                .into())
        }
    }
}

/// A record that blocked `key`'s transaction, replayed: only if it is `key`'s. A carried record
/// of another key means the carrier is not keyed by the business key (one item per customer,
/// say, for per-order keys): answering the other key's response would ack an event never applied.
fn replay_own<R: DeserializeOwned>(key: &Key, hash: &PayloadHash, record: Record) -> Result<Outcome<R>, Error> {
    if record.id != key.as_str() {
        return Err(StoreError::new(
            StoreErrorKind::Other,
            format!(
                "{key}: the carrier item holds the record of {}; carry_record needs an item keyed by the business key",
                record.id
            ),
        )
        .into());
    }
    Ok(Outcome::Replayed(record.replay(hash)?))
}

/// `KeyReused` for `key`: the core makes it only from a record whose payload hash differs.
pub(crate) fn key_reused(key: &Key, hash: &PayloadHash) -> Error {
    let other = Record {
        payload_hash: format!("{}:other", effectively_once::PAYLOAD_HASH_VERSION),
        ..record(key, String::new(), None, 0)
    };
    match other.replay::<serde_json::Value>(hash) {
        Err(error) => error,
        Ok(_) => unreachable!("a record of another payload never replays"),
    }
}

pub(crate) fn record(key: &Key, payload_hash: String, response: Option<String>, expiration_s: u64) -> Record {
    Record {
        id: key.as_str().to_owned(),
        status: Status::Completed,
        lease_expires_at_ms: 0,
        expiration_s,
        payload_hash,
        owner: String::new(),
        response,
    }
}

/// A commit-once record's dedup window in seconds: the config's, but never shorter than its
/// lease. A window shorter than the time a redelivery takes (a visibility timeout, a retry's
/// backoff) would let the redelivery apply an update twice; no attempt is in flight longer than
/// a lease, so a record lives at least that long.
pub(crate) fn window_s(config: &effectively_once::Config) -> u64 {
    config.dedup_window().max(config.lease()).as_secs().max(1)
}

pub(crate) fn response_json<R: Serialize>(response: &R, max: usize) -> Result<String, Error> {
    let json = serde_json::to_string(response)
        .map_err(|e| StoreError::new(StoreErrorKind::Other, format!("the response does not serialise: {e}")))?;
    if json.len() > max {
        return Err(StoreError::new(
            StoreErrorKind::TooLarge,
            format!("response has {} bytes of JSON, at most {max} are kept", json.len()),
        )
        .into());
    }
    Ok(json)
}
