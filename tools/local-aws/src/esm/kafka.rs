//! The Amazon MSK / self-managed Apache Kafka event source mapping, against a real
//! Kafka-protocol broker (`infra/local/kafka.sh`): each poller is a member of the mapping's
//! consumer group, fetches a batch from the partitions the group gives it, invokes the function,
//! and commits each partition's offset only after the answer, as Lambda's pollers do
//! (<https://docs.aws.amazon.com/lambda/latest/dg/with-msk.html>). An invocation error, or an
//! answer naming a record not in the batch, fails every record of the batch. A failure that
//! recurs more than `MaximumRetryAttempts` times is discarded to the on-failure destination (an
//! SQS queue) with a `KafkaBatchInfo` record, and the partition goes on after it
//! (<https://docs.aws.amazon.com/lambda/latest/dg/kafka-retry-configurations.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/kafka-on-failure.html>).
//!
//! How Lambda reads the records a Kafka answer names (`ReportBatchItemFailures`) is not
//! documented beyond "so Lambda can retry only the failed records", so the mapping plays either
//! reading ([`Reading`], [`KafkaMapping::reading`]):
//!
//! - [`Reading::Resume`], as Lambda documents for Kinesis and DynamoDB Streams: each partition
//!   the answer names is committed at the lowest offset it names and read again from there; any
//!   other partition of the batch is committed past its last record. The retries count the
//!   failed invocations at that resume point; when they run out, the resume point and the rest
//!   of its partition in the batch go to the destination.
//! - [`Reading::PerRecord`] (the default: the harsher one, under which an answer that names only
//!   the first failure loses the records held back behind it): exactly the named records are
//!   retried. Every partition of the batch is committed past its last record; the named records
//!   wait in the mapping (not in a poller, so a crash or a rebalance keeps them) and are handed
//!   over again in later invocations, in offset order, ahead of newer records of their
//!   partition. Each counts its own failed deliveries; when they run out it goes to the
//!   destination, records discarded together at consecutive offsets in one `KafkaBatchInfo`.
//!
//! Several pollers in one group share the partitions; when one stops polling for longer than
//! the group's poll interval the broker gives its partitions to the others while it may still be
//! invoking, and both deliver the same records: the overlap that keyed effects make harmless.
//! Not emulated: `BisectBatchOnFunctionError` (each record already fails alone in the driver),
//! `MaximumRecordAgeInSeconds`, event filtering.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::kafka::{KafkaEvent, KafkaRecord};
use base64::Engine;
use effectively_once_lambda::kafka::{topic_partition, KafkaEventResponse};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Headers, Message, Timestamp};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};

use super::checkpoint::Settings;
use crate::error::{Result, ResultExt};
pub use crate::invoke::KafkaFunction;
use crate::resources::{Clients, MappingSettings};

/// How long a poller may go without polling before the group gives its partitions to another
/// member: librdkafka's `max.poll.interval.ms`, at its smallest (the session timeout).
pub const POLL_INTERVAL: Duration = Duration::from_secs(6);

/// The broker the tests and tools use: `KAFKA_BOOTSTRAP` as given, else the project's local
/// broker on `127.0.0.1:$LOCAL_KAFKA_PORT` (9094). When nothing answers there, the first call in
/// the process starts it with the checkout's `infra/local/kafka.sh up` (which builds the pinned
/// tansu once per machine, docs/testing.md, and takes a lock per port) and leaves it running for
/// the next test binary and run (`make local-kafka-down` stops it). The error, when none answers
/// and none starts, is one line naming the command that starts one.
pub fn bootstrap() -> Result<String> {
    if let Ok(bootstrap) = std::env::var("KAFKA_BOOTSTRAP") {
        let address: std::net::SocketAddr = bootstrap.parse().context(format!("KAFKA_BOOTSTRAP={bootstrap}"))?;
        return match std::net::TcpStream::connect_timeout(&address, Duration::from_secs(2)) {
            Ok(_) => Ok(bootstrap),
            Err(e) => Err(format!("no Kafka broker at {bootstrap} ({e}): run `make local-kafka-up`").into()),
        };
    }
    static LOCAL: std::sync::OnceLock<std::result::Result<String, String>> = std::sync::OnceLock::new();
    LOCAL.get_or_init(start_local_kafka).clone().map_err(Into::into)
}

/// The local broker's address once something answers on its port, starting it when nothing does.
fn start_local_kafka() -> std::result::Result<String, String> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/local/kafka.sh");
    effectively_once::local_service::LocalService {
        name: "Kafka broker",
        scheme: "",
        port_var: "LOCAL_KAFKA_PORT",
        default_port: 9094,
        script: &script,
        verb: "up",
        hint: "run `make local-kafka-up`, or set KAFKA_BOOTSTRAP",
    }
    .ensure()
}

/// How the mapping reads the records a function's answer names (the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Reading {
    /// Each named partition resumes at the lowest offset named in it.
    Resume,
    /// Exactly the named records are retried; the rest of the batch is committed.
    #[default]
    PerRecord,
}

impl Reading {
    /// Both readings, for running a test or a scenario under each.
    pub const ALL: [Reading; 2] = [Reading::Resume, Reading::PerRecord];

    /// Of `records` (one invocation's batch, in offset order per partition), those delivered
    /// again after `answer` (with `ReportBatchItemFailures`), retries aside: under
    /// [`Reading::Resume`] each named partition from its lowest named offset, under
    /// [`Reading::PerRecord`] the named records. What a test that plays Lambda by hand
    /// hands over next.
    pub fn again(self, records: &[KafkaRecord], answer: &Result<KafkaEventResponse>) -> Vec<KafkaRecord> {
        let named = named(records, answer, true);
        let resume = resume_points(&named);
        let again = |r: &&KafkaRecord| match self {
            Reading::Resume => resume.get(&(r.partition as i32)).is_some_and(|&at| r.offset >= at),
            Reading::PerRecord => named.contains(&(r.partition as i32, r.offset)),
        };
        records.iter().filter(again).cloned().collect()
    }
}

/// For each `name`, an `async fn name(reading: Reading)` of the calling module, two tests:
/// `name::resume` and `name::per_record`, each on the multi-threaded runtime with that
/// [`Reading`]: the same body against both readings, as ripgrep's `rgtest!` runs one body
/// against two engines. The calling crate needs `tokio` with `macros` and `rt-multi-thread`.
///
/// ```ignore
/// local::each_reading!(a_failure_comes_back);
/// /// What the test pins.
/// async fn a_failure_comes_back(reading: Reading) {
///     let mut mapping = KafkaMapping::new(..);
///     mapping.reading = reading;
/// }
/// ```
#[macro_export]
macro_rules! each_reading {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread")]
            async fn resume() {
                super::$name($crate::esm::kafka::Reading::Resume).await
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn per_record() {
                super::$name($crate::esm::kafka::Reading::PerRecord).await
            }
        }
    )*};
}

impl std::fmt::Display for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reading::Resume => "resume",
            Reading::PerRecord => "per-record",
        })
    }
}

/// A Kafka event source mapping: where it reads, as which group, and how failures are handled.
#[derive(Debug, Clone)]
pub struct KafkaMapping {
    /// `host:port` of the broker (`bootstrapServers` in the event).
    pub bootstrap: String,
    /// The topic the mapping reads.
    pub topic: String,
    /// The consumer group (`AmazonMSKConfig.ConsumerGroupId`).
    pub group: String,
    /// Batch size, retries, response types, destination (record age and bisection unused).
    pub settings: Settings,
    /// How long a poller waits for a batch's first record.
    pub wait: Duration,
    /// How the answer's named records are read: [`Reading::PerRecord`] unless set.
    pub reading: Reading,
    /// Under [`Reading::PerRecord`], the named records waiting to be delivered again: the
    /// mapping's state, shared by its pollers (clones of the mapping share it too).
    retrying: Arc<Mutex<Retrying>>,
}

impl KafkaMapping {
    /// Reads `topic` from its earliest offset (`StartingPosition: TRIM_HORIZON`) as `group`, with
    /// [`MappingSettings::kinesis`]'s batch size, retries and response types; discarded batches
    /// go to `failures_url`. [`KafkaMapping::with_settings`] applies a template's.
    pub fn new(bootstrap: &str, topic: &str, group: &str, failures_url: Option<String>) -> Self {
        let mut mapping = KafkaMapping::placed(bootstrap, topic, group);
        mapping.settings = Self::settings(&MappingSettings::kinesis(), failures_url);
        mapping
    }

    /// The mapping's settings as `mapping` says (a template's, [`crate::resources::mapping_settings`]);
    /// discarded batches go to `failures_url`.
    pub fn with_settings(mut self, mapping: &MappingSettings, failures_url: Option<String>) -> Self {
        self.settings = Self::settings(mapping, failures_url);
        self
    }

    fn settings(mapping: &MappingSettings, failures_url: Option<String>) -> Settings {
        let mut settings = Settings::new(mapping, failures_url);
        // "When you configure both infinite retries and an on-failure destination, Lambda
        // automatically applies a maximum of 10 retry attempts."
        if settings.max_retries == u32::MAX && settings.failures_url.is_some() {
            settings.max_retries = 10;
        }
        settings
    }

    /// The mapping's place (broker, topic, group) with its defaults; settings set after.
    fn placed(bootstrap: &str, topic: &str, group: &str) -> Self {
        KafkaMapping {
            bootstrap: bootstrap.into(),
            topic: topic.into(),
            group: group.into(),
            settings: Settings::new(&MappingSettings::kinesis(), None),
            wait: Duration::from_secs(2),
            reading: Reading::default(),
            retrying: Arc::default(),
        }
    }

    /// Records waiting to be delivered again ([`Reading::PerRecord`]); none under
    /// [`Reading::Resume`], whose retries are read again from the broker.
    pub fn waiting(&self) -> usize {
        self.retrying().0.len()
    }

    fn retrying(&self) -> std::sync::MutexGuard<'_, Retrying> {
        self.retrying.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The event's `eventSourceArn`: a self-managed cluster has none, so a made-up MSK one.
    fn arn(&self) -> String {
        format!("arn:aws:kafka:us-east-1:000000000000:cluster/local/{}", self.group)
    }
}

/// What one poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KafkaPoll {
    /// Records handed to the function.
    pub delivered: usize,
    /// Invocations that failed or reported a failure.
    pub failed_batches: usize,
    /// Records discarded to the on-failure destination.
    pub given_up: usize,
    /// Offset commits the broker refused (the poller lost its partitions in a rebalance): the
    /// new owner delivers those records again.
    pub commits_refused: usize,
}

impl std::ops::AddAssign for KafkaPoll {
    fn add_assign(&mut self, other: KafkaPoll) {
        self.delivered += other.delivered;
        self.failed_batches += other.failed_batches;
        self.given_up += other.given_up;
        self.commits_refused += other.commits_refused;
    }
}

/// The records a [`Reading::PerRecord`] mapping delivers again, by partition and offset, each
/// with its failed deliveries so far.
#[derive(Debug, Default)]
struct Retrying(BTreeMap<(i32, i64), (KafkaRecord, u32)>);

impl Retrying {
    /// Takes the answer for `records`: a named record waits (again), its failed deliveries one
    /// more; a record not named leaves the queue (it succeeded). Returns the named records
    /// whose first delivery and `max_retries` retries have all failed; they stay in the queue
    /// until the destination has them.
    fn answered(
        &mut self,
        records: &[KafkaRecord],
        named: &BTreeSet<(i32, i64)>,
        max_retries: u32,
    ) -> BTreeSet<(i32, i64)> {
        let mut exhausted = BTreeSet::new();
        for record in records {
            let at = (record.partition as i32, record.offset);
            if !named.contains(&at) {
                self.0.remove(&at);
                continue;
            }
            let failed = &mut self.0.entry(at).or_insert_with(|| (record.clone(), 0)).1;
            *failed += 1;
            if *failed > max_retries {
                exhausted.insert(at);
            }
        }
        exhausted
    }

    /// Whether a record of `partition` waits that `batch` does not hold.
    fn left_out(&self, partition: i32, batch: &[KafkaRecord]) -> bool {
        let mut waiting = self.0.range((partition, i64::MIN)..=(partition, i64::MAX));
        waiting.any(|(_, (w, _))| !batch.iter().any(|r| r.partition == w.partition && r.offset == w.offset))
    }

    /// Up to `limit` waiting records of `partitions`, in partition and offset order.
    fn of(&self, partitions: &HashSet<i32>, limit: usize) -> Vec<KafkaRecord> {
        let waiting = self.0.iter().filter(|((p, _), _)| partitions.contains(p));
        waiting.take(limit).map(|(_, (record, _))| record.clone()).collect()
    }
}

/// One poller of a mapping: a consumer-group member.
pub struct KafkaPoller {
    consumer: StreamConsumer,
    mapping: KafkaMapping,
    /// Per partition, the offset it resumes from after a failure, and the failed invocations
    /// there so far.
    retries: HashMap<i32, (i64, u32)>,
}

impl std::fmt::Debug for KafkaPoller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaPoller").field("mapping", &self.mapping).field("retries", &self.retries).finish()
    }
}

impl KafkaPoller {
    /// Joins the mapping's group as `name` and subscribes to its topic; partitions come with
    /// the first polls.
    pub fn join(mapping: &KafkaMapping, name: &str) -> Result<Self> {
        let interval = POLL_INTERVAL.as_millis().to_string();
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", &mapping.bootstrap)
            .set("group.id", &mapping.group)
            .set("client.id", name)
            // Offsets are committed by hand, after the function's answer, and nothing else.
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", &interval)
            .set("max.poll.interval.ms", &interval)
            .set("heartbeat.interval.ms", "500")
            .create()
            .context(format!("kafka consumer {name}"))?;
        consumer.subscribe(&[&mapping.topic]).context(format!("subscribe to {}", mapping.topic))?;
        Ok(KafkaPoller { consumer, mapping: mapping.clone(), retries: HashMap::new() })
    }

    /// Partitions the group gives this poller now.
    pub fn assigned(&self) -> usize {
        self.consumer.assignment().map_or(0, |a| a.count())
    }

    /// Fetches one batch, invokes `function` with it, and commits (or resumes) each partition
    /// as the answer says. Nothing fetched: nothing invoked.
    pub async fn poll<F: KafkaFunction>(&mut self, clients: &Clients, function: &F) -> Result<KafkaPoll> {
        let (records, read_to) = self.next_batch().await?;
        if records.is_empty() {
            return Ok(KafkaPoll::default());
        }
        let answer = function.invoke(kafka_event(&self.mapping, &records)).await;
        match self.mapping.reading {
            Reading::Resume => self.settle(clients, &records, answer).await,
            Reading::PerRecord => self.settle_records(clients, &records, &read_to, answer).await,
        }
    }

    /// Fetches one batch and invokes `function` with it, then dies before it commits anything:
    /// the sandbox or the poller crashed after the function's effects. The group gives the
    /// partitions to the next member, which starts from the last committed offsets. Returns the
    /// records delivered.
    pub async fn poll_then_crash<F: KafkaFunction>(self, function: &F) -> Result<usize> {
        // Records waiting to be delivered again stay waiting: nothing settles them.
        let (records, _) = self.next_batch().await?;
        if !records.is_empty() {
            // Whatever the answer, nobody reads it.
            let _ = function.invoke(kafka_event(&self.mapping, &records)).await;
        }
        Ok(records.len())
    }

    /// The next batch, in partition and offset order: first the records waiting to be delivered
    /// again of this poller's partitions ([`Reading::PerRecord`]), then what the broker has,
    /// up to the batch size; and per partition, the offset after the last record read from
    /// the broker.
    async fn next_batch(&self) -> Result<(Vec<KafkaRecord>, BTreeMap<i32, i64>)> {
        let size = self.mapping.settings.batch_size.max(1) as usize;
        let mut records = self.mapping.retrying().of(&self.partitions(), size);
        // With records already waiting, new ones are taken as they are, not waited for.
        let wait = if records.is_empty() { self.mapping.wait } else { Duration::from_millis(50) };
        let mut read = self.fetch(size - records.len(), wait).await?;
        self.put_back_behind_waiting(&mut read, &records)?;
        let mut read_to = BTreeMap::new();
        for record in read {
            let end = read_to.entry(record.partition as i32).or_insert(0);
            *end = (*end).max(record.offset + 1);
            // A commit that moved back (a late one from an evicted member) reads again what waits.
            if !records.iter().any(|r| r.partition == record.partition && r.offset == record.offset) {
                records.push(record);
            }
        }
        records.sort_by_key(|r| (r.partition, r.offset));
        Ok((records, read_to))
    }

    /// Takes out of `read` the records of each partition with a waiting record `batch` leaves
    /// out (the group gave the partition to this poller during the fetch), and moves the
    /// consumer back to read them again later: a partition's waiting records go ahead of its
    /// newer ones.
    fn put_back_behind_waiting(&self, read: &mut Vec<KafkaRecord>, batch: &[KafkaRecord]) -> Result<()> {
        let mut back: BTreeMap<i32, i64> = BTreeMap::new();
        {
            let retrying = self.mapping.retrying();
            for record in read.iter() {
                let partition = record.partition as i32;
                if retrying.left_out(partition, batch) {
                    let at = back.entry(partition).or_insert(record.offset);
                    *at = (*at).min(record.offset);
                }
            }
        }
        read.retain(|r| !back.contains_key(&(r.partition as i32)));
        let mut rejoin = false;
        for (partition, at) in back {
            rejoin |= !self.rewind(partition, at);
        }
        if rejoin {
            self.rejoin()?;
        }
        Ok(())
    }

    /// The partitions the group gives this poller now.
    fn partitions(&self) -> HashSet<i32> {
        let assignment = self.consumer.assignment().unwrap_or_default();
        assignment.elements().iter().map(|e| e.partition()).collect()
    }

    /// Up to `limit` records: waits `wait` for the first, then takes what arrives without a
    /// pause (Lambda's batching window, short).
    async fn fetch(&self, limit: usize, mut wait: Duration) -> Result<Vec<KafkaRecord>> {
        let mut records = Vec::new();
        while records.len() < limit {
            match tokio::time::timeout(wait, self.consumer.recv()).await {
                Err(_) => break,
                Ok(Ok(message)) => records.push(record(&message)?),
                // After a long invocation librdkafka reports it left the group
                // (`max.poll.interval.ms`); polling again rejoins it.
                Ok(Err(error)) => tracing::info!(%error, "kafka poll"),
            }
            wait = Duration::from_millis(50);
        }
        Ok(records)
    }

    /// Under [`Reading::Resume`]: commits each partition of the batch past what the answer lets
    /// through, resumes the rest, and discards a resume point whose retries ran out. A partition is never committed past a
    /// record that was neither answered nor written to the destination: a failed destination
    /// write resumes the partition at the record (and fails the poll once the commits are in),
    /// and a failed seek makes the poller rejoin the group, which reads from the commit.
    async fn settle(
        &mut self,
        clients: &Clients,
        records: &[KafkaRecord],
        answer: Result<KafkaEventResponse>,
    ) -> Result<KafkaPoll> {
        let mut poll = KafkaPoll { delivered: records.len(), ..KafkaPoll::default() };
        let resume = resume_points(&named(records, &answer, self.mapping.settings.report_batch_item_failures));
        poll.failed_batches = usize::from(!resume.is_empty());
        let (mut commits, mut failed, mut rejoin) = (TopicPartitionList::new(), None, false);
        for (partition, batch) in by_partition(records) {
            let last = batch.last().map_or(0, |r| r.offset);
            let mut next = last + 1;
            if let Some(&at) = resume.get(&partition) {
                next = at;
                if self.retries_exhausted(partition, at) {
                    let discarded: Vec<&KafkaRecord> = batch.iter().copied().filter(|r| r.offset >= at).collect();
                    match self.discard(clients, &discarded, answer.is_err()).await {
                        Ok(()) => {
                            poll.given_up += discarded.len();
                            self.retries.remove(&partition);
                            next = last + 1;
                        }
                        Err(error) => failed = Some(error),
                    }
                }
                if next == at {
                    rejoin |= !self.rewind(partition, at);
                }
            } else {
                self.retries.remove(&partition);
            }
            commits.add_partition_offset(&self.mapping.topic, partition, Offset::Offset(next)).context("offset")?;
        }
        if let Err(error) = self.consumer.commit(&commits, CommitMode::Sync) {
            tracing::warn!(%error, "kafka offset commit refused; the partitions' new owner delivers the batch again");
            poll.commits_refused += 1;
        }
        if rejoin {
            self.rejoin()?;
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(poll),
        }
    }

    /// Under [`Reading::PerRecord`]: the named records wait to be delivered again, each with its
    /// failed deliveries counted, and those whose retries ran out go to the destination, records
    /// at consecutive offsets of a partition in one invocation record; each partition is
    /// committed past what was read of it from the broker. A record whose destination write
    /// failed keeps waiting (and fails the poll once the commits are in): it is tried again, and
    /// discarded again while it still fails.
    async fn settle_records(
        &mut self,
        clients: &Clients,
        records: &[KafkaRecord],
        read_to: &BTreeMap<i32, i64>,
        answer: Result<KafkaEventResponse>,
    ) -> Result<KafkaPoll> {
        let mut poll = KafkaPoll { delivered: records.len(), ..KafkaPoll::default() };
        let named = named(records, &answer, self.mapping.settings.report_batch_item_failures);
        poll.failed_batches = usize::from(!named.is_empty());
        let exhausted = self.mapping.retrying().answered(records, &named, self.mapping.settings.max_retries);
        let mut failed = None;
        for run in runs(records, &exhausted) {
            match self.discard(clients, &run, answer.is_err()).await {
                Ok(()) => {
                    poll.given_up += run.len();
                    let mut retrying = self.mapping.retrying();
                    run.iter().for_each(|r| _ = retrying.0.remove(&(r.partition as i32, r.offset)));
                }
                Err(error) => failed = Some(error),
            }
        }
        let mut commits = TopicPartitionList::new();
        for (&partition, &next) in read_to {
            commits.add_partition_offset(&self.mapping.topic, partition, Offset::Offset(next)).context("offset")?;
        }
        if commits.count() > 0 {
            if let Err(error) = self.consumer.commit(&commits, CommitMode::Sync) {
                tracing::warn!(%error, "kafka offset commit refused; the partitions' new owner delivers the batch again");
                poll.commits_refused += 1;
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(poll),
        }
    }

    /// Reads `partition` again from `at`; false when the consumer could not move there.
    fn rewind(&self, partition: i32, at: i64) -> bool {
        let seek = self.consumer.seek(&self.mapping.topic, partition, Offset::Offset(at), Duration::from_secs(5));
        if let Err(error) = &seek {
            tracing::warn!(%error, partition, at, "kafka seek failed; the poller rejoins its group and reads from the commit");
        }
        seek.is_ok()
    }

    /// Leaves the group and joins it again: whatever partitions come back are read from their
    /// committed offsets, not from where this consumer had fetched to.
    fn rejoin(&self) -> Result<()> {
        self.consumer.unsubscribe();
        self.consumer.subscribe(&[&self.mapping.topic]).context(format!("subscribe to {}", self.mapping.topic))
    }

    /// Counts a failed invocation at `at` on `partition`; true once the first invocation and
    /// `MaximumRetryAttempts` retries have all failed there.
    fn retries_exhausted(&mut self, partition: i32, at: i64) -> bool {
        let entry = self.retries.entry(partition).or_insert((at, 0));
        if entry.0 != at {
            *entry = (at, 0);
        }
        entry.1 += 1;
        entry.1 > self.mapping.settings.max_retries
    }

    /// Sends the on-failure destination the invocation record of a discarded batch: which
    /// records (by topic-partition and offsets), not the records, which a reader fetches from
    /// the topic while its retention lasts.
    async fn discard(&self, clients: &Clients, batch: &[&KafkaRecord], function_error: bool) -> Result<()> {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else { return Ok(()) };
        let partition = topic_partition(first);
        tracing::warn!(%partition, first = first.offset, last = last.offset, "kafka batch discarded to the on-failure destination");
        let Some(url) = &self.mapping.settings.failures_url else { return Ok(()) };
        let record = failure_record(&self.mapping, batch, function_error);
        let send = clients.sqs.send_message().queue_url(url).message_body(record.to_string());
        send.send().await.context("on-failure destination")?;
        Ok(())
    }
}

/// The Lambda event for `records`: by `topic-partition`, in offset order.
pub fn kafka_event(mapping: &KafkaMapping, records: &[KafkaRecord]) -> KafkaEvent {
    let mut event = KafkaEvent::default();
    event.event_source = Some("aws:kafka".into());
    event.event_source_arn = Some(mapping.arn());
    event.bootstrap_servers = Some(mapping.bootstrap.clone());
    for record in records {
        event.records.entry(topic_partition(record)).or_default().push(record.clone());
    }
    event
}

/// The batch's records by partition number, each in offset order.
fn by_partition(records: &[KafkaRecord]) -> BTreeMap<i32, Vec<&KafkaRecord>> {
    let mut partitions: BTreeMap<i32, Vec<&KafkaRecord>> = BTreeMap::new();
    for record in records {
        partitions.entry(record.partition as i32).or_default().push(record);
    }
    partitions.values_mut().for_each(|batch| batch.sort_by_key(|r| r.offset));
    partitions
}

/// The records `answer` names, by partition number and offset: none for a success or when the
/// mapping does not read the answer's failures (`report` false); every record of the batch for
/// an invocation error or an answer naming a record not in the batch (Lambda treats an invalid
/// answer as a failure of the whole batch).
fn named(records: &[KafkaRecord], answer: &Result<KafkaEventResponse>, report: bool) -> BTreeSet<(i32, i64)> {
    let whole = || records.iter().map(|r| (r.partition as i32, r.offset)).collect();
    let failures = match answer {
        Err(_) => return whole(),
        Ok(_) if !report => return BTreeSet::new(),
        Ok(answer) => &answer.batch_item_failures,
    };
    let mut named = BTreeSet::new();
    for failure in failures {
        let id = &failure.item_identifier;
        let Some(record) = records.iter().find(|r| topic_partition(r) == id.partition && r.offset == id.offset) else {
            return whole();
        };
        named.insert((record.partition as i32, record.offset));
    }
    named
}

/// Where each named partition resumes under [`Reading::Resume`]: the lowest offset named in it.
fn resume_points(named: &BTreeSet<(i32, i64)>) -> BTreeMap<i32, i64> {
    let mut resume = BTreeMap::new();
    for &(partition, offset) in named {
        // In order: the first of a partition is its lowest.
        resume.entry(partition).or_insert(offset);
    }
    resume
}

/// The records of `exhausted`, each partition's cut into runs of records at consecutive
/// offsets of the batch (no record of the batch between them left out): one invocation record
/// each, so a replay reads back exactly the records discarded.
fn runs<'a>(records: &'a [KafkaRecord], exhausted: &BTreeSet<(i32, i64)>) -> Vec<Vec<&'a KafkaRecord>> {
    let mut runs: Vec<Vec<&KafkaRecord>> = Vec::new();
    for batch in by_partition(records).into_values() {
        let mut run = Vec::new();
        for record in batch {
            if exhausted.contains(&(record.partition as i32, record.offset)) {
                run.push(record);
            } else if !run.is_empty() {
                runs.push(std::mem::take(&mut run));
            }
        }
        if !run.is_empty() {
            runs.push(run);
        }
    }
    runs
}

/// The invocation record of a discarded Kafka batch (`KafkaBatchInfo`, one partition).
fn failure_record(mapping: &KafkaMapping, batch: &[&KafkaRecord], function_error: bool) -> Value {
    let now = (mapping.settings.clock)().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (first, last) = (batch[0], batch[batch.len() - 1]);
    let mut response_context = json!({"statusCode": 200, "executedVersion": "$LATEST"});
    if function_error {
        response_context["functionError"] = json!("Unhandled");
    }
    json!({
        "requestContext": {
            "requestId": format!("local-{}", now.as_nanos()),
            "functionArn": mapping.settings.function_arn,
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": mapping.settings.max_retries.saturating_add(1),
        },
        "responseContext": response_context,
        "version": "1.0",
        "timestamp": crate::time::rfc3339(now.as_millis() as u64),
        "KafkaBatchInfo": {
            "batchSize": batch.len(),
            "bootstrapServers": mapping.bootstrap,
            "recordsInfo": {
                topic_partition(first): {
                    "firstRecordOffset": first.offset.to_string(),
                    "firstRecordTimestamp": *first.timestamp,
                    "lastRecordOffset": last.offset.to_string(),
                    "lastRecordTimestamp": *last.timestamp,
                }
            }
        }
    })
}

/// A fetched message as Lambda hands it over: key and value in base64, headers as arrays of
/// signed bytes, the timestamp in ms with its type.
fn record(message: &BorrowedMessage<'_>) -> Result<KafkaRecord> {
    let b64 = |bytes: Option<&[u8]>| bytes.map(|b| base64::engine::general_purpose::STANDARD.encode(b));
    let (timestamp, timestamp_type) = match message.timestamp() {
        Timestamp::CreateTime(ms) => (ms, "CREATE_TIME"),
        Timestamp::LogAppendTime(ms) => (ms, "LOG_APPEND_TIME"),
        Timestamp::NotAvailable => (0, "NO_TIMESTAMP_TYPE"),
    };
    let headers: Vec<Value> = message
        .headers()
        .map(|headers| {
            headers
                .iter()
                .map(|h| json!({ h.key: h.value.unwrap_or_default().iter().map(|&b| b as i8).collect::<Vec<i8>>() }))
                .collect()
        })
        .unwrap_or_default();
    let record = json!({
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": message.offset(),
        "timestamp": timestamp,
        "timestampType": timestamp_type,
        "key": b64(message.key()),
        "value": b64(message.payload()),
        "headers": headers,
    });
    serde_json::from_value(record).context("kafka record")
}

/// Reads `payload` as Lambda reads a Kafka function's answer: `null` or an object without
/// failures is a success; anything else that is not a `KafkaEventResponse` fails the batch.
pub fn kafka_response(payload: &[u8]) -> Result<KafkaEventResponse> {
    let value: Value = serde_json::from_slice(payload).context("the answer is not JSON")?;
    match value {
        Value::Null => Ok(KafkaEventResponse::default()),
        Value::Object(ref o) if o.get("batchItemFailures").is_none_or(Value::is_null) => {
            Ok(KafkaEventResponse::default())
        }
        value => serde_json::from_value(value).context("the answer is not a Kafka batch response"),
    }
}

/// A record to produce.
#[derive(Debug, Clone, Default)]
pub struct Outgoing<'a> {
    /// The record's key.
    pub key: &'a str,
    /// The record's value.
    pub value: &'a [u8],
    /// The partition; `None`: the one the key's hash picks.
    pub partition: Option<i32>,
    /// Headers, in order.
    pub headers: Vec<(&'a str, &'a [u8])>,
}

/// A producer on the broker (`acks=all`).
pub struct Producer(FutureProducer);

impl Producer {
    /// Connects to `bootstrap`.
    pub fn new(bootstrap: &str) -> Result<Self> {
        let producer = ClientConfig::new().set("bootstrap.servers", bootstrap).set("acks", "all").create();
        Ok(Producer(producer.context("kafka producer")?))
    }

    /// Writes `record` to `topic`; returns its partition and offset.
    pub async fn send(&self, topic: &str, record: Outgoing<'_>) -> Result<(i32, i64)> {
        let Outgoing { key, value, partition, headers } = record;
        let mut owned = rdkafka::message::OwnedHeaders::new();
        for (name, value) in headers {
            owned = owned.insert(rdkafka::message::Header { key: name, value: Some(value) });
        }
        let mut record = FutureRecord::to(topic).key(key).payload(value).headers(owned);
        record.partition = partition;
        let sent = self.0.send(record, Duration::from_secs(10)).await;
        sent.map(|d| (d.partition, d.offset)).map_err(|(e, _)| format!("kafka send to {topic}: {e}").into())
    }
}

/// Produces the records of a Kafka sample event (a Lambda `KafkaEvent`, `events/kafka-*.json`)
/// to `topic`, in the event's order, with their keys, values and headers; the partitions are
/// the key's hash's, not the sample's. Returns how many.
pub async fn produce_event_file(bootstrap: &str, topic: &str, json: &str) -> Result<usize> {
    use effectively_once_lambda::kafka::{key_bytes, value_bytes};
    let event: KafkaEvent = serde_json::from_str(json).context("Kafka event file")?;
    let mut partitions: Vec<_> = event.records.into_iter().collect();
    partitions.sort_by(|a, b| a.0.cmp(&b.0));
    let producer = Producer::new(bootstrap)?;
    let mut produced = 0;
    for record in partitions.into_iter().flat_map(|(_, records)| records) {
        let key = String::from_utf8_lossy(&key_bytes(&record).unwrap_or_default()).into_owned();
        let value = value_bytes(&record).unwrap_or_default();
        let headers: Vec<(String, Vec<u8>)> = record
            .headers
            .iter()
            .flat_map(|h| h.iter().map(|(name, bytes)| (name.clone(), bytes.iter().map(|&b| b as u8).collect())))
            .collect();
        let headers = headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        producer.send(topic, Outgoing { key: &key, value: &value, partition: None, headers }).await?;
        produced += 1;
    }
    Ok(produced)
}

/// Creates `topic` with `partitions` partitions (an existing one is kept).
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<_> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().context("kafka admin")?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for result in admin.create_topics(&[new], &AdminOptions::new()).await.context("create topic")? {
        match result {
            Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(format!("create topic {topic}: {code}").into()),
        }
    }
    Ok(())
}

/// The group's committed offset of each partition of `topic` (`None`: nothing committed).
pub fn committed(mapping: &KafkaMapping, partitions: i32) -> Result<Vec<Option<i64>>> {
    committed_by(&group_reader(mapping)?, mapping, partitions)
}

/// A consumer of the mapping's group that never joins it: it only reads the group's offsets.
fn group_reader(mapping: &KafkaMapping) -> Result<rdkafka::consumer::BaseConsumer> {
    let config =
        ClientConfig::new().set("bootstrap.servers", &mapping.bootstrap).set("group.id", &mapping.group).create();
    config.context("kafka consumer")
}

/// [`committed`], read through `reader` (one connection for a loop of reads).
fn committed_by(
    reader: &rdkafka::consumer::BaseConsumer,
    mapping: &KafkaMapping,
    partitions: i32,
) -> Result<Vec<Option<i64>>> {
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(&mapping.topic, p);
    }
    let offsets = reader.committed_offsets(list, Duration::from_secs(10)).context("committed offsets")?;
    Ok(offsets.elements().iter().map(|e| if let Offset::Offset(o) = e.offset() { Some(o) } else { None }).collect())
}

/// How many partitions `topic` has.
pub fn partitions(mapping: &KafkaMapping) -> Result<i32> {
    let consumer = plain_consumer(mapping)?;
    let metadata = consumer.fetch_metadata(Some(&mapping.topic), Duration::from_secs(10)).context("kafka metadata")?;
    let topic = metadata.topics().first().ok_or(format!("no topic {}", mapping.topic))?;
    Ok(topic.partitions().len() as i32)
}

/// The offset after the last record of each partition of the mapping's topic, now.
pub fn ends(mapping: &KafkaMapping) -> Result<Vec<i64>> {
    let consumer = plain_consumer(mapping)?;
    (0..partitions(mapping)?)
        .map(|p| {
            let watermarks = consumer.fetch_watermarks(&mapping.topic, p, Duration::from_secs(10));
            watermarks.map(|(_, high)| high).context(format!("watermarks of {}-{p}", mapping.topic))
        })
        .collect()
}

/// Polls with each of `pollers` in turn until the group has committed every record the topic
/// held when called and none waits to be delivered again; gives up after `limit`.
pub async fn drain<F: KafkaFunction>(
    clients: &Clients,
    pollers: &mut [KafkaPoller],
    function: &F,
    limit: Duration,
) -> Result<KafkaPoll> {
    let mapping = pollers.first().map(|p| p.mapping.clone()).ok_or("no poller")?;
    let ends = ends(&mapping)?;
    let reader = group_reader(&mapping)?;
    let deadline = tokio::time::Instant::now() + limit;
    let mut total = KafkaPoll::default();
    loop {
        let committed = committed_by(&reader, &mapping, ends.len() as i32)?;
        let waiting = mapping.waiting();
        if waiting == 0 && ends.iter().zip(&committed).all(|(end, c)| *end == 0 || c.is_some_and(|c| c >= *end)) {
            return Ok(total);
        }
        if tokio::time::Instant::now() > deadline {
            let topic = &mapping.topic;
            return Err(format!(
                "{topic} not drained after {limit:?}: committed {committed:?} of {ends:?}, {waiting} records waiting"
            )
            .into());
        }
        for poller in pollers.iter_mut() {
            total += poller.poll(clients, function).await?;
        }
    }
}

/// What a replay of the on-failure destination did: see [`super::Replayed`].
pub use super::Replayed;

/// Replays the mapping's on-failure destination through `function`: each `KafkaBatchInfo`
/// names a topic-partition and an offset range, whose records are read again from the broker
/// (a consumer outside the group, assigned that partition), handed over in batches, and the
/// invocation record is deleted only once all of them succeeded.
pub async fn replay_kafka_failures<F: KafkaFunction>(
    clients: &Clients,
    mapping: &KafkaMapping,
    function: &F,
) -> Result<Replayed> {
    let Some(url) = &mapping.settings.failures_url else { return Ok(Replayed::default()) };
    super::replay::walk(clients, url, async |record: &Value| {
        Ok(replay_batch(mapping, function, &record["KafkaBatchInfo"]).await.unwrap_or_else(|error| {
            tracing::warn!(error = %crate::error::report(&*error), "a discarded Kafka batch could not be read back; kept");
            None
        }))
    })
    .await
}

/// The records one `KafkaBatchInfo` names, through `function`; `None` when one still failed (a
/// failure in the answer counts, whatever the mapping's response types) or the broker no longer
/// holds them; `Err` when they cannot be read (a partition the topic no longer has, a malformed
/// record).
async fn replay_batch<F: KafkaFunction>(mapping: &KafkaMapping, function: &F, info: &Value) -> Result<Option<usize>> {
    let mut replayed = 0;
    for (name, range) in info["recordsInfo"].as_object().into_iter().flatten() {
        let offset = |field: &str| range[field].as_str().and_then(|o| o.parse::<i64>().ok());
        let (Some(first), Some(last)) = (offset("firstRecordOffset"), offset("lastRecordOffset")) else {
            return Err(format!("KafkaBatchInfo without offsets for {name}").into());
        };
        let (topic, partition) = name.rsplit_once('-').ok_or(format!("not a topic-partition: {name}"))?;
        let partition: i32 = partition.parse().context(format!("partition of {name}"))?;
        let records = read_range(mapping, topic, partition, first, last).await?;
        if !whole_range(&records, first, last) {
            return Ok(None);
        }
        for chunk in records.chunks(mapping.settings.batch_size.max(1) as usize) {
            let answer = function.invoke(kafka_event(mapping, chunk)).await;
            if !named(chunk, &answer, true).is_empty() {
                return Ok(None);
            }
            replayed += chunk.len();
        }
    }
    Ok(Some(replayed))
}

/// Whether `records` (in offset order) are what the broker still holds of `first..=last`: both
/// ends present, so retention took none of it. Offsets between may be missing: a transactional
/// producer's commit markers and aborted records take offsets no consumer is handed. The client
/// cannot tell those from records compaction removed, so a compacted topic's range with holes
/// passes too: the limit docs/kafka.md states.
fn whole_range(records: &[KafkaRecord], first: i64, last: i64) -> bool {
    records.first().is_some_and(|r| r.offset == first) && records.last().is_some_and(|r| r.offset == last)
}

/// A consumer outside any group, for reading a range by hand.
fn plain_consumer(mapping: &KafkaMapping) -> Result<StreamConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", &mapping.bootstrap)
        .set("group.id", format!("{}-replay", mapping.group))
        .set("enable.auto.commit", "false")
        .create()
        .context("kafka consumer")
}

/// The records `first..=last` of a partition.
async fn read_range(
    mapping: &KafkaMapping,
    topic: &str,
    partition: i32,
    first: i64,
    last: i64,
) -> Result<Vec<KafkaRecord>> {
    let consumer = plain_consumer(mapping)?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(first)).context("offset")?;
    consumer.assign(&list).context("assign")?;
    let mut records: Vec<KafkaRecord> = Vec::new();
    while records.last().is_none_or(|r| r.offset < last) {
        match tokio::time::timeout(Duration::from_secs(5), consumer.recv()).await {
            Ok(Ok(message)) if message.offset() > last => break,
            Ok(Ok(message)) => records.push(record(&message)?),
            Ok(Err(error)) => return Err(format!("kafka read {topic}-{partition}: {error}").into()),
            Err(_) => break,
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offsets: &[i64]) -> Vec<KafkaRecord> {
        offsets
            .iter()
            .map(|&offset| {
                let mut record = KafkaRecord::default();
                record.offset = offset;
                record
            })
            .collect()
    }

    /// Records of topic `t`, `(partition, offset)`.
    fn of(ids: &[(i64, i64)]) -> Vec<KafkaRecord> {
        ids.iter()
            .map(|&(partition, offset)| {
                let mut record = KafkaRecord::default();
                record.topic = Some("t".into());
                record.partition = partition;
                record.offset = offset;
                record
            })
            .collect()
    }

    fn failing(ids: &[(&str, i64)]) -> Result<KafkaEventResponse> {
        use effectively_once_lambda::kafka::{KafkaBatchItemFailure, KafkaItemIdentifier};
        let failures = ids.iter().map(|&(partition, offset)| KafkaBatchItemFailure {
            item_identifier: KafkaItemIdentifier { partition: partition.into(), offset },
        });
        Ok(KafkaEventResponse { batch_item_failures: failures.collect() })
    }

    fn ids(records: &[KafkaRecord]) -> Vec<(i64, i64)> {
        records.iter().map(|r| (r.partition, r.offset)).collect()
    }

    /// The old answer (the lowest failure only) loses the held-back record under the per-record
    /// reading; the answer naming it too is delivered whole under either.
    #[test]
    fn the_two_readings_deliver_again_what_they_say() {
        let batch = of(&[(0, 10), (0, 11), (0, 12), (1, 5)]);
        let lowest = failing(&[("t-0", 10)]);
        assert_eq!(ids(&Reading::Resume.again(&batch, &lowest)), [(0, 10), (0, 11), (0, 12)]);
        assert_eq!(ids(&Reading::PerRecord.again(&batch, &lowest)), [(0, 10)]);
        let every = failing(&[("t-0", 10), ("t-0", 11), ("t-0", 12)]);
        for reading in Reading::ALL {
            assert_eq!(ids(&reading.again(&batch, &every)), [(0, 10), (0, 11), (0, 12)], "{reading}");
        }
        // An answer naming a record not in the batch fails the whole batch, under either.
        for reading in Reading::ALL {
            assert_eq!(ids(&reading.again(&batch, &failing(&[("t-1", 9)]))), ids(&batch), "{reading}");
        }
    }

    /// Each waiting record counts its own failed deliveries; one that succeeds leaves.
    #[test]
    fn a_waiting_record_keeps_its_failed_deliveries_until_they_run_out() {
        let mut retrying = Retrying::default();
        let named = |ids: &[(i32, i64)]| ids.iter().copied().collect::<BTreeSet<_>>();
        let first = of(&[(0, 10), (0, 11)]);
        assert!(retrying.answered(&first, &named(&[(0, 10), (0, 11)]), 1).is_empty());
        // 10 and 11 again, ahead of 12, new: 10 fails a second time (out of retries), 11 succeeds.
        let again = of(&[(0, 10), (0, 11), (0, 12)]);
        assert_eq!(retrying.answered(&again, &named(&[(0, 10), (0, 12)]), 1), named(&[(0, 10)]));
        assert_eq!(ids(&retrying.of(&[0].into(), 10)), [(0, 10), (0, 12)]);
        assert!(retrying.of(&[1].into(), 10).is_empty(), "only the poller's own partitions");
    }

    #[test]
    fn records_discarded_together_at_consecutive_offsets_make_one_invocation_record() {
        let batch = of(&[(0, 1), (0, 2), (0, 4), (0, 5), (1, 7)]);
        let exhausted = [(0, 1), (0, 2), (0, 5), (1, 7)].into_iter().collect();
        let runs: Vec<Vec<(i64, i64)>> =
            runs(&batch, &exhausted).iter().map(|run| run.iter().map(|r| (r.partition, r.offset)).collect()).collect();
        assert_eq!(runs, [vec![(0, 1), (0, 2)], vec![(0, 5)], vec![(1, 7)]]);
    }

    #[test]
    fn a_discarded_range_replays_across_offsets_no_consumer_is_handed() {
        assert!(whole_range(&at(&[4, 5, 6]), 4, 6));
        // A commit marker at 5: the range is whole.
        assert!(whole_range(&at(&[4, 6]), 4, 6));
        assert!(whole_range(&at(&[4]), 4, 4));
    }

    #[test]
    fn a_discarded_range_the_broker_no_longer_holds_is_kept() {
        assert!(!whole_range(&at(&[]), 4, 6));
        // Retention took the start, or the read stopped short of the end.
        assert!(!whole_range(&at(&[5, 6]), 4, 6));
        assert!(!whole_range(&at(&[4, 5]), 4, 6));
    }
}
