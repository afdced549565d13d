//! What a batch is made of: its members ([`Member`]) and their writes ([`BatchWrites`]), and
//! what the batch knows of a group's shared item when it decides the group's members on it
//! ([`Observed`], [`Decided`]).

use effectively_once::{Error, Key, PayloadHash};

use crate::tx::{Item, Tx};

/// One member of a batch: its key, its payload (hashed as the config says), the group whose
/// shared writes it takes part in (an account: its balance), if any, and the lane whose order it
/// keeps (a Kafka topic-partition, a Kinesis partition key, a FIFO message group), if any.
#[derive(Debug, Clone)]
pub struct Member<'a, P: ?Sized> {
    /// The record's key.
    pub key: Key,
    /// What is hashed.
    pub payload: &'a P,
    /// Members of one group share writes ([`BatchWrites::shared`]) and keep their order.
    pub group: Option<String>,
    /// Members of one lane keep their order, as a group's do, whatever their groups; they
    /// share no writes.
    pub lane: Option<String>,
    /// The payload's hash, when the caller has it already: not computed again.
    hash: Option<PayloadHash>,
    /// Whether its record is read before the batch is sent ([`Member::read_first`]).
    read_first: bool,
}

impl<'a, P: ?Sized> Member<'a, P> {
    /// A member of no group, its payload hashed under the idempotency's config.
    pub fn new(key: Key, payload: &'a P) -> Self {
        Member { key, payload, group: None, lane: None, hash: None, read_first: false }
    }

    /// In `group`: its members share writes ([`BatchWrites::shared`]) and keep their order.
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// In `lane`: its members take effect in batch order, as a group's do, although they may
    /// belong to different groups (accounts of one Kafka partition) and share no writes. A later
    /// member of the lane is committed only in the same transaction as its lane's undecided
    /// earlier members, or once they are decided; behind one that failed in a way that may still
    /// take effect (delivered again) it is held back, answered retryable, not started.
    ///
    /// ```
    /// # use effectively_once::Key;
    /// # use effectively_once_dynamodb::Member;
    /// let key = Key::new("payments", "e-7").unwrap();
    /// let member = Member::new(key, "{}").in_group("acct-1").in_lane("payments-topic/2");
    /// assert_eq!(member.lane.as_deref(), Some("payments-topic/2"));
    /// ```
    pub fn in_lane(mut self, lane: impl Into<String>) -> Self {
        self.lane = Some(lane.into());
        self
    }

    /// With the payload's hash under the idempotency's config, when the caller has it already
    /// (it looked the key up first, say): not computed again.
    pub fn with_hash(mut self, hash: PayloadHash) -> Self {
        self.hash = Some(hash);
        self
    }

    /// Likely a duplicate (a redelivery, say): its record is read before the batch is sent, in
    /// one eventually consistent `BatchGetItem` with the batch's other such members
    /// ([`DynamoDbStore::get_records`](crate::DynamoDbStore::get_records)), and a record that
    /// blocks a claim answers it as the transaction's cancellation would (a replay, key reuse, in
    /// progress), with no write: a duplicate costs half a read unit instead of a cancelled
    /// transaction (one write unit per action) and the batch's second try. A record the read
    /// misses (written a moment ago) costs only that cancellation: the transaction still decides.
    /// A failed read reads nothing. The members of a commit dropped before it answered (cut at a
    /// deadline) are read first when they come again, marked or not.
    pub fn read_first(mut self) -> Self {
        self.read_first = true;
        self
    }

    /// Whether its record is read before the batch is sent ([`Member::read_first`]).
    pub fn reads_first(&self) -> bool {
        self.read_first
    }

    /// The payload's hash the caller gave ([`Member::with_hash`]).
    pub fn hash(&self) -> Option<&PayloadHash> {
        self.hash.as_ref()
    }
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

    /// Decides `members` (of one group, in batch order) on the group's shared item as
    /// `observed`, as committing them one by one in this order would: each member whose write
    /// would be refused gets the answer its [`Tx::otherwise`] would record, and the shared
    /// write of the others goes to `tx`, on a condition that holds if and only if committing
    /// the members one by one on the item as it is would decide each of them the same (for
    /// [`Observed::Unseen`], as assumed: a wrong assumption must fail it). The item observed is
    /// then a hint: the condition should hold on every item that decides the same (for a
    /// balance, an interval), not only on the item as observed, so that another writer's change
    /// that crosses no threshold of the decisions does not refuse them. A transaction that
    /// commits so commits exactly these decisions; one whose shared write is refused returns
    /// the item, and the members are decided again on it. With no member to
    /// apply, the shared write is a condition check of the item alone.
    ///
    /// `None` (the default): the batch uses [`BatchWrites::shared`], and a group whose shared
    /// write is refused goes one member per transaction.
    fn decide(&self, members: &[usize], observed: &Observed, tx: &mut Tx<R>) -> Option<Result<Decided<R>, Error>> {
        let _ = (members, observed, tx);
        None
    }
}

/// What a batch knows of a group's shared item ([`BatchWrites::decide`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// Not seen yet: decide on an assumption that the shared write's condition checks.
    Unseen,
    /// As a refused shared write returned it, or as the group's last committed transaction
    /// left it if nobody else wrote it meanwhile (a hint: the condition of
    /// [`BatchWrites::decide`] checks what the decisions need); `None`: no item.
    Seen(Option<Item>),
}

/// A group's members decided on its shared item ([`BatchWrites::decide`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Decided<R> {
    /// Each member's answer when it is refused, in the order given: `None` applies it (its
    /// writes and its record), `Some(answer)` refuses it: its record holds `answer`, and of its
    /// writes only their conditions are sent, as checks.
    pub refusals: Vec<Option<R>>,
    /// The item once the transaction commits, if the item was as observed: what the group's
    /// next transaction in the batch is decided on, a hint as the observed item is
    /// ([`Observed::Unseen`] when it cannot be told).
    pub after: Observed,
}
