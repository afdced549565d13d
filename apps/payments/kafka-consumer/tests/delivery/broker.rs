//! The failure modes Kafka is known for, on a real Kafka-protocol broker (`make local-kafka-up`)
//! through the Kafka event source emulator (`local::esm::kafka`), each ending with every
//! payment posted once and nothing lost: a batch whose offsets were never committed, two
//! pollers of one group holding a partition at once across a rebalance, a producer retry at a
//! new offset, and a record that fails until a fix, discarded to the on-failure destination and
//! replayed from it, and a payment held back behind a retryable failure. Each runs under both
//! readings of the answer's named records (`local::each_reading!`: `name::resume`,
//! `name::per_record`), the mapping resuming each named partition at the lowest named offset
//! or retrying exactly the named records. The ledger is read back: entries and balances.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{balance, entries, payment, Tables};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::events::{Context, KafkaEvent, KafkaRecord};
use effectively_once_lambda::kafka::KafkaEventResponse;
use effectively_once_lambda::{BatchHandler, Handler, RecordError, RecordResult};
use kafka_consumer::Payments;
use local::esm::kafka::{self, KafkaMapping, KafkaPoll, KafkaPoller, Outgoing, Producer, Reading};
use local::invoke::{Batched, KafkaFunction};
use local::proxy::{Fault, Proxy, RandomFaults};
use local::resources::Clients;

/// A topic, its mapping (group and failure queue) and a producer, the test's own.
struct Topic {
    clients: Clients,
    mapping: KafkaMapping,
    producer: Producer,
}

impl Topic {
    /// A topic of `partitions` partitions, its mapping reading answers as `reading`.
    async fn new(partitions: i32, reading: Reading) -> Topic {
        let bootstrap = kafka::bootstrap().expect("the local Kafka broker");
        let clients = Clients::local().await;
        let topic = unique_name("payments");
        kafka::create_topic(&bootstrap, &topic, partitions).await.expect("create topic");
        let queue = clients.sqs.create_queue().queue_name(unique_name("kafka-fail")).send().await.expect("queue");
        let mut mapping =
            KafkaMapping::new(&bootstrap, &topic, &unique_name("group"), queue.queue_url().map(str::to_owned));
        mapping.settings.batch_size = 10;
        mapping.settings.max_retries = 2;
        mapping.reading = reading;
        let producer = Producer::new(&bootstrap).expect("producer");
        Topic { clients, mapping, producer }
    }

    /// Writes `value` under the record key `key` (its hash picks the partition, unless
    /// `partition` says); returns where it landed.
    async fn send(&self, key: &str, value: &str, partition: Option<i32>) -> (i32, i64) {
        let record = Outgoing { key, value: value.as_bytes(), partition, ..Outgoing::default() };
        self.producer.send(&self.mapping.topic, record).await.expect("produce")
    }

    fn poller(&self, name: &str) -> KafkaPoller {
        KafkaPoller::join(&self.mapping, name).expect("join the group")
    }

    /// Polls with each of `pollers` in turn until the group has committed everything written
    /// (or two minutes pass).
    async fn drain<F: KafkaFunction>(&self, pollers: &mut [KafkaPoller], function: &F) -> KafkaPoll {
        kafka::drain(&self.clients, pollers, function, Duration::from_secs(120)).await.expect("drain")
    }
}

/// Every payment of `expected` (event id → amount) is in `account`'s entries exactly once, and
/// the balance is their sum over that many entries.
async fn assert_posted_once(payments: &Payments, account: &str, expected: &[(&str, i64)]) {
    let mut want: Vec<(String, i64)> = expected.iter().map(|(id, amount)| (id.to_string(), *amount)).collect();
    want.sort();
    let mut got = entries(payments, account).await;
    got.sort();
    assert_eq!(got, want, "{account}: each payment's entry once");
    let sum = expected.iter().map(|(_, amount)| amount).sum::<i64>();
    assert_eq!(balance(payments, account).await, Some((sum, expected.len() as u64)), "{account}: balance");
}

/// The consumer as deployed (the batch path), counting the records it is handed.
fn consumer(tables: &Tables) -> Batched<Payments> {
    Batched::new(tables.payments(), kafka_consumer::FUNCTION)
}

local::each_reading!(a_batch_whose_offsets_were_never_committed_is_delivered_again_and_posts_once);
async fn a_batch_whose_offsets_were_never_committed_is_delivered_again_and_posts_once(reading: Reading) {
    let tables = Tables::fresh().await;
    let topic = Topic::new(2, reading).await;
    let ids: Vec<String> = (0..6).map(|i| unique_name(&format!("pay{i}"))).collect();
    for (i, id) in ids.iter().enumerate() {
        topic.send(id, &payment(id, "acct-crash", 100 + i as i64), Some(i as i32 % 2)).await;
    }
    let function = consumer(&tables);
    // The first poller posts its batch and dies before committing an offset.
    let crashed = topic.poller("crashes").poll_then_crash(&function).await.expect("first batch");
    assert!(crashed > 0);
    assert_eq!(function.counts().applied, crashed as u64);
    // The next member of the group starts from the last commit: the same records again.
    let again = topic.drain(&mut [topic.poller("next")], &function).await;
    assert_eq!(again.delivered, 6, "every record delivered to the next poller");
    let counts = function.counts();
    assert_eq!((counts.applied, counts.duplicate), (6, crashed as u64), "{counts:?}");
    let expected: Vec<(&str, i64)> = ids.iter().enumerate().map(|(i, id)| (id.as_str(), 100 + i as i64)).collect();
    assert_posted_once(function.handler(), "acct-crash", &expected).await;
}

/// A poller's function that, on its first invocation, waits until the other poller's first
/// invocation has come too, then both go into the handler at once: the two members of the group
/// hold the same records at the same time.
struct Together<'a> {
    inner: &'a Batched<Payments>,
    barrier: Arc<tokio::sync::Barrier>,
    first: std::sync::atomic::AtomicBool,
    /// Told when this poller's first invocation starts.
    started: tokio::sync::Notify,
    /// Records this poller was handed.
    records: AtomicUsize,
    /// The records (`topic-partition@offset`) of its first invocation.
    first_batch: std::sync::Mutex<Vec<String>>,
}

impl<'a> Together<'a> {
    fn pair(inner: &'a Batched<Payments>) -> (Together<'a>, Together<'a>) {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let one = |barrier| Together {
            inner,
            barrier,
            first: true.into(),
            started: tokio::sync::Notify::new(),
            records: AtomicUsize::new(0),
            first_batch: std::sync::Mutex::default(),
        };
        (one(Arc::clone(&barrier)), one(barrier))
    }
}

impl KafkaFunction for Together<'_> {
    async fn invoke(&self, event: KafkaEvent) -> local::Result<KafkaEventResponse> {
        self.records.fetch_add(event.records.values().map(Vec::len).sum(), Ordering::SeqCst);
        if self.first.swap(false, Ordering::SeqCst) {
            let ids = event
                .records
                .iter()
                .flat_map(|(tp, records)| records.iter().map(move |r| format!("{tp}@{}", r.offset)));
            *self.first_batch.lock().unwrap() = ids.collect();
            self.started.notify_one();
            let waited = tokio::time::timeout(Duration::from_secs(60), self.barrier.wait()).await;
            waited.map_err(|_| "the other poller never got the partition")?;
        }
        self.inner.invoke(event).await
    }
}

local::each_reading!(two_pollers_overlapping_across_a_rebalance_post_each_payment_once);
async fn two_pollers_overlapping_across_a_rebalance_post_each_payment_once(reading: Reading) {
    let tables = Tables::fresh().await;
    let topic = Topic::new(2, reading).await;
    let ids: Vec<String> = (0..8).map(|i| unique_name(&format!("pay{i}"))).collect();
    for (i, id) in ids.iter().enumerate() {
        topic.send(id, &payment(id, "acct-rebalance", 10 + i as i64), Some(i as i32 % 2)).await;
    }
    let function = consumer(&tables);
    let (a, b) = Together::pair(&function);
    let mut first = topic.poller("a");
    // "a", alone in the group, takes a batch and stalls in its invocation. "b" joins; "a" does
    // not poll within the group's poll interval, so the group gives every partition to "b",
    // which reads from the last commit (none) and delivers the same records while "a" still
    // holds them; then both run the handler at once.
    let (stalled, (took_over, second)) = tokio::join!(first.poll(&topic.clients, &a), async {
        a.started.notified().await;
        let mut second = topic.poller("b");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let poll = second.poll(&topic.clients, &b).await.expect("poll b");
            if poll.delivered > 0 || tokio::time::Instant::now() > deadline {
                return (poll, second);
            }
        }
    });
    let stalled = stalled.expect("poll a");
    assert!(stalled.delivered > 0 && took_over.delivered > 0, "both pollers delivered: {stalled:?} {took_over:?}");
    // Then the group settles and everything is committed.
    let rest = topic.drain(&mut [first, second], &function).await;
    let (held_a, held_b) = (a.first_batch.lock().unwrap().clone(), b.first_batch.lock().unwrap().clone());
    let both: Vec<&String> = held_a.iter().filter(|id| held_b.contains(id)).collect();
    let handed = a.records.load(Ordering::SeqCst) + b.records.load(Ordering::SeqCst) + rest.delivered;
    let counts = function.counts();
    eprintln!(
        "rebalance overlap: {} records written, {handed} handed to the pollers ({} to the stalled one, {} to the \
         new owner during the overlap, {} of them in both at once); applied {}, duplicates {}, in progress {}; \
         commits refused {}",
        ids.len(),
        stalled.delivered,
        took_over.delivered,
        both.len(),
        counts.applied,
        counts.duplicate,
        counts.in_progress,
        stalled.commits_refused + took_over.commits_refused + rest.commits_refused,
    );
    assert!(!both.is_empty(), "the two pollers held the same records at once: {held_a:?} / {held_b:?}");
    assert!(handed > ids.len(), "records processed twice: {handed} handed for {} written", ids.len());
    assert_eq!(counts.applied, ids.len() as u64, "{counts:?}");
    let expected: Vec<(&str, i64)> = ids.iter().enumerate().map(|(i, id)| (id.as_str(), 10 + i as i64)).collect();
    assert_posted_once(function.handler(), "acct-rebalance", &expected).await;
}

local::each_reading!(a_producer_retry_at_a_new_offset_posts_once);
async fn a_producer_retry_at_a_new_offset_posts_once(reading: Reading) {
    let tables = Tables::fresh().await;
    let topic = Topic::new(2, reading).await;
    let (id, other) = (unique_name("pay"), unique_name("pay"));
    let value = payment(&id, "acct-retry", 250);
    // The producer lost the first send's answer and sent again: a new offset, and once under
    // another record key (another partition).
    let first = topic.send(&id, &value, Some(0)).await;
    let retried = topic.send(&id, &value, Some(0)).await;
    let elsewhere = topic.send("another-key", &value, Some(1)).await;
    topic.send(&other, &payment(&other, "acct-retry", 5), Some(1)).await;
    assert!(first.1 < retried.1 && elsewhere.0 != first.0);
    let function = consumer(&tables);
    let drained = topic.drain(&mut [topic.poller("p")], &function).await;
    assert_eq!(drained.delivered, 4);
    let counts = function.counts();
    assert_eq!((counts.applied, counts.duplicate), (2, 2), "{counts:?}");
    assert_posted_once(function.handler(), "acct-retry", &[(&id, 250), (&other, 5)]).await;
}

/// The consumer with a bug: every record whose payment's event id holds `bug` panics, until
/// the fix (a new deployment: the plain consumer).
struct Buggy {
    inner: Payments,
    bug: String,
}

impl Buggy {
    fn check(&self, record: &KafkaRecord) {
        let value = effectively_once_lambda::kafka::value_bytes(record).unwrap_or_default();
        if String::from_utf8_lossy(&value).contains(&self.bug) {
            panic!("a bug in the handler: this payment crashes it");
        }
    }
}

impl Handler<KafkaRecord> for Buggy {
    async fn handle(&self, record: &KafkaRecord, context: &Context) -> RecordResult {
        self.check(record);
        Handler::handle(&self.inner, record, context).await
    }

    fn key(&self, record: &KafkaRecord) -> Option<String> {
        Handler::key(&self.inner, record)
    }
}

impl BatchHandler<KafkaRecord> for Buggy {
    async fn handle_batch(&self, records: &[&KafkaRecord], context: &Context) -> Vec<RecordResult> {
        records.iter().for_each(|r| self.check(r));
        self.inner.handle_batch(records, context).await
    }
}

local::each_reading!(poison_goes_to_the_failure_destination_and_replays_once_fixed);
async fn poison_goes_to_the_failure_destination_and_replays_once_fixed(reading: Reading) {
    let tables = Tables::fresh().await;
    let topic = Topic::new(2, reading).await;
    let poison = unique_name("poison");
    let before = unique_name("pay");
    let after = unique_name("pay");
    let elsewhere = unique_name("pay");
    topic.send(&before, &payment(&before, "acct-poison", 1), Some(0)).await;
    topic.send(&poison, &payment(&poison, "acct-poison", 20), Some(0)).await;
    topic.send(&after, &payment(&after, "acct-poison", 300), Some(0)).await;
    topic.send(&elsewhere, &payment(&elsewhere, "acct-poison", 4000), Some(1)).await;
    let buggy = Batched::new(Buggy { inner: tables.payments(), bug: poison.clone() }, kafka_consumer::FUNCTION);
    let drained = topic.drain(&mut [topic.poller("p")], &buggy).await;
    // The poison record and the one after it in its partition were named three times (the
    // first invocation and two retries), then both went to the destination: resumed at the
    // poison, or retried record by record.
    assert_eq!(drained.given_up, 2, "{drained:?}");
    assert_posted_once(&buggy.handler().inner, "acct-poison", &[(&before, 1), (&elsewhere, 4000)]).await;

    // The fix is deployed; the destination is replayed: the poison and the record behind it
    // post once, and the invocation record leaves the destination.
    let fixed = consumer(&tables);
    let replayed = kafka::replay_kafka_failures(&topic.clients, &topic.mapping, &fixed).await.expect("replay");
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (1, 2, 0));
    let again = kafka::replay_kafka_failures(&topic.clients, &topic.mapping, &fixed).await.expect("replay again");
    assert_eq!((again.batches, again.records), (0, 0), "the destination is empty");
    let expected = [(before.as_str(), 1), (poison.as_str(), 20), (after.as_str(), 300), (elsewhere.as_str(), 4000)];
    assert_posted_once(fixed.handler(), "acct-poison", &expected).await;
}

local::each_reading!(a_payment_the_store_refuses_for_good_is_kept_in_the_kafka_failure_queue);
async fn a_payment_the_store_refuses_for_good_is_kept_in_the_kafka_failure_queue(reading: Reading) {
    let tables = Tables::fresh().await;
    // A bad deploy: DynamoDB refuses every write with a ValidationException (as for a ledger
    // table made from another template), an answer no retry changes. It is no verdict on the
    // payment, so the payment must not be committed past and lost: its partition waits, then
    // it goes to the failure destination.
    let rules = RandomFaults::new(7).on("dynamodb:TransactWriteItems", &[(Fault::Refuse, 1000)]);
    let proxy = Proxy::to_local_aws(Arc::new(rules)).await.expect("fault proxy");
    let sdk = proxy.sdk_config(aws_config::retry::RetryConfig::disabled()).await;
    let refused = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), tables.store.table());
    let misdeployed = Tables { store: refused, ..tables.clone() };
    let topic = Topic::new(2, reading).await;
    let (first, second, elsewhere) = (unique_name("pay"), unique_name("pay"), unique_name("pay"));
    topic.send(&first, &payment(&first, "acct-misdeploy", 70), Some(0)).await;
    topic.send(&second, &payment(&second, "acct-misdeploy", 8), Some(0)).await;
    topic.send(&elsewhere, &payment(&elsewhere, "acct-misdeploy", 900), Some(1)).await;
    let broken = consumer(&misdeployed);
    let drained = topic.drain(&mut [topic.poller("p")], &broken).await;
    assert!(proxy.injected().values().sum::<u64>() > 0, "the store refused: {:?}", proxy.injected());
    assert_eq!(broken.counts().applied, 0, "{:?}", broken.counts());
    assert_eq!(drained.given_up, 3, "every payment kept in the failure destination: {drained:?}");

    // The fix is deployed; replaying the destination posts each payment once.
    let fixed = consumer(&tables);
    let replayed = kafka::replay_kafka_failures(&topic.clients, &topic.mapping, &fixed).await.expect("replay");
    assert_eq!((replayed.records, replayed.kept), (3, 0), "{replayed:?}");
    assert_posted_once(fixed.handler(), "acct-misdeploy", &[(&first, 70), (&second, 8), (&elsewhere, 900)]).await;
}

/// The consumer, with one payment failing retryably the first time it is handed over (a
/// throttled write, say), on both paths.
struct FailsOnce {
    inner: Payments,
    payment: String,
    failed: std::sync::atomic::AtomicBool,
}

impl FailsOnce {
    fn fails(&self, record: &KafkaRecord) -> bool {
        let value = effectively_once_lambda::kafka::value_bytes(record).unwrap_or_default();
        let id = format!("\"{}\"", self.payment);
        String::from_utf8_lossy(&value).contains(&id) && !self.failed.swap(true, Ordering::SeqCst)
    }
}

impl Handler<KafkaRecord> for FailsOnce {
    async fn handle(&self, record: &KafkaRecord, context: &Context) -> RecordResult {
        if self.fails(record) {
            return Err(RecordError::retryable("throttled"));
        }
        Handler::handle(&self.inner, record, context).await
    }

    fn key(&self, record: &KafkaRecord) -> Option<String> {
        Handler::key(&self.inner, record)
    }
}

impl BatchHandler<KafkaRecord> for FailsOnce {
    async fn handle_batch(&self, records: &[&KafkaRecord], context: &Context) -> Vec<RecordResult> {
        let failing = records.iter().position(|r| self.fails(r));
        let rest: Vec<&KafkaRecord> =
            records.iter().enumerate().filter(|(i, _)| Some(*i) != failing).map(|(_, r)| *r).collect();
        let mut results = self.inner.handle_batch(&rest, context).await;
        if let Some(at) = failing {
            results.insert(at, Err(RecordError::retryable("throttled")));
        }
        results
    }
}

local::each_reading!(a_payment_held_back_behind_a_retryable_failure_posts_once_under_either_reading);
/// A payment fails retryably once; the payment behind it in its partition is held back, not
/// started. The answer names both, so whichever way Lambda reads it both come again and post
/// once, and nothing goes to the destination. An answer naming only the failure loses the
/// held-back payment when Lambda retries only the named records: committed, never posted, in no
/// destination.
async fn a_payment_held_back_behind_a_retryable_failure_posts_once_under_either_reading(reading: Reading) {
    let tables = Tables::fresh().await;
    let topic = Topic::new(1, reading).await;
    let (first, behind) = (unique_name("pay"), unique_name("pay"));
    topic.send(&first, &payment(&first, "acct-held", 100), Some(0)).await;
    topic.send(&behind, &payment(&behind, "acct-held", 20), Some(0)).await;
    let handler = FailsOnce { inner: tables.payments(), payment: first.clone(), failed: false.into() };
    let function = Batched::new(handler, kafka_consumer::FUNCTION);
    let drained = topic.drain(&mut [topic.poller("p")], &function).await;
    assert!(function.handler().failed.load(Ordering::SeqCst), "the first payment failed once");
    assert_eq!(drained.given_up, 0, "nothing in the destination: {drained:?}");
    assert_posted_once(&function.handler().inner, "acct-held", &[(&first, 100), (&behind, 20)]).await;
}
