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
use std::future::Future;

use effectively_once::{Error, Idempotency, Key, Outcome, PayloadHash, Record, StoreError, StoreErrorKind};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::otherwise::{refused, unbuilt, Fallback, Otherwise};
use crate::raw::{Answer, Committed};
use crate::store::DynamoDbStore;
use crate::transaction::WriteUnits;
use crate::tx::{Carrier, Parts, Tx};

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
    /// ([`WriteUnits`]); nothing is sent.
    fn write_units<R, F>(&self, key: &Key, build: F) -> Result<WriteUnits, Error>
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
    ///   write failed (a balance that would not cover its debits) is decided again on the item
    ///   the reason returned, each member as it would be alone, and its refusals and applies
    ///   committed in one transaction conditioned on that item ([`crate::BatchWrites::decide`]);
    ///   without `decide`, it falls back to one transaction per member, in order, so exactly
    ///   the members that would fail alone fail; a member whose own write failed does too;
    ///   conflicts back off (capped, jittered) and the rest is sent again as a batch, at most
    ///   [`MAX_ROUNDS`](crate::MAX_ROUNDS) rounds.
    /// - In a group, a member that failed with no verdict on the message (any
    ///   [`Error::retry`] but [`Retry::Never`](effectively_once::Retry::Never): it is delivered
    ///   again) holds back the group's later members, answered retryable, so none overtakes it.
    /// - A lane ([`crate::Member::in_lane`]: a topic-partition, a partition key) keeps its order
    ///   as a group does, across groups: groups that share a lane are one unit, sent in one
    ///   transaction (or, past the limits, cut in batch order, the rest sent once that part is
    ///   settled); a member behind one of its lane gone to a transaction of its own goes alone
    ///   too, after it; one behind a member of its lane that failed with no verdict on the
    ///   message is held back. So a lane's later member never commits before an earlier one is
    ///   decided, except atomically with it. With no lanes, nothing changes.
    /// - A member marked [`crate::Member::read_first`] (a redelivery), and every member of a
    ///   call on this store dropped before it answered (a driver cutting it at the invocation's
    ///   deadline: it may have committed), has its record read before anything is sent, in one
    ///   eventually consistent `BatchGetItem`: a record that blocks a claim answers it as the
    ///   cancellation would, with no write, so a batch cut after its commit makes progress when
    ///   delivered again instead of paying for the whole commit once more as duplicates.
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

    /// [`CommitOnce::commit_batch`] for a batch some of whose members the caller answered
    /// already: `answers` has one slot per member (or fewer; the rest are `None`), `Some` for a
    /// member answered before the batch (from an answer the caller remembers, or a check of
    /// its own that failed: a setting missing until a deploy, say). Such a member is sent
    /// nothing and its answer is returned as given, unless it is held back:
    ///
    /// - one answered with a failure that is no verdict on the message (any [`Error::retry`]
    ///   but [`Retry::Never`](effectively_once::Retry::Never): it is delivered again) holds back
    ///   the later members of its key and of its lane or, with no lane, of its group, each
    ///   answered retryable, not started (a replay among them too), and each of those holds
    ///   back its own key and lane (or group) in turn, so none overtakes it;
    /// - one with no lane holds its group's members in lanes too, as committing one by one
    ///   would (a credit waiting holds its account's debits, whatever their lane);
    /// - one in a lane holds not its group in other lanes: it took part in no shared write, and
    ///   a trigger orders nothing across lanes, so that would stall lanes the failure never
    ///   touched. (A member
    ///   that fails in the batch's transactions holds its group in every lane: that keeps the
    ///   batch answering as committing one by one in batch order. So does a member the batch
    ///   itself finds undecided before sending it, a record read first in progress elsewhere,
    ///   or a payload that does not hash: its answer is the transaction's, read or not.)
    ///
    /// So the hold-back of a caller's own checks is the batch's, in one place.
    ///
    /// # Panics
    ///
    /// When `answers` is longer than `members`.
    fn commit_batch_with_answers<P, R, B>(
        &self,
        members: &[crate::Member<'_, P>],
        answers: Vec<Option<Result<Outcome<R>, Error>>>,
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
        crate::batch::commit_batch(self, members, Vec::new(), writes).await
    }

    async fn commit_batch_with_answers<P, R, B>(
        &self,
        members: &[crate::Member<'_, P>],
        answers: Vec<Option<Result<Outcome<R>, Error>>>,
        writes: &B,
    ) -> Vec<Result<Outcome<R>, Error>>
    where
        P: Serialize + ?Sized + Sync,
        R: Serialize + DeserializeOwned + Clone + Send + Sync,
        B: crate::BatchWrites<R>,
    {
        crate::batch::commit_batch(self, members, answers, writes).await
    }

    fn write_units<R, F>(&self, key: &Key, build: F) -> Result<WriteUnits, Error>
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
    let parts = tx.into_commit(key, hash.as_str(), json, now_ms, window_s(config));
    match idempotency.store().transact(&parts.commit, now_ms).await? {
        Committed::Fresh => Ok(Outcome::Fresh(response)),
        Committed::Exists(record) => replay_own(key, hash, record),
        Committed::ConditionFailed { index, item, .. } => {
            answer_refusal(idempotency, key, hash, parts, index, item.as_ref(), now_ms).await
        }
    }
}

/// The answer to write `index`'s failed condition: what its [`Tx::otherwise`] says, recorded
/// when it is a business answer; a refusal with no answer is an error naming the write.
async fn answer_refusal<R>(
    idempotency: &Idempotency<DynamoDbStore>,
    key: &Key,
    hash: &PayloadHash,
    parts: Parts<R>,
    index: usize,
    item: Option<&crate::Item>,
    now_ms: u64,
) -> Result<Outcome<R>, Error>
where
    R: Serialize + DeserializeOwned + Send,
{
    let Parts { commit, mut otherwise, expiration_s, carrier_key } = parts;
    let Some(answer) = otherwise.remove(&index) else {
        let what = format!("write {index}");
        return Err(refused(key, &what, commit.action(index), "no Tx::otherwise answers it; nothing was written"));
    };
    let (answer, fallback) = match answer(item) {
        Otherwise::AlreadyApplied { response, same_payload: true } => return Ok(Outcome::Replayed(response)),
        Otherwise::AlreadyApplied { same_payload: false, .. } => return Err(Error::key_reused(key.as_str())),
        Otherwise::Recorded(earlier) => return earlier.replay::<R>(hash).map(Outcome::Replayed),
        Otherwise::Answer(answer) => (answer, Fallback::new()),
        Otherwise::AnswerWith { answer, fallback } => (answer, fallback),
    };
    let recorded = Answered { expiration_s, now_ms, carrier_key };
    record_answer(idempotency, key, hash, answer, fallback, recorded).await
}

/// When and how an answer is recorded.
struct Answered {
    expiration_s: u64,
    now_ms: u64,
    /// A carried record's carrier: its table, key, and partition key attribute.
    carrier_key: Option<Carrier>,
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
    let recorded = Record::completed(key.as_str(), hash.as_str(), Some(json), expiration_s);
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
            StoreErrorKind::Misuse,
            format!(
                "{key}: the carrier item holds the record of {}; carry_record needs an item keyed by the business key",
                record.id
            ),
        )
        .into());
    }
    Ok(Outcome::Replayed(record.replay(hash)?))
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
