//! The chaos scenario's Kafka path: payments produced to a fresh three-partition topic on the
//! local broker (producer retries at new offsets, some in another partition; poison values;
//! payments whose handler panics until the fix), and the Kafka payments consumer
//! (`apps/payments/kafka-consumer`, its poison parked in the Kafka park queue) run in process through the Kafka event source emulator, its
//! DynamoDB calls through the fault proxy, by pollers of one consumer group that crash after
//! their invocation and before the commit, and one that stalls past the poll interval while
//! another takes its partitions over. Drained until the group's committed offsets reach every
//! partition's end, the on-failure destination replayed with the fixed consumer; what came of
//! it is read back by [`crate::invariants::kafka`].

pub mod plan;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lambda_events::event::kafka::KafkaEvent;
use effectively_once::Outcome;
use effectively_once_lambda::kafka::KafkaEventResponse;
use effectively_once_lambda::metrics::Counts;
use kafka_consumer::Payments;
use payments::Posting;

use super::{Crashes, Options};
use crate::panicking::Panicking;
use crate::pipeline::Pipeline;
use crate::resources::Clients;
use local::error::{Result, ResultExt};
use local::esm::kafka::{self, KafkaMapping, KafkaPoll, KafkaPoller, Outgoing, Producer};
use local::esm::Replayed;
use local::invoke::{KafkaFunction, Ordered};
pub use plan::{Attempt, KafkaPlan, PaymentKind};

/// Partitions of the run's topic.
pub const PARTITIONS: i32 = 3;

/// Records written per round of polls: a little faster than two pollers drain at first.
const PER_ROUND: usize = 15;

/// What crashed a poller, in the faults table.
const CRASH: &str = "kafka: poller dies after its invocation, before the commit";

/// The consumer as deployed (the ordered path), with the workload's panics: the bug.
type Function = Ordered<Panicking<Payments>>;

/// What the Kafka path did.
#[derive(Debug, Clone)]
pub struct KafkaRun {
    /// What was written.
    pub plan: KafkaPlan,
    /// The topic, the group and the on-failure destination.
    pub mapping: KafkaMapping,
    /// Per partition, the offset after the last record written.
    pub ends: BTreeMap<i32, i64>,
    /// The group's committed offset of each partition, after the run.
    pub committed: Vec<Option<i64>>,
    /// The pollers' polls, summed (crashed ones aside).
    pub polls: KafkaPoll,
    /// Pollers that died after their invocation, and the records those invocations had.
    pub crashes: (usize, usize),
    /// Invocations stalled past the poll interval.
    pub stalls: usize,
    /// Stalls during which another poller was handed records the stalled one held, and how
    /// many records were held by both at once.
    pub overlaps: (usize, usize),
    /// What the replays of the destination did, summed (`kept`: after the last).
    pub replayed: Replayed,
    /// The records' results, the buggy consumer's and the fixed one's summed.
    pub counts: Counts,
    /// Wall time by phase.
    pub phases: Vec<(&'static str, Duration)>,
}

impl KafkaRun {
    /// Records handed to a function: polls, crashed invocations, the replay.
    pub fn handed(&self) -> usize {
        self.polls.delivered + self.crashes.1 + self.replayed.records
    }
}

/// The run's on-failure destination (an SQS queue of its own).
pub(super) fn failure_queue(run: &str) -> String {
    format!("chaos-{run}-kafka-failures")
}

/// The Kafka path of a chaos run: a topic, a group and a failure queue of its own, the ledger
/// and idempotency tables of `pipeline`, DynamoDB through the fault proxy (`sdk`).
pub(super) async fn run(
    pipeline: &Pipeline,
    sdk: &aws_config::SdkConfig,
    crashes: &Arc<Crashes>,
    options: &Options,
    run_id: &str,
) -> Result<KafkaRun> {
    let bootstrap = kafka::bootstrap().context("the chaos scenario's Kafka path (`--kafka 0` leaves it out)")?;
    let plan = plan::plan(options.kafka(), options.poison, options.seed, run_id);
    let topic = format!("chaos-{run_id}-payments");
    kafka::create_topic(&bootstrap, &topic, PARTITIONS).await?;
    let queue = pipeline.clients.sqs.create_queue().queue_name(failure_queue(run_id)).send().await;
    let queue = queue.context("create the Kafka on-failure destination")?;
    let group = format!("chaos-{run_id}-group");
    let settings = crate::resources::mapping(crate::resources::KAFKA_CLUSTER);
    let failures = queue.queue_url().map(str::to_owned);
    let mut mapping = KafkaMapping::new(&bootstrap, &topic, &group, None).with_settings(&settings, failures);
    // Batches of ten, not the template's hundred: a run of a hundred records has many
    // invocations to crash, stall and retry.
    mapping.settings.batch_size = 10;
    mapping.reading = options.kafka_reading;
    open_accounts(pipeline, &plan).await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    // Poison parked in the Kafka park queue, through the fault proxy too.
    let (sqs, park) = (aws_sdk_sqs::Client::new(sdk), &pipeline.resources.kafka_park_url);
    let function = Ordered::new(Panicking::new(Payments::new(pipeline.ledger(&dynamodb))), kafka_consumer::FUNCTION)
        .park_in(&sqs, park);
    let mut run = KafkaRun {
        plan,
        mapping: mapping.clone(),
        ends: BTreeMap::new(),
        committed: Vec::new(),
        polls: KafkaPoll::default(),
        crashes: (0, 0),
        stalls: 0,
        overlaps: (0, 0),
        replayed: Replayed::default(),
        counts: Counts::default(),
        phases: Vec::new(),
    };
    let started = Instant::now();
    let mut pollers = Pollers::join(&pipeline.clients, mapping, &function, crashes, options)?;
    pollers.drive(&Producer::new(&bootstrap)?, &mut run).await?;
    drop(pollers);
    run.phases.push(("kafka: producer, pollers, crashes, a rebalance overlap, until committed", started.elapsed()));
    let started = Instant::now();
    // The fix is deployed: the plain consumer replays the destination.
    let fixed = Ordered::new(Payments::new(pipeline.ledger(&dynamodb)), kafka_consumer::FUNCTION).park_in(&sqs, park);
    replay(&pipeline.clients, &fixed, &mut run).await?;
    run.committed = kafka::committed(&run.mapping, PARTITIONS)?;
    run.counts = sum(function.counts(), fixed.counts());
    run.phases.push(("kafka: on-failure destination replayed with the fix", started.elapsed()));
    Ok(run)
}

/// Each account's opening credit, posted straight to the ledger (no faults) before anything is
/// written: the account's currency and the funds its debits need are set whatever order the
/// pollers apply records in.
async fn open_accounts(pipeline: &Pipeline, plan: &KafkaPlan) -> Result<()> {
    let ledger = pipeline.ledger(&pipeline.clients.dynamodb);
    for opening in &plan.openings {
        match ledger.post(opening).await {
            Ok(Outcome::Fresh(Posting::Applied)) => {}
            other => return Err(format!("opening credit {}: {other:?}", opening.event_id).into()),
        }
    }
    Ok(())
}

fn sum(a: Counts, b: Counts) -> Counts {
    a + b
}

/// Replays the destination until a pass keeps nothing (four passes at most).
async fn replay<F: KafkaFunction>(clients: &Clients, fixed: &F, run: &mut KafkaRun) -> Result<()> {
    for _ in 0..4 {
        let r = kafka::replay_kafka_failures(clients, &run.mapping, fixed).await?;
        run.replayed.batches += r.batches;
        run.replayed.records += r.records;
        run.replayed.kept = r.kept;
        if r.kept == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// The members of the mapping's group, and what makes them fail.
struct Pollers<'a> {
    clients: &'a Clients,
    mapping: KafkaMapping,
    function: &'a Function,
    crashes: &'a Crashes,
    per_mille: u64,
    /// `None` only while its poller dies.
    slots: Vec<Option<KafkaPoller>>,
    joined: usize,
}

impl<'a> Pollers<'a> {
    /// `options.pollers` members (one at least), joined.
    fn join(
        clients: &'a Clients,
        mapping: KafkaMapping,
        function: &'a Function,
        crashes: &'a Crashes,
        options: &Options,
    ) -> Result<Self> {
        let per_mille = options.crash_per_mille;
        let mut pollers = Pollers { clients, mapping, function, crashes, per_mille, slots: Vec::new(), joined: 0 };
        for _ in 0..options.pollers.max(1) {
            let poller = pollers.member()?;
            pollers.slots.push(Some(poller));
        }
        Ok(pollers)
    }

    /// A new member of the group.
    fn member(&mut self) -> Result<KafkaPoller> {
        self.joined += 1;
        KafkaPoller::join(&self.mapping, &format!("poller-{}", self.joined))
    }

    /// Writes the plan a round at a time between rounds of polls, stalls one poller once half
    /// is written, and polls until the group has committed every partition to its end.
    async fn drive(&mut self, producer: &Producer, run: &mut KafkaRun) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut landed: HashMap<Vec<u8>, i32> = HashMap::new();
        let (mut next, mut round) = (0, 0);
        loop {
            let total = run.plan.writes.len();
            if next < total {
                let end = (next + PER_ROUND).min(total);
                for write in &run.plan.writes[next..end] {
                    let (partition, offset) = produce(producer, &self.mapping.topic, write, &mut landed).await?;
                    let at = run.ends.entry(partition).or_default();
                    *at = (*at).max(offset + 1);
                }
                next = end;
            } else if self.drained(&run.ends)? {
                return Ok(());
            }
            // One stall, a second only if the first met no takeover: each costs the poll
            // interval.
            if next >= total / 2 && run.overlaps.0 == 0 && run.stalls < 2 && self.slots.len() >= 2 {
                self.overlap(run).await?;
            }
            self.round(run, round).await?;
            round += 1;
            if Instant::now() > deadline {
                let waiting = self.mapping.waiting();
                return Err(
                    format!("the Kafka path is not drained after 180 s: {:?}, {waiting} waiting", run.polls).into()
                );
            }
        }
    }

    /// Whether the group's committed offsets reached every partition's end, and no record
    /// waits to be delivered again.
    fn drained(&self, ends: &BTreeMap<i32, i64>) -> Result<bool> {
        let committed = kafka::committed(&self.mapping, PARTITIONS)?;
        let all = ends.iter().all(|(&p, &end)| committed.get(p as usize).copied().flatten().is_some_and(|c| c >= end));
        Ok(all && self.mapping.waiting() == 0)
    }

    /// One poll of every member at once. A member that rolls a crash fetches, invokes and dies
    /// before it commits; a new member joins in its place. The first member crashes from the
    /// second round until a crash has taken records down with it (three tries), so a small run
    /// has one.
    async fn round(&mut self, run: &mut KafkaRun, round: usize) -> Result<()> {
        let force = run.crashes.1 == 0 && run.crashes.0 < 3 && round >= 1 && self.per_mille > 0;
        let crash: Vec<bool> =
            (0..self.slots.len()).map(|i| self.crashes.roll(self.per_mille) || (force && i == 0)).collect();
        let (clients, function) = (self.clients, self.function);
        let polls = futures_util::future::join_all(self.slots.iter_mut().zip(crash).map(|(slot, crash)| async move {
            let Some(poller) = slot.take() else { return Ok((KafkaPoll::default(), None)) };
            if crash {
                return poller.poll_then_crash(function).await.map(|records| (KafkaPoll::default(), Some(records)));
            }
            let mut poller = poller;
            let poll = poller.poll(clients, function).await;
            *slot = Some(poller);
            poll.map(|poll| (poll, None))
        }))
        .await;
        for poll in polls {
            let (poll, crashed) = poll?;
            run.polls += poll;
            if let Some(records) = crashed {
                self.crashes.hit(CRASH);
                run.crashes.0 += 1;
                run.crashes.1 += records;
            }
        }
        for i in 0..self.slots.len() {
            if self.slots[i].is_none() {
                self.slots[i] = Some(self.member()?);
            }
        }
        Ok(())
    }

    /// The first member stalls in an invocation past the group's poll interval; the second
    /// polls meanwhile, is given the stalled member's partitions and delivers the records the
    /// stalled one still holds; then both go on, and the stalled one's commit is refused.
    async fn overlap(&mut self, run: &mut KafkaRun) -> Result<()> {
        let [Some(a), Some(b), ..] = self.slots.as_mut_slice() else { return Ok(()) };
        let (stall, watch) = (Stall::new(self.function, true), Stall::new(self.function, false));
        let (clients, wait) = (self.clients, self.mapping.wait + Duration::from_secs(1));
        let takeover = async {
            if tokio::time::timeout(wait, stall.started.notified()).await.is_err() {
                return Ok(KafkaPoll::default()); // nothing fetched: nothing to stall
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut total = KafkaPoll::default();
            while stall.both(&watch) == 0 && Instant::now() < deadline {
                match b.poll(clients, &watch).await {
                    Ok(poll) => total += poll,
                    Err(e) => {
                        stall.resume.notify_one();
                        return Err(e);
                    }
                }
            }
            stall.resume.notify_one();
            Ok(total)
        };
        let (stalled, took_over) = futures_util::future::join(a.poll(clients, &stall), takeover).await;
        let (stalled, took_over) = (stalled?, took_over?);
        run.polls += stalled;
        run.polls += took_over;
        if stalled.delivered > 0 {
            run.stalls += 1;
        }
        let both = stall.both(&watch);
        if both > 0 {
            run.overlaps.0 += 1;
            run.overlaps.1 += both;
        }
        Ok(())
    }
}

/// Writes one record: a retry under another key goes to the partition after its first
/// write's, so it lands elsewhere. Returns its partition and offset.
async fn produce(
    producer: &Producer,
    topic: &str,
    write: &plan::Write,
    landed: &mut HashMap<Vec<u8>, i32>,
) -> Result<(i32, i64)> {
    let partition = match write.attempt {
        Attempt::Elsewhere => landed.get(&write.value).map(|p| (p + 1) % PARTITIONS),
        _ => None,
    };
    let record = Outgoing { key: &write.key, value: &write.value, partition, ..Outgoing::default() };
    let (partition, offset) = producer.send(topic, record).await?;
    landed.entry(write.value.clone()).or_insert(partition);
    Ok((partition, offset))
}

/// A poller's function that notes the records it is handed (`topic-partition@offset`) and,
/// when `first` is set, stalls in its first invocation until `resume` (45 s at most): the
/// stalled member holds its batch while the group gives its partitions to another.
struct Stall<'a> {
    inner: &'a Function,
    first: AtomicBool,
    seen: Mutex<HashSet<String>>,
    started: tokio::sync::Notify,
    resume: tokio::sync::Notify,
}

impl<'a> Stall<'a> {
    fn new(inner: &'a Function, stalls: bool) -> Self {
        Stall {
            inner,
            first: stalls.into(),
            seen: Mutex::default(),
            started: tokio::sync::Notify::new(),
            resume: tokio::sync::Notify::new(),
        }
    }

    /// Records both this function and `other` were handed.
    fn both(&self, other: &Stall<'_>) -> usize {
        let (mine, theirs) = (self.seen.lock().unwrap_or_else(|p| p.into_inner()), other.seen.lock());
        let theirs = theirs.unwrap_or_else(|p| p.into_inner());
        mine.intersection(&theirs).count()
    }
}

impl KafkaFunction for Stall<'_> {
    async fn invoke(&self, event: KafkaEvent) -> Result<KafkaEventResponse> {
        let ids =
            event.records.iter().flat_map(|(tp, records)| records.iter().map(move |r| format!("{tp}@{}", r.offset)));
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).extend(ids);
        if self.first.swap(false, Ordering::SeqCst) {
            self.started.notify_one();
            let _ = tokio::time::timeout(Duration::from_secs(45), self.resume.notified()).await;
        }
        self.inner.invoke(event).await
    }
}
