//! Exactly-once ledger posts: entry, balance, idempotency record and outbox row in one
//! `TransactWriteItems`, so a first delivery is one request and nothing can half-happen.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use effectively_once::{
    Config, HashVersion, Idempotency, Key, Outcome, Record, RecordCache, StoreError, StoreErrorKind,
};
use effectively_once_dynamodb::{
    classify_sdk_error, record_carried_by, BatchWrites, CommitOnce, Decided, DynamoDbStore, Member, Observed,
    Otherwise, Table, Tx, WriteUnits, NEVER_EXPIRES,
};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::outbox;
use crate::payment::PaymentEvent;
use crate::time::rfc3339;

mod preread;
mod replay;

pub use self::preread::{Deliveries, Delivery, BREAK_EVEN};
use self::replay::{replay, Replay};

/// The key prefix of payment records: `payments#{event_id}`.
pub const PREFIX: &str = "payments";

/// What posting a payment did. Stored, so a duplicate gets the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Posting {
    /// The entry was written and the balance moved.
    Applied,
    /// Nothing was posted, for this reason; the message is not to be retried.
    Rejected {
        /// Why.
        reason: Rejection,
    },
}

/// Why a valid payment was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Rejection {
    /// The account holds another currency, set by its first applied event.
    CurrencyMismatch {
        /// The account's currency.
        account_currency: String,
    },
    /// The debit would take the balance below zero.
    InsufficientFunds {
        /// The balance when the debit was rejected.
        balance_cents: i64,
    },
}

/// What [`Ledger::migrate`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Migration {
    /// Entries found carrying a record.
    pub carried_entries: u64,
    /// Own records written for them (the rest had one).
    pub records_written: u64,
    /// Recorded outcomes whose finite expiration was made permanent.
    pub records_made_permanent: u64,
    /// Entries whose event id already had a record of another payload (the id was used twice
    /// before the migration, or since, by a build that hashes payloads under another version);
    /// logged at warn with both hash versions, left for an operator.
    pub conflicts: u64,
}

/// An account's balance item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    /// The sum of applied amounts.
    pub balance_cents: i64,
    /// The number of applied entries.
    pub entry_count: u64,
    /// The account's currency.
    pub currency: String,
}

/// Posts payments to the ledger table (contract: `pk`, `sk`; `entry#{event_id}` and `balance`).
///
/// An event id takes effect at most once across the whole ledger, not per account: its record
/// `payments#{event_id}` in the idempotency table is written in the same transaction as the
/// entry and the balance, under the claim condition, so the same id sent for another account or
/// with another amount finds it and is key reuse. Where the records live, and what each item
/// costs (write units, items under 1 KB):
///
/// | item | units | why it is needed |
/// |---|---|---|
/// | idempotency record `payments#{event_id}` | 2 | the duplicate test across all accounts; its `ALL_OLD` image is the replay, and a recorded rejection has the same key, so a rejected event stays rejected |
/// | ledger entry | 2 | the effect itself; conditional on not existing, so no write can replace it |
/// | balance update | 2 | the effect itself; its condition is the business rule (currency, overdraft) |
/// | outbox row, with `receipt_email` only | 2 | the receipt must be sent if and only if the payment applied; conditional, never overwritten |
///
/// So a first delivery is 6 units for a credit or a debit (8 with a receipt), in one request; a
/// duplicate is one cancelled transaction, modelled as 1 unit per item (3, or 4 with a receipt).
/// The Powertools pattern spends 6 on a first delivery (a claim of 1, entry and balance 4, a
/// completion of 1) in 3 requests, and leaves a window between the ledger commit and the
/// completion in which a crash posts twice. The records of a ledger never expire ([`NEVER_EXPIRES`]): the uniqueness of
/// an event id lasts as long as its entry, at the price of one small item of storage per event.
#[derive(Debug, Clone)]
pub struct Ledger {
    idempotency: Idempotency<DynamoDbStore>,
    table: Table,
    outbox: Option<Table>,
    config: Config,
    /// Copies of the records of the event ids this ledger (this sandbox) posted or met lately: a
    /// ledger's records never expire and never change once written (an answer is final), so a
    /// copy answers a later duplicate exactly as the record would ([`Record::replay`]), with no
    /// request. Shared by clones.
    seen: Arc<RecordCache>,
    /// The running estimate of how often a batch meets a duplicate it did not remember, which
    /// decides what a batch reads first (`preread`). Shared by clones.
    estimate: preread::Estimate,
}

/// How many event ids' answers a ledger remembers ([`Ledger::post_batch`]): about 1.5 MB.
pub const SEEN_CAPACITY: usize = 10_000;

/// A ledger's remembered answers: [`SEEN_CAPACITY`] records, shared by its clones.
fn remembered_answers() -> Arc<RecordCache> {
    Arc::new(RecordCache::new(SEEN_CAPACITY))
}

/// A ledger entry as stored (contract: `pk`, `sk`, `amount_cents`, `currency`, `event_id`,
/// `posted_at`). Built as attribute values by hand, not through `serde_dynamo`: every post
/// builds one, and the serializer cost about 4,700 more instructions an event (callgrind, batch
/// 10: the entry's writes went from about 12,700 to 8,000).
fn entry_item(event: &PaymentEvent, posted_at: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), AttributeValue::S(account_pk(&event.account_id))),
        ("sk".to_owned(), AttributeValue::S(format!("entry#{}", event.event_id))),
        ("amount_cents".to_owned(), AttributeValue::N(event.amount_cents.to_string())),
        ("currency".to_owned(), AttributeValue::S(event.currency.clone())),
        ("event_id".to_owned(), AttributeValue::S(event.event_id.clone())),
        ("posted_at".to_owned(), AttributeValue::S(posted_at.to_owned())),
    ])
}

/// A batch's events as [`BatchWrites`]: member `i` is `events[positions[i]]`.
struct Postings<'a> {
    ledger: &'a Ledger,
    events: &'a [PaymentEvent],
    positions: &'a [usize],
    posted_at: String,
    unrecorded: Unrecorded,
}

/// The event ids a batch answered from an entry without its record: such an answer is not
/// remembered, as no record (no payload hash) stands behind it; the entry answers a later copy
/// by its amount and currency, in this sandbox as in any other.
type Unrecorded = std::sync::Arc<std::sync::Mutex<HashSet<String>>>;

impl BatchWrites<Posting> for Postings<'_> {
    fn writes(&self, index: usize, tx: &mut Tx<Posting>) -> Result<Posting, effectively_once::Error> {
        self.ledger.own_writes(tx, &self.events[self.positions[index]], &self.posted_at, Some(&self.unrecorded))
    }

    fn shared(&self, members: &[usize], tx: &mut Tx<Posting>) -> Result<(), effectively_once::Error> {
        let events: Vec<&PaymentEvent> = members.iter().map(|&m| &self.events[self.positions[m]]).collect();
        self.ledger.balance_update(tx, &events)
    }

    fn decide(
        &self,
        members: &[usize],
        observed: &Observed,
        tx: &mut Tx<Posting>,
    ) -> Option<Result<Decided<Posting>, effectively_once::Error>> {
        let events: Vec<&PaymentEvent> = members.iter().map(|&m| &self.events[self.positions[m]]).collect();
        let replay = replay(&events, observed)?;
        Some(self.ledger.replayed_update(tx, &events[0].account_id, &replay).map(|()| Decided {
            refusals: replay.refusals.into_iter().map(|r| r.map(|reason| Posting::Rejected { reason })).collect(),
            after: replay.after,
        }))
    }
}

/// A batch's events as [`CommitOnce::commit_batch_with_answers`] takes them: member `i` is
/// `events[positions[i]]`, answered already when `answers[i]` is.
struct Admitted<'e> {
    members: Vec<Member<'e, PaymentEvent>>,
    answers: Vec<Option<Result<Outcome<Posting>, effectively_once::Error>>>,
    positions: Vec<usize>,
}

/// An account's balance item's key.
#[derive(Serialize)]
struct BalanceKey {
    pk: String,
    sk: &'static str,
}

impl Ledger {
    /// A ledger on `table`, recording rejections in `store`'s idempotency table, writing receipt
    /// rows to `outbox` when given.
    pub fn new(store: DynamoDbStore, table: impl Into<String>, outbox: Option<String>) -> Self {
        Ledger {
            idempotency: Idempotency::new(store, Config::default()),
            table: Table::new(table, "pk").with_sort_key("sk"),
            outbox: outbox.map(|name| Table::new(name, outbox::KEY)),
            config: Config::default(),
            seen: remembered_answers(),
            estimate: preread::Estimate::default(),
        }
    }

    /// The clock and the payload hash (default: system clock, the whole event). Records of a
    /// ledger never expire, whatever the dedup window, and the disable switch does not reach
    /// them: a post keeps its once-only condition ([`crate::warn_if_disabled`]).
    pub fn with_config(mut self, config: Config) -> Self {
        self.idempotency = Idempotency::new(self.idempotency.store().clone(), config.clone());
        self.config = config;
        self
    }

    /// The same ledger, remembering no answers and no estimate of duplicates from elsewhere
    /// ([`Ledger::post_batch_as`]): as another sandbox would see it (for tests and benchmarks of the
    /// path without them).
    pub fn clone_forgetting(&self) -> Self {
        Ledger { seen: remembered_answers(), estimate: preread::Estimate::default(), ..self.clone() }
    }

    /// The ledger table's name.
    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// The idempotency store.
    pub fn store(&self) -> &DynamoDbStore {
        self.idempotency.store()
    }

    /// The client.
    pub fn client(&self) -> &Client {
        self.store().client()
    }

    /// Posts a payment once: `Fresh` when this call decided it, `Replayed` for a duplicate,
    /// which gets the first call's answer, rejection included. The event id already applied or
    /// rejected with another payload (another account, amount, currency or address) is
    /// [`effectively_once::ErrorKind::KeyReused`]: nothing is posted.
    pub async fn post(&self, event: &PaymentEvent) -> Result<Outcome<Posting>, Error> {
        let key = Key::new(PREFIX, &event.event_id)?;
        self.check_outbox(event)?;
        Ok(self.idempotency.commit_once(&key, event, |tx| self.transaction(tx, event)).await?)
    }

    /// A receipt nobody can ever send: refuse to apply the payment. A deployment fault, not a
    /// verdict on the payment: [`Retry::AfterFix`](effectively_once::Retry::AfterFix), so the
    /// message waits for the fix (and a FIFO group holds its order) instead of being given up on.
    fn check_outbox(&self, event: &PaymentEvent) -> Result<(), Error> {
        self.missing_outbox(event).map_or(Ok(()), |error| Err(Error::Store(error)))
    }

    /// [`Ledger::check_outbox`]'s failure, if any.
    fn missing_outbox(&self, event: &PaymentEvent) -> Option<StoreError> {
        (event.receipt_email.is_some() && self.outbox.is_none()).then(|| {
            StoreError::new(
                StoreErrorKind::Misconfigured,
                format!(
                    "payment {} asks for a receipt, but this ledger has no outbox table (set OUTBOX_TABLE); \
                     retried until it has one",
                    event.event_id
                ),
            )
        })
    }

    /// The writes of a payment's first delivery, beside its record `payments#{event_id}` (its
    /// own item, never expiring: not carried on the entry, which is keyed by the account, as the
    /// record must make the event id unique across accounts).
    fn transaction(&self, tx: &mut Tx<Posting>, event: &PaymentEvent) -> Result<Posting, effectively_once::Error> {
        let posting = self.own_writes(tx, event, &rfc3339(self.config.now_ms()), None)?;
        self.balance_update(tx, &[event])?;
        Ok(posting)
    }

    /// An event's own writes: its entry and its outbox row (its record is added beside them,
    /// never expiring). An answer from an entry without its record adds the event id to
    /// `unrecorded`, when given.
    fn own_writes(
        &self,
        tx: &mut Tx<Posting>,
        event: &PaymentEvent,
        posted_at: &str,
        unrecorded: Option<&Unrecorded>,
    ) -> Result<Posting, effectively_once::Error> {
        tx.never_expires();
        let entry = tx.put_item(&self.table, entry_item(event, posted_at))?;
        // The entry exists but the record does not: written before records were kept apart from
        // entries (it carries its record then), or the record was deleted by hand. The entry is
        // the effect, so it answers: the same amount and currency is a duplicate, anything else
        // reuses the key.
        let (amount, currency) = (event.amount_cents, event.currency.clone());
        let (unrecorded, event_id) = (unrecorded.cloned(), event.event_id.clone());
        tx.otherwise(entry, move |item| match item.map(record_carried_by) {
            Some(Ok(record)) => Otherwise::Recorded(record),
            _ => {
                if let Some(unrecorded) = unrecorded {
                    unrecorded.lock().unwrap_or_else(|p| p.into_inner()).insert(event_id);
                }
                Otherwise::AlreadyApplied {
                    response: Posting::Applied,
                    same_payload: item.is_some_and(|item| entry_matches(amount, &currency, item)),
                }
            }
        });
        if let (Some(outbox), Some(email)) = (&self.outbox, &event.receipt_email) {
            // Never overwritten (a put is conditional on its absence): a row's SENT state and
            // message id belong to the first event, and an overwrite would be a MODIFY, which
            // the relay's INSERT filter drops.
            tx.put_item(outbox, outbox::row_item(event, email, posted_at))?;
        }
        Ok(Posting::Applied)
    }

    /// One update of an account's balance for `events` (of that account, in batch order, one
    /// currency): their sum, their count, on a condition that holds if and only if posting them
    /// one by one in this order would apply every one. Sequentially, each debit needs the
    /// currency and the balance before it to cover it, that is the balance plus every prefix sum
    /// up to it non-negative; credits only raise prefix sums. So the condition is the currency,
    /// and `balance >= -min(0, smallest prefix sum)`; with no prefix below zero, a new account
    /// (no item) passes too, as a first credit does. A single event gets the rejection as its
    /// answer when the condition fails. A batch uses it only for an event alone (an event whose
    /// own write failed, say); its accounts' events are decided on their balance items
    /// ([`BatchWrites::decide`]: [`replay()`]), mixed currencies included.
    fn balance_update(&self, tx: &mut Tx<Posting>, events: &[&PaymentEvent]) -> Result<(), effectively_once::Error> {
        let Some(first) = events.first() else { return Ok(()) };
        if events.iter().any(|e| e.currency != first.currency || e.account_id != first.account_id) {
            // Another currency in the group: only one at a time says which event sets it.
            return Err(StoreError::new(StoreErrorKind::Other, "mixed currencies in one account's batch").into());
        }
        // Checked: events built past the contract's bounds may sum past i64; such a group goes
        // one event at a time (a batch sends a group whose writes do not build alone).
        let past_i64 = || StoreError::new(StoreErrorKind::Other, "amounts that sum past i64 in one balance update");
        let (mut sum, mut lowest) = (0i64, 0i64);
        for event in events {
            sum = sum.checked_add(event.amount_cents).ok_or_else(past_i64)?;
            lowest = lowest.min(sum);
        }
        let needed = lowest.checked_neg().ok_or_else(past_i64)?;
        // Credits need only the account's currency to match (or no account yet); debits also
        // need the balance to cover them, and a new account has none to cover anything.
        let condition = if needed == 0 {
            "attribute_not_exists(pk) OR #currency = :currency"
        } else {
            "#currency = :currency AND #balance >= :needed"
        };
        let string = |value: &str| AttributeValue::S(value.to_owned());
        let number = |value: i64| AttributeValue::N(value.to_string());
        let key = BalanceKey { pk: account_pk(&first.account_id), sk: "balance" };
        let balance = tx.update(&self.table, &key, |update| {
            let update = update
                .update_expression(
                    "SET #balance = if_not_exists(#balance, :zero) + :amount, #currency = if_not_exists(#currency, :currency) \
                     ADD #count :count",
                )
                .condition_expression(condition)
                .expression_attribute_names("#balance", "balance_cents")
                .expression_attribute_names("#currency", "currency")
                .expression_attribute_names("#count", "entry_count")
                .expression_attribute_values(":zero", number(0))
                .expression_attribute_values(":count", number(events.len() as i64))
                .expression_attribute_values(":amount", number(sum))
                .expression_attribute_values(":currency", string(&first.currency));
            if needed > 0 {
                update.expression_attribute_values(":needed", number(needed))
            } else {
                update
            }
        })?;
        if let [event] = events {
            // A business rule said no: recorded (never expiring), so a duplicate stays rejected
            // after funds arrive, unless a concurrent duplicate applied the payment meanwhile (a
            // credit arrived between the two): its record has the same key, and that answer stands.
            let rejected = (*event).clone();
            tx.otherwise(balance, move |item| {
                Otherwise::Answer(Posting::Rejected { reason: rejection(&rejected, item) })
            });
        }
        Ok(())
    }

    /// The balance update of an account's events replayed on its item ([`replay()`]): their
    /// applied sum and count on the replay's condition; with none applied, a check of the
    /// condition alone (an update would create an item for a new account).
    fn replayed_update(
        &self,
        tx: &mut Tx<Posting>,
        account_id: &str,
        replay: &Replay,
    ) -> Result<(), effectively_once::Error> {
        let key = BalanceKey { pk: account_pk(account_id), sk: "balance" };
        let (condition, names, values) = replay.condition.expression();
        let Some(currency) = &replay.currency else {
            tx.check(&self.table, &key, |check| {
                check
                    .condition_expression(condition)
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
            })?;
            return Ok(());
        };
        let number = |value: i64| AttributeValue::N(value.to_string());
        // The update's own names beside the condition's, each added once (the condition's
        // `#balance` and `#currency` are the update's too); its values after the condition's, so
        // `:currency` is the update's.
        let mut names = names.unwrap_or_default();
        for (name, attribute) in [("#balance", "balance_cents"), ("#currency", "currency"), ("#count", "entry_count")] {
            if !names.contains_key(name) {
                names.insert(name.to_owned(), attribute.to_owned());
            }
        }
        let mut values = values.unwrap_or_default();
        values.insert(":currency".to_owned(), AttributeValue::S(currency.clone()));
        values.insert(":zero".to_owned(), number(0));
        values.insert(":count".to_owned(), number(replay.applied));
        values.insert(":amount".to_owned(), number(replay.sum));
        tx.update(&self.table, &key, |update| {
            update
                .update_expression(
                    "SET #balance = if_not_exists(#balance, :zero) + :amount, #currency = if_not_exists(#currency, :currency) \
                     ADD #count :count",
                )
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
        })?;
        Ok(())
    }

    /// Posts the valid events of one invocation as [`Ledger::post`] posts each, committed one
    /// by one in this order, would: the result at each position is that event's. In as few
    /// transactions as DynamoDB's limits allow (one for ten events), with one balance update per
    /// account per transaction ([`CommitOnce::commit_batch`]): an event id twice in the batch is
    /// answered from the first, with no request. An account's events are decided first on its
    /// currency as the first of them assumes it, and, when its balance update's condition fails,
    /// on its balance item as the cancelled transaction returned it: replayed in batch order, the
    /// rejections (overdrafts, another currency, debits on a new account) recorded, never
    /// expiring, in the same transaction as the applied events, which is conditioned on the
    /// currency seen and on the balance lying in the interval on which posting one by one would
    /// decide every event the same (at least what the applied debits need), or, when a debit is
    /// refused for funds, on the balance seen exactly: that rejection records the balance it was
    /// decided on, and the batch's events take effect at its commit, after any other writer's
    /// post. The account's later transactions in the batch are decided on the balance the
    /// earlier left, conditioned likewise. So a refusal costs one more transaction per account,
    /// not one per event; another writer's posts that cross no threshold leave decisions without
    /// a refused debit standing, and any other post refuses them: the balance it left is seen
    /// and replayed on (an account whose balance keeps changing under its transactions goes one
    /// event per transaction after [`MAX_ROUNDS`](effectively_once_dynamodb::MAX_ROUNDS)
    /// changes).
    /// An event id this ledger saw answered (its last [`SEEN_CAPACITY`] ids, in this sandbox) is
    /// answered from memory, with no request: a ledger's records never expire or change, so the
    /// copy says what the record would (a replay, or key reuse for another payload); a duplicate
    /// answered from an entry without its record is not remembered, as no record stands behind
    /// it. An event that fails in a way a retry may undo holds back its account's later events
    /// (answered [`Retry::Now`](effectively_once::Retry::Now)), so SQS redelivers them after it, in order: the hold-back of
    /// `commit_batch`, which the ledger hands its own checks' failures
    /// ([`CommitOnce::commit_batch_with_answers`]).
    ///
    /// The trigger says nothing of redeliveries here ([`Delivery::Unknown`]); see
    /// [`Ledger::post_batch_as`].
    pub async fn post_batch(&self, events: &[PaymentEvent]) -> Vec<Result<Outcome<Posting>, Error>> {
        self.post_batch_as(events, Delivery::Unknown).await
    }

    /// [`Ledger::post_batch`], told what the trigger knows of redeliveries (`deliveries`: one
    /// [`Delivery`] for every event, or one per event in order): the records of the event ids
    /// this sandbox does not remember are read first (one `BatchGetItem`,
    /// [`Member::read_first`]): those of the events that may be redeliveries, or, while
    /// duplicates from elsewhere are frequent (at least [`BREAK_EVEN`] of recent batches), every
    /// one. A record found answers its duplicate as a remembered one does, with no write. The
    /// events of a batch whose commit was cut at the deadline are read first when they come
    /// again, whatever the trigger says (`commit_batch`).
    pub async fn post_batch_as(
        &self,
        events: &[PaymentEvent],
        deliveries: impl Into<Deliveries>,
    ) -> Vec<Result<Outcome<Posting>, Error>> {
        self.post_batch_in_lanes(events, &[], deliveries).await
    }

    /// [`Ledger::post_batch_as`], each event in a lane whose order it keeps across accounts
    /// (`lanes`: one per event, in order, or none at all): the topic-partition of a Kafka record,
    /// the message group of a FIFO message, the partition key of a Kinesis record. An event
    /// that fails in a way a retry may undo, or is held back, holds back the later events of
    /// its lane and of its event id (a failure found before the transaction, a receipt with no
    /// outbox table say, holds not its account in other lanes: the trigger orders nothing across
    /// lanes, and Lambda may run two lanes in two invocations at once; one inside a transaction,
    /// a throttle, holds its accounts in every lane for that delivery, which keeps a batch
    /// answering as posting one by one in batch order). Both are `commit_batch`'s hold-back
    /// ([`CommitOnce::commit_batch_with_answers`]), which also commits a lane's events in batch
    /// order whatever their accounts ([`Member::in_lane`]).
    /// So an ordered trigger's whole batch goes in one call (an `OrderedBatchHandler`), and a
    /// record never takes effect behind an earlier one of its partition that may still take
    /// effect: a debit of one account never overtakes a credit of another that the producer
    /// wrote before it in the partition.
    ///
    /// # Panics
    ///
    /// When `lanes` is neither empty nor one per event.
    pub async fn post_batch_in_lanes(
        &self,
        events: &[PaymentEvent],
        lanes: &[Option<&str>],
        deliveries: impl Into<Deliveries>,
    ) -> Vec<Result<Outcome<Posting>, Error>> {
        assert!(lanes.is_empty() || lanes.len() == events.len(), "one lane per event, or none");
        let mut results: Vec<Option<Result<Outcome<Posting>, Error>>> = events.iter().map(|_| None).collect();
        let admitted = self.admit(events, lanes, &deliveries.into(), &mut results);
        let batch = Postings {
            ledger: self,
            events,
            positions: &admitted.positions,
            posted_at: rfc3339(self.config.now_ms()),
            unrecorded: Unrecorded::default(),
        };
        let sent: Vec<bool> = admitted.answers.iter().map(Option::is_none).collect();
        let posted = self.idempotency.commit_batch_with_answers(&admitted.members, admitted.answers, &batch).await;
        self.observe_batch(&admitted.members, &sent, &posted);
        self.remember(&admitted.members, &posted, &batch.unrecorded);
        for (result, position) in posted.into_iter().zip(&admitted.positions) {
            // The ledger's own check's failure as it is, waiting for a fix, not the stand-in
            // `commit_batch` held the event's key and lane behind (a once-only record's store
            // error, to be retried now).
            let own = self.missing_outbox(&events[*position]).map(Error::Store);
            results[*position] = Some(own.map_or_else(|| result.map_err(Error::from), Err));
        }
        results.into_iter().map(|r| r.expect("every event answered")).collect()
    }

    /// The events of a batch as members of [`CommitOnce::commit_batch_with_answers`] (in their
    /// account's group and their lane, if `lanes` gives them one), with their positions, each
    /// answered already when it can be: from the answers this ledger remembers, or with the
    /// failure of its checks (a receipt with no outbox table, kept until fixed: the batch holds back
    /// the later events of its event id and lane, or with no lane of its account, behind it).
    /// The others are read first when `deliveries` and the estimate say so
    /// ([`Member::read_first`]). An event whose key is invalid is answered in `results` (a
    /// verdict on it: it holds nothing back).
    fn admit<'e>(
        &self,
        events: &'e [PaymentEvent],
        lanes: &[Option<&'e str>],
        deliveries: &Deliveries,
        results: &mut [Option<Result<Outcome<Posting>, Error>>],
    ) -> Admitted<'e> {
        let mut admitted = Admitted {
            members: Vec::with_capacity(events.len()),
            answers: Vec::with_capacity(events.len()),
            positions: Vec::with_capacity(events.len()),
        };
        let reads = self.reads();
        let now_ms = self.config.now_ms();
        for (position, event) in events.iter().enumerate() {
            let key = match Key::new(PREFIX, &event.event_id) {
                Ok(key) => key,
                Err(error) => {
                    results[position] = Some(Err(error.into()));
                    continue;
                }
            };
            let checked = match self.missing_outbox(event) {
                Some(error) => Err(error.into()),
                None if event.is_plain() => self.config.payload_hash_of_plain(event),
                None => self.config.payload_hash(event),
            };
            let mut member = Member::new(key, event).in_group(event.account_id.clone());
            if let Some(lane) = lanes.get(position).copied().flatten() {
                member = member.in_lane(lane);
            }
            let answer = match checked {
                Err(error) => Some(Err(error)),
                // An event id this sandbox saw answered: its record says the same, for free (a
                // replay, key reuse for another payload).
                Ok(hash) => {
                    let answer = self.seen.get(member.key.as_str(), now_ms).map(|record| record.replay(&hash));
                    if answer.is_none() && reads.reads(deliveries.of(position)) {
                        member = member.read_first();
                    }
                    member = member.with_hash(hash);
                    answer.map(|answer| answer.map(Outcome::Replayed))
                }
            };
            admitted.members.push(member);
            admitted.answers.push(answer);
            admitted.positions.push(position);
        }
        admitted
    }

    /// Remembers the answers `commit_batch` gave `members`, as copies of their records; not an
    /// answer from an entry without its record (`unrecorded`), which has none.
    fn remember(
        &self,
        members: &[Member<'_, PaymentEvent>],
        posted: &[Result<Outcome<Posting>, effectively_once::Error>],
        unrecorded: &Unrecorded,
    ) {
        let unrecorded = unrecorded.lock().unwrap_or_else(|p| p.into_inner());
        for (result, member) in posted.iter().zip(members) {
            if unrecorded.contains(&member.payload.event_id) {
                continue;
            }
            // Fresh: this payload's record was written; replayed: the record matched it.
            if let (Ok(outcome), Some(hash)) = (result, member.hash()) {
                let response = serde_json::to_string(outcome.response()).expect("postings serialise");
                let record = Record::completed(member.key.as_str(), hash.as_str(), Some(response), NEVER_EXPIRES);
                self.seen.remember(record);
            }
        }
    }

    /// Modelled write units of a payment's first delivery and of a duplicate.
    pub fn write_units(&self, event: &PaymentEvent) -> Result<WriteUnits, Error> {
        let key = Key::new(PREFIX, &event.event_id)?;
        self.check_outbox(event)?;
        Ok(self.idempotency.write_units(&key, |tx| self.transaction(tx, event))?)
    }

    /// Brings a ledger written by a build that carried each applied event's record on its entry
    /// up to the global layout, once, before the new consumer takes traffic: every entry that
    /// carries a record gets its own never-expiring record `payments#{event_id}` (unless one is
    /// there), and every recorded payment outcome with a finite expiration is made permanent.
    /// Without it, an event applied under the old layout could be posted again for another
    /// account, and a rejection recorded with the 14-day window could lapse. Idempotent: run it
    /// again and it writes nothing new. Scans both tables (read units: their sizes).
    pub async fn migrate(&self) -> Result<Migration, Error> {
        let mut report = Migration::default();
        self.record_carried_entries(&mut report).await?;
        self.make_outcomes_permanent(&mut report).await?;
        Ok(report)
    }

    /// The first half of [`Ledger::migrate`]: a never-expiring record for every entry that
    /// carries one, unless its event id has one.
    async fn record_carried_entries(&self, report: &mut Migration) -> Result<(), Error> {
        let now_ms = self.config.now_ms();
        let store = self.store();
        let carried = store
            .for_each_carried_record(self.table.name(), async |carried| -> Result<(), Error> {
                let record = Record { expiration_s: NEVER_EXPIRES, ..carried };
                match store.record_if_absent(&record, now_ms).await? {
                    None => report.records_written += 1,
                    // The id already has a record of another payload: the same event id was
                    // used twice (for another account) before the migration. Both stand; an
                    // operator decides.
                    Some(existing) if existing.payload_hash != record.payload_hash => {
                        // Hashes of two versions cannot be compared without the payload, which
                        // the entry does not hold in full: reported all the same, for an operator.
                        let versions = (HashVersion::of(&existing.payload_hash), HashVersion::of(&record.payload_hash));
                        tracing::warn!(
                            id = %record.id,
                            record_hash_version = ?versions.0,
                            entry_hash_version = ?versions.1,
                            "migrate: an entry and the record of its event id disagree"
                        );
                        report.conflicts += 1;
                    }
                    Some(_) => {}
                }
                Ok(())
            })
            .await?;
        report.carried_entries += carried;
        Ok(())
    }

    /// The second half of [`Ledger::migrate`]: every recorded payment outcome with a finite
    /// expiration made permanent.
    async fn make_outcomes_permanent(&self, report: &mut Migration) -> Result<(), Error> {
        report.records_made_permanent += self.store().make_completed_permanent(&format!("{PREFIX}#")).await?;
        Ok(())
    }

    /// An account's balance item, read strongly consistent.
    pub async fn balance(&self, account_id: &str) -> Result<Option<Balance>, Error> {
        let out = self
            .client()
            .get_item()
            .table_name(self.table.name())
            .key("pk", AttributeValue::S(account_pk(account_id)))
            .key("sk", AttributeValue::S("balance".into()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify_sdk_error("GetItem", e))?;
        let Some(item) = out.item() else { return Ok(None) };
        let num = |name: &str| match item.get(name) {
            Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
            _ => None,
        };
        let malformed = || Error::Store(StoreError::new(StoreErrorKind::Malformed, "balance item malformed"));
        Ok(Some(Balance {
            balance_cents: num("balance_cents").ok_or_else(malformed)?,
            entry_count: num("entry_count").ok_or_else(malformed)? as u64,
            currency: match item.get("currency") {
                Some(AttributeValue::S(c)) => c.clone(),
                _ => return Err(malformed()),
            },
        }))
    }

    /// An account's entries as `(event_id, amount_cents)`, in key order.
    pub async fn entries(&self, account_id: &str) -> Result<Vec<(String, i64)>, Error> {
        let mut pages = self
            .client()
            .query()
            .table_name(self.table.name())
            .key_condition_expression("pk = :pk AND begins_with(sk, :entry)")
            .expression_attribute_values(":pk", AttributeValue::S(account_pk(account_id)))
            .expression_attribute_values(":entry", AttributeValue::S("entry#".into()))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send();
        let mut entries = Vec::new();
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| classify_sdk_error("Query", e))?;
            let id = match item.get("event_id") {
                Some(AttributeValue::S(v)) => v.clone(),
                _ => continue,
            };
            let amount = match item.get("amount_cents") {
                Some(AttributeValue::N(v)) => v.parse().unwrap_or(0),
                _ => 0,
            };
            entries.push((id, amount));
        }
        Ok(entries)
    }
}

fn account_pk(account_id: &str) -> String {
    format!("account#{account_id}")
}

/// Whether an existing entry posted this amount in this currency.
fn entry_matches(amount_cents: i64, currency: &str, entry: &HashMap<String, AttributeValue>) -> bool {
    let amount = matches!(entry.get("amount_cents"), Some(AttributeValue::N(n)) if n.parse() == Ok(amount_cents));
    let currency = matches!(entry.get("currency"), Some(AttributeValue::S(c)) if c == currency);
    amount && currency
}

/// Which business rule rejected the payment, from the balance item as it stood.
fn rejection(event: &PaymentEvent, balance: Option<&HashMap<String, AttributeValue>>) -> Rejection {
    let Some(item) = balance else {
        return Rejection::InsufficientFunds { balance_cents: 0 };
    };
    match item.get("currency") {
        Some(AttributeValue::S(c)) if *c != event.currency => {
            Rejection::CurrencyMismatch { account_currency: c.clone() }
        }
        _ => Rejection::InsufficientFunds {
            balance_cents: match item.get("balance_cents") {
                Some(AttributeValue::N(v)) => v.parse().unwrap_or(0),
                _ => 0,
            },
        },
    }
}

#[cfg(test)]
mod entry_item_tests {
    use super::*;

    /// An entry holds the contract's attributes and nothing else: `pk`, `sk`, `currency`,
    /// `event_id`, `posted_at` as strings and `amount_cents` as a number, for amounts at and past
    /// the contract's bounds and ids of every allowed character.
    #[test]
    fn an_entry_is_the_contracts_item() {
        let ids = ["pay_0001", "a", "A.b_c:d#e-f", "entry#balance", &"9".repeat(200)];
        let amounts = [1, -1, 1250, -1250, 1_000_000_000_000, -1_000_000_000_000, i64::MAX, i64::MIN];
        for (event_id, amount_cents) in ids.iter().flat_map(|id| amounts.iter().map(move |a| (*id, *a))) {
            let event = PaymentEvent {
                event_id: event_id.to_owned(),
                account_id: format!("acct#{event_id}"),
                amount_cents,
                currency: "EUR".to_owned(),
                receipt_email: Some("r@example.com".to_owned()),
            };
            let posted_at = "2026-12-02T14:10:32.123Z";
            let s = |v: String| AttributeValue::S(v);
            let expected = HashMap::from([
                ("pk".to_owned(), s(format!("account#acct#{event_id}"))),
                ("sk".to_owned(), s(format!("entry#{event_id}"))),
                ("amount_cents".to_owned(), AttributeValue::N(amount_cents.to_string())),
                ("currency".to_owned(), s("EUR".to_owned())),
                ("event_id".to_owned(), s(event_id.to_owned())),
                ("posted_at".to_owned(), s(posted_at.to_owned())),
            ]);
            let entry = entry_item(&event, posted_at);
            assert_eq!(entry, expected, "{event_id} {amount_cents}");
            assert!(entry_matches(amount_cents, "EUR", &entry), "an entry answers its own duplicate");
        }
    }
}
