//! Commit once for a batch: the members of one invocation (an SQS batch's valid messages) in as
//! few `TransactWriteItems` as DynamoDB's limits allow, each member with its own record and
//! writes, and writes its group shares (one balance update per account) once per transaction.
//! A cancelled transaction is read reason by reason: duplicates are answered from their records,
//! conflicts are retried, and the rest is committed again as a batch. A group whose shared write
//! failed its condition is, when its writes decide ([`BatchWrites::decide`]), replayed in batch
//! order on the shared item the cancellation returned (`ALL_OLD`): its refusals are decided
//! there and committed (their records) with its applies in one transaction, conditioned on the
//! item being one on which committing them one by one decides them the same (for the ledger:
//! the currency, and the balance within an interval), so the item seen is a hint, and another
//! writer's change that crosses no threshold of the decisions leaves them standing; the item
//! is then tracked across the group's later transactions, so a group costs at most two more
//! transactions whatever its size (one to see the item, one more per writer that crosses a
//! threshold meanwhile: not counted towards [`MAX_ROUNDS`], so the batch's other groups are not
//! failed with it, but at most [`MAX_ROUNDS`] times per group before it goes one member at a
//! time). Otherwise the group falls back to one member at a time.
//!
//! Members of a lane ([`Member::in_lane`]) keep their order across groups: groups sharing a
//! lane go in one transaction ([`schedule::units`]), and the hold-back and going alone follow
//! lanes as they follow groups.
//!
//! What is sent when is decided in [`schedule`], with no I/O; this module builds the members'
//! writes and sends what it decides.

mod before;
mod cut;
mod plan;
mod schedule;
mod writes;

use effectively_once::{
    Error, ErrorChain, ErrorKind, Idempotency, Key, Outcome, PayloadHash, Retry, StoreError, StoreErrorKind,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub(crate) use self::cut::CutCommits;
pub use self::writes::{BatchWrites, Decided, Member, Observed};

use self::before::Before;
use self::plan::Planned;
use self::schedule::{Early, Entry, Passes, Rounds, States};
use crate::commit_once::settle;
use crate::item::from_item;
use crate::read::Consistency;
use crate::store::DynamoDbStore;
use crate::transaction::{self, backoff, Sent};
use crate::tx::Tx;

/// Rounds of a batch: a conflict or a cancellation by other members sends the rest again, at
/// most this many times in all, before the rest is reported retryable.
pub const MAX_ROUNDS: u32 = 8;

/// What a member's result is while the batch runs.
type Slot<R> = Option<Result<Outcome<R>, Error>>;

/// What the batch's members are, as every step reads them.
struct Batch<'b, 'm, P: ?Sized, B> {
    idempotency: &'b Idempotency<DynamoDbStore>,
    members: &'b [Member<'m, P>],
    hashes: &'b [Option<PayloadHash>],
    entries: &'b [Entry<'b>],
    writes: &'b B,
}

/// Commits `members` in passes ([`Passes`]), each pass in rounds ([`Rounds`]), and answers each
/// member as committing it alone, in batch order, would have. `answers` holds the members the
/// caller answered already (one per member, or fewer: the rest `None`); those, and the members
/// whose records a read first answers ([`Member::read_first`], [`CutCommits`]), are sent nothing,
/// and one that failed with no verdict on the message holds back the later members of its key
/// and order ([`before::held_before`]). A call dropped before it answers notes its members' keys,
/// read first when they come again.
pub(crate) async fn commit_batch<P, R, B>(
    idempotency: &Idempotency<DynamoDbStore>,
    members: &[Member<'_, P>],
    answers: Vec<Slot<R>>,
    writes: &B,
) -> Vec<Result<Outcome<R>, Error>>
where
    P: Serialize + ?Sized + Sync,
    R: Serialize + DeserializeOwned + Clone + Send,
    B: BatchWrites<R>,
{
    assert!(answers.len() <= members.len(), "at most one answer per member");
    let unanswered = idempotency.store().cut_commits().guard(members);
    let mut results = answers;
    results.resize_with(members.len(), || None);
    let given: Vec<bool> = results.iter().map(Option::is_some).collect();
    let hashes = hash(idempotency, members, &mut results);
    read_first(idempotency, members, &hashes, &mut results).await;
    let before: Vec<Before> = (0..members.len()).map(|index| state_of(&results[index], given[index])).collect();
    let mut entries: Vec<Entry<'_>> = members
        .iter()
        .zip(&hashes)
        .map(|(member, hash)| Entry {
            key: member.key.as_str(),
            group: member.group.as_deref(),
            lane: member.lane.as_deref(),
            hash: hash.as_ref().map(PayloadHash::as_str),
        })
        .collect();
    let held = before::held_before(&entries, &before);
    let mut is_held = vec![false; members.len()];
    for &index in &held {
        is_held[index] = true;
    }
    for (index, entry) in entries.iter_mut().enumerate() {
        // Answered before the batch: not sent.
        if results[index].is_some() || is_held[index] {
            entry.hash = None;
        }
    }
    let batch = Batch { idempotency, members, hashes: &hashes, entries: &entries, writes };
    for &index in &held {
        results[index] = Some(Err(batch.held_back(index)));
    }
    batch.passes(&mut results).await;
    unanswered.answered();
    results.into_iter().map(|slot| slot.unwrap_or_else(|| Err(unavailable("not run")))).collect()
}

/// What a member's answer, if any, is before the batch is sent: the caller's (`given`), or one
/// the batch found itself (a record read first, a payload that does not hash), which holds as
/// a failure in its transaction would.
fn state_of<R>(slot: &Slot<R>, given: bool) -> Before {
    match slot {
        None => Before::Pending,
        Some(Err(error)) if error.retry() != Retry::Never => {
            if given {
                Before::Undecided
            } else {
                Before::FoundUndecided
            }
        }
        Some(_) => Before::Answered,
    }
}

/// The payload hash of each member not answered yet (the caller's, or computed under the
/// config); a member whose payload does not hash is answered with the error.
fn hash<P, R>(
    idempotency: &Idempotency<DynamoDbStore>,
    members: &[Member<'_, P>],
    results: &mut [Slot<R>],
) -> Vec<Option<PayloadHash>>
where
    P: Serialize + ?Sized,
{
    let mut hashes = Vec::with_capacity(members.len());
    for (index, member) in members.iter().enumerate() {
        if results[index].is_some() {
            hashes.push(None);
            continue;
        }
        match member.hash().cloned().map_or_else(|| idempotency.config().payload_hash(member.payload), Ok) {
            Ok(hash) => hashes.push(Some(hash)),
            Err(error) => {
                hashes.push(None);
                results[index] = Some(Err(error));
            }
        }
    }
    hashes
}

/// Reads first the records of the members not answered yet that are marked
/// ([`Member::read_first`]) or whose commit was cut short ([`CutCommits`]), in one eventually
/// consistent read, and answers each member whose record blocks a claim as the transaction's
/// cancellation would. A failed read reads nothing: the transactions decide, as without it.
async fn read_first<P, R>(
    idempotency: &Idempotency<DynamoDbStore>,
    members: &[Member<'_, P>],
    hashes: &[Option<PayloadHash>],
    results: &mut [Slot<R>],
) where
    P: ?Sized,
    R: DeserializeOwned,
{
    let cut = idempotency.store().cut_commits();
    let ids: Vec<&str> = members
        .iter()
        .zip(hashes)
        // `take` first: a cut key is forgotten once read.
        .filter(|(member, hash)| hash.is_some() && (cut.take(member.key.as_str()) || member.reads_first()))
        .map(|(member, _)| member.key.as_str())
        .collect();
    if ids.is_empty() {
        return;
    }
    // Eventually consistent, at half the read units: a record that blocks a claim is final
    // while it does, so a stale copy answers right; one the read misses (written a moment ago)
    // costs the cancelled transaction it costs without the read.
    let records = match idempotency.store().get_records(ids, Consistency::Eventual).await {
        Ok(records) => records,
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), "read of the batch's records failed; its transactions decide");
            return;
        }
    };
    let now_ms = idempotency.config().now_ms();
    for ((member, hash), slot) in members.iter().zip(hashes).zip(results.iter_mut()) {
        let found = records.get(member.key.as_str()).filter(|record| record.blocks_claim_at(now_ms));
        if let (Some(record), Some(hash), None) = (found, hash, &slot) {
            *slot = Some(record.replay::<R>(hash).map(Outcome::Replayed));
        }
    }
}

/// What one transaction of a round left to do.
#[derive(Default)]
struct Left {
    /// Members to send again in the next round.
    again: Vec<usize>,
    /// Members to commit one at a time.
    alone: Vec<usize>,
    /// Whether a conflict cancelled it.
    conflicted: bool,
    /// Whether the cancellation counts towards [`MAX_ROUNDS`]: not when only groups decided on
    /// their item found it otherwise ([`schedule::only_sights`]), each bounded on its own.
    counted: bool,
}

impl<P, B> Batch<'_, '_, P, B>
where
    P: ?Sized,
{
    fn key(&self, index: usize) -> &Key {
        &self.members[index].key
    }

    fn hash(&self, index: usize) -> &PayloadHash {
        self.hashes[index].as_ref().expect("members sent have hashes")
    }

    /// The members not answered before the batch, in passes: every copy of a key has the
    /// payload of its first.
    async fn passes<R>(&self, results: &mut [Slot<R>])
    where
        P: Sync,
        R: Serialize + DeserializeOwned + Clone + Send,
        B: BatchWrites<R>,
    {
        let mut passes = Passes::new(self.entries);
        while let Some(pass) = passes.next() {
            for (index, early) in pass.answered {
                results[index] = Some(self.early(index, early, results));
            }
            self.pass(&pass.send, results).await;
            for &index in &pass.send {
                match &results[index] {
                    Some(Ok(Outcome::Fresh(_))) => passes.taken(index),
                    Some(Err(error)) if error.retry() != Retry::Never => passes.undecided(index),
                    _ => {}
                }
            }
        }
    }

    /// A member not started because an earlier member of its group or lane failed with no
    /// verdict on it (it is delivered again): retryable, so it is delivered again too, after
    /// that one.
    fn held_back(&self, index: usize) -> Error {
        let key = self.key(index);
        let of = if self.members[index].lane.is_some() { "group or lane" } else { "group" };
        unavailable(format!("{key}: not started, an earlier event of its {of} in this batch failed"))
    }

    /// The answer to a member a pass answers without a request.
    fn early<R: Clone>(&self, index: usize, early: Early, results: &[Slot<R>]) -> Result<Outcome<R>, Error> {
        match early {
            Early::HeldBack => Err(self.held_back(index)),
            Early::Replay(earlier) => match &results[earlier] {
                Some(Ok(outcome)) => Ok(Outcome::Replayed(outcome.response().clone())),
                _ => Err(Error::key_reused(self.key(index).as_str())),
            },
            Early::KeyReused => Err(Error::key_reused(self.key(index).as_str())),
        }
    }
}

impl<'b, P, B> Batch<'b, '_, P, B>
where
    P: ?Sized + Sync,
{
    /// One pass: every copy of a key has the payload of its first. Rounds of transactions, then
    /// the members gone alone, one at a time, then the copies.
    async fn pass<R>(&self, send: &[usize], results: &mut [Slot<R>])
    where
        R: Serialize + DeserializeOwned + Clone + Send,
        B: BatchWrites<R>,
    {
        // In-batch duplicates are answered from the first occurrence, with no request of their own.
        let (mut live, copies) = schedule::copies(send.iter().map(|&index| (index, self.entries[index].key)));
        let mut rounds = Rounds::new(self.entries);
        let mut states = States::default();
        let mut round = 0;
        while !live.is_empty() {
            round += 1;
            let (plans, refused, deferred) = self.plan::<R>(&live, &states);
            rounds.go_alone(refused);
            let (mut next, mut conflicted, mut cancelled) = (deferred, false, false);
            for planned in plans {
                let left = self.send(planned, results, &mut rounds, &mut states).await;
                conflicted |= left.conflicted;
                cancelled |= left.counted && !left.again.is_empty();
                next.extend(left.again);
                rounds.go_alone(left.alone);
            }
            let end = rounds.end_round(next, cancelled);
            for index in end.held_back {
                results[index] = Some(Err(self.held_back(index)));
            }
            for index in end.exhausted {
                let key = self.key(index);
                let message = format!("{key}: its batch was cancelled {MAX_ROUNDS} times (conflicts); retried later");
                results[index] = Some(Err(unavailable(message)));
            }
            live = end.live;
            if conflicted && !live.is_empty() {
                // So two consumers on a hot account do not meet again.
                tokio::time::sleep(backoff(round)).await;
            }
        }
        self.alone(&mut rounds, results).await;
        for (copy, earlier) in copies {
            // Same payload as the first copy: the passes keep copies of another payload for a
            // later pass.
            results[copy] = Some(match &results[earlier] {
                Some(Ok(outcome)) => Ok(Outcome::Replayed(outcome.response().clone())),
                Some(Err(error)) => Err(copy_error(self.key(copy), error)),
                None => Err(unavailable("the first copy was not run")),
            });
        }
    }

    /// The members gone alone, one at a time in batch order, each behind its group's and lane's
    /// undecided members.
    async fn alone<R>(&self, rounds: &mut Rounds<'_>, results: &mut [Slot<R>])
    where
        R: Serialize + DeserializeOwned + Send,
        B: BatchWrites<R>,
    {
        for index in rounds.alone() {
            if rounds.held(index) {
                // Not started: it holds its own group's and lane's later members in turn.
                rounds.undecided(index);
                results[index] = Some(Err(self.held_back(index)));
                continue;
            }
            let result = self.one(index).await;
            if matches!(&result, Err(error) if error.retry() != Retry::Never) {
                rounds.undecided(index);
            }
            results[index] = Some(result);
        }
    }

    /// A member alone: its writes and its share of its group's, in one transaction of its own.
    async fn one<R>(&self, index: usize) -> Result<Outcome<R>, Error>
    where
        R: Serialize + DeserializeOwned + Send,
        B: BatchWrites<R>,
    {
        let mut tx = Tx::new();
        let response = self.writes.writes(index, &mut tx)?;
        let mut shared = Tx::new();
        self.writes.shared(&[index], &mut shared)?;
        tx.append(shared);
        settle(self.idempotency, self.key(index), self.hash(index), tx, response).await
    }

    /// Sends one transaction of a round, answers what it decided, and says what it left.
    async fn send<R>(
        &self,
        planned: Planned<R>,
        results: &mut [Slot<R>],
        rounds: &mut Rounds<'_>,
        states: &mut States<'b>,
    ) -> Left
    where
        R: DeserializeOwned,
    {
        let mut left = Left::default();
        let members: Vec<usize> = planned.members.iter().map(|(index, _)| *index).collect();
        let cancellation = match transaction::send(self.idempotency.store().client(), planned.actions).await {
            Ok(Sent::Committed) => {
                for (group, share) in planned.groups.iter().zip(planned.shares) {
                    if let (Some(name), Some(_)) = (self.entries[group[0]].group, share.on) {
                        states.set(name, share.after);
                    }
                }
                for (index, response) in planned.members {
                    results[index] = Some(Ok(Outcome::Fresh(response)));
                }
                return left;
            }
            Ok(Sent::Cancelled(cancellation)) => cancellation,
            Err(error) => {
                for &index in &members {
                    let copy = StoreError::new(error.kind(), error.to_string());
                    answer(results, rounds, index, Err(copy.into()));
                }
                return left;
            }
        };
        let decided: Vec<Option<&Observed>> = planned.shares.iter().map(|share| share.on.as_ref()).collect();
        let verdicts = schedule::read(&planned.owners, &planned.groups, &decided, &members, &cancellation);
        left.counted = !schedule::only_sights(&verdicts);
        // A group whose item keeps changing across its thresholds goes one member at a time,
        // where each member's own condition decides it.
        let mut changing: Vec<usize> = Vec::new();
        for (group, seen) in verdicts.observed {
            if let Some(name) = self.entries[planned.groups[group][0]].group {
                if matches!(decided[group], Some(Observed::Seen(_))) && states.changed(name) > MAX_ROUNDS {
                    changing.extend_from_slice(&planned.groups[group]);
                }
                states.set(name, seen);
            }
        }
        for (index, at) in verdicts.duplicates {
            match self.duplicate(index, cancellation.item(at)).await {
                Some(result) => answer(results, rounds, index, result.map(Outcome::Replayed)),
                // Gone since (expired and deleted): send it again.
                None => left.again.push(index),
            }
        }
        let codes = cancellation.codes();
        for index in verdicts.failed {
            let kind = verdicts.failure.unwrap_or(StoreErrorKind::Unavailable);
            let error = StoreError::new(kind, format!("{}: batch transaction cancelled: {codes:?}", self.key(index)));
            answer(results, rounds, index, Err(error.into()));
        }
        left.again.extend(verdicts.again.into_iter().filter(|index| !changing.contains(index)));
        left.alone = verdicts.alone;
        left.alone.extend(changing);
        left.conflicted = verdicts.conflicted;
        left
    }

    /// A duplicate's answer, from the record its cancelled action returned (or read, from a
    /// server that returns none): `None` when the record is gone.
    async fn duplicate<R: DeserializeOwned>(
        &self,
        index: usize,
        item: Option<&crate::Item>,
    ) -> Option<Result<R, Error>> {
        let hash = self.hash(index);
        match item {
            Some(item) => Some(from_item(item).map_err(Error::from).and_then(|record| record.replay::<R>(hash))),
            None => match effectively_once::Store::get(self.idempotency.store(), self.key(index).as_str()).await {
                Ok(Some(found)) => Some(found.replay::<R>(hash)),
                Ok(None) => None,
                Err(error) => Some(Err(error.into())),
            },
        }
    }
}

/// Sets member `index`'s result; one that failed with no verdict on the message holds its
/// group's and lane's later members back.
fn answer<R>(results: &mut [Slot<R>], rounds: &mut Rounds<'_>, index: usize, result: Result<Outcome<R>, Error>) {
    if matches!(&result, Err(error) if error.retry() != Retry::Never) {
        rounds.undecided(index);
    }
    results[index] = Some(result);
}

fn unavailable(message: impl Into<String>) -> Error {
    StoreError::new(StoreErrorKind::Unavailable, message).into()
}

/// The first copy's failure, for an in-batch duplicate: key reuse and in progress as such (a
/// copy of a reused key is reuse too), anything else as retryable as it was.
fn copy_error(key: &Key, error: &Error) -> Error {
    match error.kind() {
        ErrorKind::KeyReused => Error::key_reused(key.as_str()),
        ErrorKind::InProgress => Error::in_progress(key.as_str(), None),
        // A stored response too large to replay is the copy's answer too.
        ErrorKind::ResponseTooLarge => StoreError::new(StoreErrorKind::TooLarge, format!("{key}: {error}")).into(),
        _ => {
            let kind = if error.retry() == Retry::Never { StoreErrorKind::Other } else { StoreErrorKind::Unavailable };
            StoreError::new(kind, format!("{key}: the first copy in this batch failed: {error}")).into()
        }
    }
}
