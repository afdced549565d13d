//! Commit once for a batch: the members of one invocation (an SQS batch's valid messages) in as
//! few `TransactWriteItems` as DynamoDB's limits allow, each member with its own record and
//! writes, and writes its group shares (one balance update per account) once per transaction.
//! A cancelled transaction is read reason by reason: duplicates are answered from their records,
//! a group whose shared write failed falls back to one member at a time, conflicts are retried,
//! and the rest is committed again as a batch.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{CancellationReason, TransactWriteItem};
use effectively_once::{
    Error, ErrorKind, Idempotency, Key, Outcome, PayloadHash, Record, Status, StoreError, StoreErrorKind,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::commit::{action_size, MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS};
use crate::error::classify;
use crate::item::from_item;
use crate::once::{key_reused, record, settle, Tx};
use crate::store::DynamoDbStore;

/// Rounds of a batch: a conflict or a cancellation by other members sends the rest again, at
/// most this many times in all, before the rest is reported retryable.
pub const MAX_ROUNDS: u32 = 8;

/// One member of a batch: its key, its payload (hashed as the config says), and the group whose
/// shared writes it takes part in (an account: its balance), if any.
#[derive(Debug, Clone)]
pub struct Member<'a, P: ?Sized> {
    /// The record's key.
    pub key: Key,
    /// What is hashed.
    pub payload: &'a P,
    /// Members of one group share writes ([`BatchWrites::shared`]) and keep their order.
    pub group: Option<String>,
    /// The payload's hash under the idempotency's config, when the caller has it already (it
    /// looked the key up first, say): not computed again.
    pub hash: Option<PayloadHash>,
}

/// The writes of a batch's members, built as often as rounds and fallbacks need (so each call
/// must build the same writes).
pub trait BatchWrites<R>: Sync {
    /// Member `index`'s own writes, and its response. Its record is added for it.
    fn writes(&self, index: usize, tx: &mut Tx<R>) -> Result<R, Error>;

    /// The writes `members` (of one group, in batch order) share, as one transaction holds them:
    /// their effects aggregated, with a condition that holds if and only if committing the
    /// members one by one in this order would pass every one of theirs. Called with one member
    /// when a member falls back to a transaction of its own: then the writes' own
    /// [`Tx::otherwise`] answers apply. Default: none.
    fn shared(&self, members: &[usize], tx: &mut Tx<R>) -> Result<(), Error> {
        let _ = (members, tx);
        Ok(())
    }
}

/// Who an action of a batch transaction belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// A member's own write.
    Write(usize),
    /// A member's record.
    Record(usize),
    /// A group's shared write (the group's index in the transaction).
    Shared(usize),
}

/// One transaction of a round.
struct Planned<R> {
    actions: Vec<TransactWriteItem>,
    owners: Vec<Owner>,
    /// Members, with their responses.
    members: Vec<(usize, R)>,
    /// Groups: their members.
    groups: Vec<Vec<usize>>,
}

impl<R> Planned<R> {
    fn new() -> Self {
        Planned { actions: Vec::new(), owners: Vec::new(), members: Vec::new(), groups: Vec::new() }
    }

    fn bytes(&self) -> usize {
        self.actions.iter().map(action_size).sum()
    }
}

/// A group's part of a transaction, built.
struct Part<R> {
    actions: Vec<TransactWriteItem>,
    owners: Vec<Owner>,
    members: Vec<(usize, R)>,
}

/// What a member's result is while the batch runs.
type Slot<R> = Option<Result<Outcome<R>, Error>>;

/// The batch in passes: a member whose key came earlier in the batch with another payload (key
/// reuse, or the reuse's own first copy) waits for the next pass with every later member of its
/// group and key, so what the first copy did is settled before it, and its group keeps its
/// order, as one by one. Such a member whose first copy committed is key reuse with no request;
/// one whose first copy is undecided (a failure that is no verdict on the message, so it is
/// delivered again: [`Error::is_verdict_on_the_message`]) waits, as do its group's later members.
pub(crate) async fn commit_batch<P, R, B>(
    idempotency: &Idempotency<DynamoDbStore>,
    members: &[Member<'_, P>],
    writes: &B,
) -> Vec<Result<Outcome<R>, Error>>
where
    P: Serialize + ?Sized + Sync,
    R: Serialize + DeserializeOwned + Clone + Send,
    B: BatchWrites<R>,
{
    let mut results: Vec<Slot<R>> = (0..members.len()).map(|_| None).collect();
    // Keys and groups whose member failed with no verdict on it (it is delivered again): their
    // later members wait.
    let mut undecided: HashSet<Name<'_>> = HashSet::new();
    let mut hashes: Vec<Option<PayloadHash>> = Vec::with_capacity(members.len());
    for (index, member) in members.iter().enumerate() {
        match member.hash.clone().map_or_else(|| idempotency.config().payload_hash(member.payload), Ok) {
            Ok(hash) => hashes.push(Some(hash)),
            Err(error) => {
                if !error.is_verdict_on_the_message() {
                    undecided.extend(names(member));
                }
                hashes.push(None);
                results[index] = Some(Err(error));
            }
        }
    }
    let mut pending: Vec<usize> = (0..members.len()).filter(|&index| hashes[index].is_some()).collect();
    // Keys committed in an earlier pass: the member that took each.
    let mut taken: HashMap<&str, usize> = HashMap::new();
    while !pending.is_empty() {
        let (now, later) = schedule(members, &hashes, pending, &mut undecided, &taken, &mut results);
        let subset: Vec<Member<'_, P>> = now
            .iter()
            .map(|&index| {
                let member = &members[index];
                Member {
                    key: member.key.clone(),
                    payload: member.payload,
                    group: member.group.clone(),
                    hash: hashes[index].clone(),
                }
            })
            .collect();
        let answers = pass(idempotency, &subset, &Subset { writes, map: &now }).await;
        for (&index, answer) in now.iter().zip(answers) {
            let member = &members[index];
            match &answer {
                Ok(Outcome::Fresh(_)) => {
                    taken.insert(member.key.as_str(), index);
                }
                Err(error) if !error.is_verdict_on_the_message() => undecided.extend(names(member)),
                _ => {}
            }
            results[index] = Some(answer);
        }
        pending = later;
    }
    results
        .into_iter()
        .map(|slot| slot.unwrap_or_else(|| Err(StoreError::new(StoreErrorKind::Unavailable, "not run").into())))
        .collect()
}

/// What holds a member back, or defers it to the next pass: its key, or its group. Apart, as a
/// group may be spelled like a key (an account `payments#E1` is not event `E1`'s record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Name<'m> {
    Key(&'m str),
    Group(&'m str),
}

/// A member's names: its key, and its group if it has one.
fn names<'m, P: ?Sized>(member: &'m Member<'_, P>) -> impl Iterator<Item = Name<'m>> {
    std::iter::once(Name::Key(member.key.as_str())).chain(member.group.as_deref().map(Name::Group))
}

/// A pass's members, out of `pending`: those sent now, and those that wait for the next pass
/// (a copy of a key with another payload than its first in this pass, and every later member
/// of its key or group). The rest are answered in `results`: held back behind an undecided key
/// or group (and then undecided themselves, so their own group's later members wait too), or
/// answered from the member that took their key in an earlier pass, with no request.
fn schedule<'m, P: ?Sized, R: Clone>(
    members: &'m [Member<'_, P>],
    hashes: &[Option<PayloadHash>],
    pending: Vec<usize>,
    undecided: &mut HashSet<Name<'m>>,
    taken: &HashMap<&str, usize>,
    results: &mut [Slot<R>],
) -> (Vec<usize>, Vec<usize>) {
    let (mut now, mut later) = (Vec::new(), Vec::new());
    let mut first: HashMap<&str, &str> = HashMap::new();
    let mut deferred: HashSet<Name<'m>> = HashSet::new();
    for index in pending {
        let member = &members[index];
        let hash = hashes[index].as_ref().expect("pending members have hashes");
        let key = member.key.as_str();
        if names(member).any(|name| undecided.contains(&name)) {
            undecided.extend(names(member));
            results[index] = Some(Err(held_back(&member.key)));
        } else if let Some(&earlier) = taken.get(key) {
            let same = hashes[earlier].as_ref().is_some_and(|h| h.as_str() == hash.as_str());
            results[index] = Some(match &results[earlier] {
                Some(Ok(outcome)) if same => Ok(Outcome::Replayed(outcome.response().clone())),
                _ => Err(key_reused(&member.key, hash)),
            });
        } else if first.get(key).is_some_and(|h| *h != hash.as_str())
            || names(member).any(|name| deferred.contains(&name))
        {
            deferred.extend(names(member));
            later.push(index);
        } else {
            first.entry(key).or_insert(hash.as_str());
            now.push(index);
        }
    }
    (now, later)
}

/// A batch's writes for a subset of its members: member `i` of the subset is `map[i]`.
struct Subset<'w, B> {
    writes: &'w B,
    map: &'w [usize],
}

impl<R, B: BatchWrites<R>> BatchWrites<R> for Subset<'_, B> {
    fn writes(&self, index: usize, tx: &mut Tx<R>) -> Result<R, Error> {
        self.writes.writes(self.map[index], tx)
    }

    fn shared(&self, members: &[usize], tx: &mut Tx<R>) -> Result<(), Error> {
        let mapped: Vec<usize> = members.iter().map(|&member| self.map[member]).collect();
        self.writes.shared(&mapped, tx)
    }
}

/// One pass: every copy of a key has the payload of its first.
async fn pass<P, R, B>(
    idempotency: &Idempotency<DynamoDbStore>,
    members: &[Member<'_, P>],
    writes: &B,
) -> Vec<Result<Outcome<R>, Error>>
where
    P: Serialize + ?Sized + Sync,
    R: Serialize + DeserializeOwned + Clone + Send,
    B: BatchWrites<R>,
{
    let config = idempotency.config();
    let mut results: Vec<Slot<R>> = (0..members.len()).map(|_| None).collect();
    let mut hashes: Vec<Option<PayloadHash>> = Vec::with_capacity(members.len());
    for (index, member) in members.iter().enumerate() {
        let hash = match &member.hash {
            Some(hash) => Ok(hash.clone()),
            None => config.payload_hash(member.payload),
        };
        match hash {
            Ok(hash) => hashes.push(Some(hash)),
            Err(error) => {
                hashes.push(None);
                results[index] = Some(Err(error));
            }
        }
    }
    // In-batch duplicates are answered from the first occurrence, with no request of their own.
    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut copies: Vec<(usize, usize)> = Vec::new();
    let mut live: Vec<usize> = Vec::new();
    for (index, member) in members.iter().enumerate() {
        if hashes[index].is_none() {
            continue;
        }
        match first.get(member.key.as_str()) {
            Some(&earlier) => copies.push((index, earlier)),
            None => {
                first.insert(member.key.as_str(), index);
                live.push(index);
            }
        }
    }
    let mut alone: Vec<usize> = Vec::new();
    // A group's members take effect in batch order: the first member of a group that failed
    // with no verdict on it (delivered again) holds back the group's later members (never started), and a member
    // that goes alone takes its group's later members with it.
    let mut held: HashMap<String, usize> = HashMap::new();
    let mut cancellations = 0;
    let mut round = 0u64;
    while !live.is_empty() {
        round += 1;
        let (plans, refused, deferred) = plan(idempotency, members, &hashes, &live, writes);
        alone.extend(refused);
        let mut next = deferred;
        let (mut conflicted, mut cancelled) = (false, false);
        for planned in plans {
            let outcome = send(idempotency, members, &hashes, planned, &mut results).await;
            conflicted |= outcome.conflicted;
            cancelled |= !outcome.again.is_empty();
            next.extend(outcome.again);
            alone.extend(outcome.alone);
        }
        for (index, result) in results.iter().enumerate() {
            if let (Some(Err(error)), Some(group)) = (result, &members[index].group) {
                if !error.is_verdict_on_the_message() {
                    let first = held.entry(group.clone()).or_insert(index);
                    *first = (*first).min(index);
                }
            }
        }
        let mut gone_alone: HashMap<&str, usize> = HashMap::new();
        for &index in &alone {
            if let Some(group) = members[index].group.as_deref() {
                let first = gone_alone.entry(group).or_insert(index);
                *first = (*first).min(index);
            }
        }
        let mut still = Vec::with_capacity(next.len());
        for index in next {
            let group = members[index].group.as_deref();
            if group.and_then(|g| held.get(g)).is_some_and(|&failed| failed < index) {
                results[index] = Some(Err(held_back(&members[index].key)));
            } else if group.and_then(|g| gone_alone.get(g)).is_some_and(|&first| first < index) {
                alone.push(index);
            } else {
                still.push(index);
            }
        }
        still.sort_unstable();
        live = still;
        if cancelled {
            cancellations += 1;
            if cancellations == MAX_ROUNDS && !live.is_empty() {
                for index in live.drain(..) {
                    // Undecided: its group's later members (gone alone) must wait for it.
                    if let Some(group) = &members[index].group {
                        let first = held.entry(group.clone()).or_insert(index);
                        *first = (*first).min(index);
                    }
                    results[index] = Some(Err(StoreError::new(
                        StoreErrorKind::Unavailable,
                        format!(
                            "{}: its batch was cancelled {MAX_ROUNDS} times (conflicts); retried later",
                            members[index].key
                        ),
                    )
                    .into()));
                }
            }
        }
        if conflicted && !live.is_empty() {
            // Back off with jitter, capped, so two consumers on a hot account do not meet again.
            let jitter = (uuid::Uuid::new_v4().as_u128() % 20) as u64;
            tokio::time::sleep(Duration::from_millis((10 * round).min(100) + jitter)).await;
        }
    }
    // One at a time, in batch order, held back as above.
    alone.sort_unstable();
    alone.dedup();
    for index in alone {
        let member = &members[index];
        if member.group.as_ref().and_then(|group| held.get(group)).is_some_and(|&failed| failed < index) {
            results[index] = Some(Err(held_back(&member.key)));
            continue;
        }
        let hash = hashes[index].as_ref().expect("live members have hashes");
        let result = one(idempotency, index, &member.key, hash, writes).await;
        if let (Err(error), Some(group)) = (&result, &member.group) {
            if !error.is_verdict_on_the_message() {
                held.entry(group.clone()).or_insert(index);
            }
        }
        results[index] = Some(result);
    }
    for (copy, earlier) in copies {
        let hash = hashes[copy].as_ref().expect("copies have hashes");
        // Same payload as the first copy: `commit_batch` keeps copies of another payload for
        // a later pass.
        results[copy] = Some(match &results[earlier] {
            Some(Ok(outcome)) => Ok(Outcome::Replayed(outcome.response().clone())),
            Some(Err(error)) => Err(copy_error(&members[copy].key, hash, error)),
            None => Err(StoreError::new(StoreErrorKind::Unavailable, "the first copy was not run").into()),
        });
    }
    results
        .into_iter()
        .map(|slot| slot.unwrap_or_else(|| Err(StoreError::new(StoreErrorKind::Unavailable, "not run").into())))
        .collect()
}

/// A member not started because an earlier member of its group failed with no verdict on it
/// (it is delivered again): retryable, so it is delivered again too, after that one.
fn held_back(key: &Key) -> Error {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!("{key}: not started, an earlier event of its group in this batch failed"),
    )
    .into()
}

/// The first copy's failure, for an in-batch duplicate: key reuse and in progress as such (a
/// copy of a reused key is reuse too), anything else as retryable as it was.
fn copy_error(key: &Key, hash: &PayloadHash, error: &Error) -> Error {
    match error.kind() {
        ErrorKind::KeyReused => key_reused(key, hash),
        ErrorKind::InProgress => {
            let held = Record { status: Status::InProgress, ..record(key, hash.to_string(), None, 0) };
            match held.replay::<serde_json::Value>(hash) {
                Err(error) => error,
                Ok(_) => unreachable!("an in-progress record never replays"),
            }
        }
        // A stored response too large to replay is the copy's answer too.
        ErrorKind::ResponseTooLarge => StoreError::new(StoreErrorKind::TooLarge, format!("{key}: {error}")).into(),
        _ => {
            let kind =
                if error.is_verdict_on_the_message() { StoreErrorKind::Other } else { StoreErrorKind::Unavailable };
            StoreError::new(kind, format!("{key}: the first copy in this batch failed: {error}")).into()
        }
    }
}

/// A member alone: its writes and its share of its group's, in one transaction of its own.
async fn one<R, B>(
    idempotency: &Idempotency<DynamoDbStore>,
    index: usize,
    key: &Key,
    hash: &PayloadHash,
    writes: &B,
) -> Result<Outcome<R>, Error>
where
    R: Serialize + DeserializeOwned + Send,
    B: BatchWrites<R>,
{
    let mut tx = Tx::new();
    let response = writes.writes(index, &mut tx)?;
    let mut shared = Tx::new();
    writes.shared(&[index], &mut shared)?;
    tx.append(shared);
    settle(idempotency, key, hash, tx, response).await
}

/// The transactions of a round (the first chunk of each group), the members that must go alone
/// (a carried record, writes that do not build), and the members deferred to the next round (a
/// group's later chunks).
fn plan<P, R, B>(
    idempotency: &Idempotency<DynamoDbStore>,
    members: &[Member<'_, P>],
    hashes: &[Option<PayloadHash>],
    live: &[usize],
    writes: &B,
) -> (Vec<Planned<R>>, Vec<usize>, Vec<usize>)
where
    P: ?Sized,
    R: Serialize,
    B: BatchWrites<R>,
{
    let mut alone = Vec::new();
    // Groups in order of first appearance; ungrouped members are groups of one.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for &index in live {
        match members[index].group.as_deref() {
            Some(name) => match by_name.get(name) {
                Some(&at) => groups[at].push(index),
                None => {
                    by_name.insert(name, groups.len());
                    groups.push(vec![index]);
                }
            },
            None => groups.push(vec![index]),
        }
    }
    let mut plans = Vec::new();
    let mut current = Planned::new();
    let mut deferred = Vec::new();
    for group in groups {
        // A group too large for one transaction goes one chunk per round, in order: a later
        // chunk's shared write is conditioned on the state the chunk before it left, so it is
        // sent only once that chunk is settled (committed, or its members gone alone, which
        // take the rest of the group with them).
        let (part, taken) = match build_part(idempotency, members, hashes, &group, writes) {
            Ok(built) => built,
            Err(_) => {
                // A member whose writes do not build, or that carries its record, goes alone,
                // where its error (or its carried record) is handled as for a single commit.
                alone.extend_from_slice(&group);
                continue;
            }
        };
        deferred.extend_from_slice(&group[taken..]);
        let bytes: usize = part.actions.iter().map(action_size).sum();
        if current.actions.len() + part.actions.len() > MAX_TRANSACTION_ITEMS
            || current.bytes() + bytes > MAX_TRANSACTION_BYTES
        {
            plans.push(std::mem::replace(&mut current, Planned::new()));
        }
        let group_index = current.groups.len();
        current.groups.push(part.members.iter().map(|(index, _)| *index).collect());
        current.actions.extend(part.actions);
        current.owners.extend(part.owners.into_iter().map(|owner| match owner {
            Owner::Shared(_) => Owner::Shared(group_index),
            other => other,
        }));
        current.members.extend(part.members);
    }
    if !current.actions.is_empty() {
        plans.push(current);
    }
    (plans, alone, deferred)
}

/// The longest prefix of `pending` (at least one member) whose actions and shared writes fit one
/// transaction, built; and how many members it took.
fn build_part<P, R, B>(
    idempotency: &Idempotency<DynamoDbStore>,
    members: &[Member<'_, P>],
    hashes: &[Option<PayloadHash>],
    pending: &[usize],
    writes: &B,
) -> Result<(Part<R>, usize), Error>
where
    P: ?Sized,
    R: Serialize,
    B: BatchWrites<R>,
{
    let config = idempotency.config();
    let now_ms = config.now_ms();
    let mut take = pending.len();
    loop {
        let chunk = &pending[..take];
        let mut part = Part { actions: Vec::new(), owners: Vec::new(), members: Vec::new() };
        for &index in chunk {
            let mut tx = Tx::new();
            let response = writes.writes(index, &mut tx)?;
            if tx.carrier.is_some() {
                return Err(StoreError::new(StoreErrorKind::Other, "a carried record commits alone").into());
            }
            let json = crate::once::response_json(&response, config.max_response_bytes())?;
            let hash = hashes[index].as_ref().expect("live members have hashes");
            let parts = tx.into_commit(&members[index].key, hash.as_str(), json, now_ms, crate::once::window_s(config));
            let actions = parts.commit.actions(idempotency.store(), now_ms)?;
            let count = actions.len();
            part.owners.extend((0..count - 1).map(|_| Owner::Write(index)));
            part.owners.push(Owner::Record(index));
            part.actions.extend(actions);
            part.members.push((index, response));
        }
        let mut shared = Tx::<R>::new();
        if members[chunk[0]].group.is_some() {
            writes.shared(chunk, &mut shared)?;
        }
        for write in shared.writes {
            part.actions.push(write.into_item());
            part.owners.push(Owner::Shared(0));
        }
        let bytes: usize = part.actions.iter().map(action_size).sum();
        if (part.actions.len() <= MAX_TRANSACTION_ITEMS && bytes <= MAX_TRANSACTION_BYTES) || take == 1 {
            return Ok((part, take));
        }
        // Shrink in proportion, at least by one.
        let fits = take * MAX_TRANSACTION_ITEMS / part.actions.len().max(1);
        take = fits.clamp(1, take - 1);
    }
}

/// What one transaction of a round left to do.
struct Sent {
    /// Members to send again in the next round.
    again: Vec<usize>,
    /// Members to commit one at a time.
    alone: Vec<usize>,
    /// Whether a conflict cancelled it.
    conflicted: bool,
}

async fn send<P, R>(
    idempotency: &Idempotency<DynamoDbStore>,
    members: &[Member<'_, P>],
    hashes: &[Option<PayloadHash>],
    planned: Planned<R>,
    results: &mut [Slot<R>],
) -> Sent
where
    P: ?Sized,
    R: DeserializeOwned,
{
    let mut sent = Sent { again: Vec::new(), alone: Vec::new(), conflicted: false };
    let request = idempotency.store().client().transact_write_items().set_transact_items(Some(planned.actions));
    let reasons: Vec<CancellationReason> = match request.send().await {
        Ok(_) => {
            for (index, response) in planned.members {
                results[index] = Some(Ok(Outcome::Fresh(response)));
            }
            return sent;
        }
        Err(SdkError::ServiceError(service))
            if matches!(service.err(), TransactWriteItemsError::TransactionCanceledException(_)) =>
        {
            match service.into_err() {
                TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                    cancelled.cancellation_reasons.unwrap_or_default()
                }
                _ => unreachable!("matched above"),
            }
        }
        Err(error) => {
            let error = classify("TransactWriteItems", error);
            for (index, _) in planned.members {
                let copy = StoreError::new(error.kind(), error.to_string());
                results[index] = Some(Err(copy.into()));
            }
            return sent;
        }
    };
    let code = |at: usize| reasons.get(at).and_then(|r| r.code()).unwrap_or("None");
    let mut settled: HashMap<usize, ()> = HashMap::new();
    let mut to_alone: Vec<usize> = Vec::new();
    for (at, owner) in planned.owners.iter().enumerate() {
        if code(at) != "ConditionalCheckFailed" {
            continue;
        }
        match *owner {
            Owner::Record(index) => {
                let hash = hashes[index].as_ref().expect("live members have hashes");
                let answer = match reasons[at].item() {
                    Some(item) => from_item(item).map_err(Error::from).and_then(|r| r.replay::<R>(hash)),
                    None => {
                        match effectively_once::Store::get(idempotency.store(), members[index].key.as_str()).await {
                            Ok(Some(found)) => found.replay::<R>(hash),
                            Ok(None) => {
                                // Gone since (expired and deleted): send it again.
                                sent.again.push(index);
                                settled.insert(index, ());
                                continue;
                            }
                            Err(error) => Err(error.into()),
                        }
                    }
                };
                results[index] = Some(answer.map(Outcome::Replayed));
                settled.insert(index, ());
            }
            Owner::Write(index) => to_alone.push(index),
            Owner::Shared(group) => to_alone.extend(planned.groups[group].iter().copied()),
        }
    }
    let codes: Vec<&str> =
        (0..reasons.len()).map(code).filter(|c| *c != "None" && *c != "ConditionalCheckFailed").collect();
    sent.conflicted = codes.contains(&"TransactionConflict");
    let failure = codes.iter().find(|c| **c != "TransactionConflict").map(|c| {
        let kind = match *c {
            "ThrottlingError" | "ProvisionedThroughputExceeded" | "RequestLimitExceeded" => StoreErrorKind::Throttled,
            // A full item collection waits for an operator, as the single commit's does.
            "ItemCollectionSizeLimitExceeded" => StoreErrorKind::Misconfigured,
            "ValidationError" => StoreErrorKind::Other,
            // A reason this code does not know is not a verdict on the message.
            _ => StoreErrorKind::Unavailable,
        };
        (kind, format!("batch transaction cancelled: {codes:?}"))
    });
    for (index, _) in planned.members {
        if settled.contains_key(&index) {
            continue;
        }
        if to_alone.contains(&index) {
            sent.alone.push(index);
        } else if let Some((kind, message)) = &failure {
            if *kind == StoreErrorKind::Other {
                // A request refused for one member's items: each alone gets its own verdict,
                // rather than every member of the batch one that is not theirs.
                sent.alone.push(index);
            } else {
                results[index] = Some(Err(StoreError::new(*kind, format!("{}: {message}", members[index].key)).into()));
            }
        } else {
            // Cancelled by another member's condition, or a conflict: not decided, send again.
            sent.again.push(index);
        }
    }
    sent
}
