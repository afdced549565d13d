//! What the two stream mappings (DynamoDB Streams, [`super::stream`]; Kinesis,
//! [`super::kinesis`]) share: per shard a checkpoint, parents read to their end before their
//! children, and a failing batch retried, bisected, aged and discarded to the on-failure
//! destination as Lambda documents for both
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html>; partial
//! batch responses: `services-ddb-batchfailurereporting`, `services-kinesis-batchfailurereporting`).
//! A source says only how it lists shards, reads records, builds its event and names its batch
//! info (`Source`).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::error::{Result, ResultExt};
use crate::resources::{Clients, MappingSettings};

/// The settings of a stream mapping that decide what a failure costs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Records per invocation (`BatchSize`).
    pub batch_size: i32,
    /// `MaximumRetryAttempts`: failed invocations of a batch after the first, before it is
    /// discarded; `u32::MAX` (the template's -1) retries until the record is too old.
    pub max_retries: u32,
    /// `MaximumRecordAgeInSeconds`: older records are discarded unseen; `None` for no limit.
    pub max_record_age_seconds: Option<u64>,
    /// `BisectBatchOnFunctionError`: a batch that fails as a whole is split in two.
    pub bisect_on_error: bool,
    /// `FunctionResponseTypes` holds `ReportBatchItemFailures`: the answer's failures are read.
    pub report_batch_item_failures: bool,
    /// The on-failure destination (an SQS queue): one invocation record per discarded batch.
    /// `None` discards silently, as a mapping without a `DestinationConfig`.
    pub failures_url: Option<String>,
    /// Named in the on-failure record's `requestContext.functionArn`.
    pub function_arn: String,
    /// The clock record ages are measured with; tests move it instead of waiting a day.
    pub clock: fn() -> SystemTime,
}

impl Settings {
    /// The settings `mapping` gives (a template's, or a default of [`MappingSettings`]);
    /// discarded batches go to `failures_url`.
    pub fn new(mapping: &MappingSettings, failures_url: Option<String>) -> Self {
        Settings {
            batch_size: mapping.batch_size,
            max_retries: mapping.maximum_retry_attempts.unwrap_or(u32::MAX),
            max_record_age_seconds: mapping.maximum_record_age_seconds,
            bisect_on_error: mapping.bisect_batch_on_function_error,
            report_batch_item_failures: mapping.report_batch_item_failures,
            failures_url,
            function_arn: "arn:aws:lambda:us-east-1:000000000000:function:local".into(),
            clock: SystemTime::now,
        }
    }

    fn now(&self) -> Duration {
        (self.clock)().duration_since(UNIX_EPOCH).unwrap_or_default()
    }
}

/// What a stream poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamPoll {
    /// Records handed to the function.
    pub delivered: usize,
    /// Invocations that reported a failure or failed (their checkpoint stays at it).
    pub failed_batches: usize,
    /// Records discarded to the on-failure destination: retries exhausted, or too old.
    pub given_up: usize,
}

impl std::ops::AddAssign for StreamPoll {
    fn add_assign(&mut self, other: StreamPoll) {
        self.delivered += other.delivered;
        self.failed_batches += other.failed_batches;
        self.given_up += other.given_up;
    }
}

/// Where a shard is read from next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resume {
    At(String),
    After(String),
}

/// A place in a stream to read from: a shard, from its start (`resume` `None`) or a sequence
/// number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Position<'a> {
    pub stream_arn: &'a str,
    pub shard: &'a str,
    pub resume: Option<&'a Resume>,
}

impl Position<'_> {
    /// The `ShardIteratorType` (the same names in both APIs) and sequence number to ask for.
    pub(crate) fn iterator(&self) -> (&'static str, Option<String>) {
        match self.resume {
            None => ("TRIM_HORIZON", None),
            Some(Resume::At(seq)) => ("AT_SEQUENCE_NUMBER", Some(seq.clone())),
            Some(Resume::After(seq)) => ("AFTER_SEQUENCE_NUMBER", Some(seq.clone())),
        }
    }
}

/// A shard as its stream lists it.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub id: String,
    /// The shard (two after a merge) it was split or merged from.
    pub parents: Vec<String>,
    /// Closed by a split or a merge: nothing is added to it any more.
    pub closed: bool,
}

/// One record as read from a shard: the source's event record and what the mapping needs of it.
pub(crate) struct Read<R> {
    pub record: R,
    pub sequence: String,
    /// `ApproximateArrivalTimestamp` / `ApproximateCreationDateTime`, in ms.
    pub arrival_ms: Option<i64>,
}

/// A stream as a mapping reads it; only this differs between DynamoDB Streams and Kinesis.
pub(crate) trait Source {
    /// A record in the function's event.
    type Record: Clone;
    /// The on-failure record's key for the batch (`DDBStreamBatchInfo`, `KinesisBatchInfo`).
    const BATCH_INFO: &'static str;

    /// Whether the mapping's filter lets the record through to the function.
    fn passes(&self, _record: &Self::Record) -> bool {
        true
    }

    /// Up to `limit` records from `from`.
    async fn read(&self, clients: &Clients, from: Position<'_>, limit: i32) -> Result<Vec<Read<Self::Record>>>;

    /// One invocation with `records`; `Ok` holds the `itemIdentifier`s the answer reported failed.
    async fn invoke(&self, records: Vec<Self::Record>) -> Result<Vec<Option<String>>>;
}

/// A stream as a mapping polls it: where, and with which settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stream<'a> {
    pub clients: &'a Clients,
    pub settings: &'a Settings,
    pub arn: &'a str,
}

/// The checkpoint of every shard of a stream.
#[derive(Debug, Clone, Default)]
pub(crate) struct Checkpoints(HashMap<String, Shard>);

impl Checkpoints {
    /// One batch per shard from its checkpoint, in `listed` order (parents first). A child waits
    /// until each parent it has on the list is closed and read to its end: "Lambda processes
    /// the parent shard before the children" (resharding in
    /// <https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html>).
    pub(crate) async fn poll<S: Source>(
        &mut self,
        stream: Stream<'_>,
        source: &S,
        listed: &[Listed],
    ) -> Result<StreamPoll> {
        let mut poll = StreamPoll::default();
        let mut done: Vec<&str> = Vec::new();
        for shard in listed {
            let waiting =
                shard.parents.iter().any(|p| listed.iter().any(|l| &l.id == p) && !done.contains(&p.as_str()));
            if waiting {
                continue;
            }
            let id = &shard.id;
            let mut state = self.0.remove(id).unwrap_or_else(|| Shard { id: id.clone(), ..Shard::default() });
            stream.arn.clone_into(&mut state.stream_arn);
            // Boxed: the function's future nests inside this one, and the CLI's whole future
            // (command, emulator, mapping, function, driver) is otherwise too deep to lay out.
            let result = Box::pin(ShardPoller { stream, source }.poll(&mut state)).await;
            let caught_up = state.caught_up;
            self.0.insert(id.clone(), state);
            poll += result?;
            if shard.closed && caught_up {
                done.push(id);
            }
        }
        Ok(poll)
    }
}

impl Checkpoints {
    /// Where `shard` is read from next; `None` before its first record is passed.
    pub(crate) fn resume(&self, shard: &str) -> Option<&Resume> {
        self.0.get(shard).and_then(|s| s.resume.as_ref())
    }
}

/// Where a shard is read from next, and what its current batch has been through.
#[derive(Debug, Clone, Default)]
struct Shard {
    id: String,
    stream_arn: String,
    resume: Option<Resume>,
    /// Sizes of the sub-batches bisection left to deliver, the next one last. Empty: whole
    /// batches of `batch_size`.
    pending: Vec<usize>,
    /// Failures counted against `MaximumRetryAttempts` at this checkpoint.
    retries: u32,
    /// Invocations at this checkpoint (the record's `approximateInvokeCount`).
    invocations: u32,
    /// The last invocation ended in a function error (the record's `functionError`).
    function_error: bool,
    /// The last read found nothing behind the checkpoint.
    caught_up: bool,
}

impl Shard {
    /// The checkpoint moved on: the next batch starts afresh.
    fn advance(&mut self, resume: Resume) {
        self.resume = Some(resume);
        self.retries = 0;
        self.invocations = 0;
        self.function_error = false;
    }

    /// The answer reported the record at `i` failed first. "Lambda retries all records starting
    /// from that checkpoint"; with bisection on, "the batch is bisected at the returned sequence
    /// number and Lambda retries only the remaining records".
    fn failed_at(&mut self, i: usize, sequences: &[String], bisect: bool) {
        let remaining = sequences.len() - i;
        if bisect {
            match self.pending.last_mut() {
                Some(top) => *top = remaining,
                None => self.pending.push(remaining),
            }
        }
        if i > 0 {
            // The records before it are checkpointed; the failed one has failed once.
            self.advance(Resume::At(sequences[i].clone()));
            self.invocations = 1;
        }
        self.retries += 1;
    }

    /// The batch of `len` records failed as a whole. "If your invocation fails and
    /// BisectBatchOnFunctionError is turned on, the batch is bisected regardless of your
    /// ReportBatchItemFailures setting"; an answer Lambda rejects fails the batch the same way.
    /// "Splitting a batch does not count towards the retry quota": true when it was split.
    fn failed_whole(&mut self, len: usize, bisect: bool) -> bool {
        if bisect && len > 1 {
            let first = len.div_ceil(2);
            self.pending.pop();
            self.pending.push(len - first);
            self.pending.push(first);
            return true;
        }
        self.retries += 1;
        false
    }
}

/// How an invocation of a stream batch ended, as Lambda reads the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Every record succeeded: "an empty or null batchItemFailures list, an empty or null
    /// EventResponse" is complete success.
    Success,
    /// Records before this index succeeded. "If the batchItemFailures array contains multiple
    /// items, Lambda uses the record with the lowest sequence number as the checkpoint."
    Partial(usize),
    /// The batch failed as a whole: a function error, or an answer naming an empty, null or
    /// badly keyed `itemIdentifier` ("Lambda treats a batch as a complete failure"), or one not
    /// in the batch. `function_error` tells the two apart for bisection and the record.
    Failed { function_error: bool },
}

fn outcome(sequences: &[String], answer: &Result<Vec<Option<String>>>, report: bool) -> Outcome {
    let failures = match answer {
        Err(_) => return Outcome::Failed { function_error: true },
        // Without ReportBatchItemFailures the answer is not read.
        Ok(_) if !report => return Outcome::Success,
        Ok(failures) => failures,
    };
    let mut lowest: Option<usize> = None;
    for id in failures {
        let Some(i) = id.as_deref().and_then(|id| sequences.iter().position(|s| s == id)) else {
            return Outcome::Failed { function_error: false };
        };
        // Records are in sequence order within a shard: the lowest sequence number is the
        // earliest position.
        lowest = Some(lowest.map_or(i, |l| l.min(i)));
    }
    lowest.map_or(Outcome::Success, Outcome::Partial)
}

/// Why records were discarded: the on-failure record's `requestContext.condition`.
#[derive(Debug, Clone, Copy)]
enum Condition {
    RetryAttemptsExhausted,
    RecordAgeExceeded,
}

/// The mapping at work on one shard.
struct ShardPoller<'a, S> {
    stream: Stream<'a>,
    source: &'a S,
}

impl<S: Source> ShardPoller<'_, S> {
    /// Reads from the shard's checkpoint until one invocation is made or the shard has nothing
    /// left: records the filter passes over and records too old are passed without one.
    async fn poll(&self, shard: &mut Shard) -> Result<StreamPoll> {
        let settings = self.stream.settings;
        let mut given_up = 0;
        loop {
            let from = Position { stream_arn: &shard.stream_arn, shard: &shard.id, resume: shard.resume.as_ref() };
            let records = self.source.read(self.stream.clients, from, settings.batch_size).await?;
            shard.caught_up = records.is_empty();
            let Some(last) = records.last().map(|r| r.sequence.clone()) else {
                return Ok(StreamPoll { given_up, ..StreamPoll::default() });
            };
            let mut candidates: Vec<Read<S::Record>> =
                records.into_iter().filter(|r| self.source.passes(&r.record)).collect();
            if candidates.is_empty() {
                // Everything filtered out: the checkpoint passes it without an invocation.
                shard.advance(Resume::After(last));
                continue;
            }
            // A bisected batch delivers its halves one after the other before whole batches resume.
            let size = shard.pending.last().copied().unwrap_or(settings.batch_size.max(1) as usize);
            candidates.truncate(size);
            let expired = self.expired(&candidates);
            if expired == 0 {
                let poll = self.invoke(shard, candidates).await?;
                return Ok(StreamPoll { given_up: given_up + poll.given_up, ..poll });
            }
            // "MaximumRecordAgeInSeconds: discard records older than the specified age": they are
            // not sent to the function, and the destination hears of them.
            self.discard(shard, &candidates[..expired], Condition::RecordAgeExceeded).await?;
            given_up += expired;
            shard.pending.clear();
            shard.advance(Resume::After(candidates[expired - 1].sequence.clone()));
        }
    }

    /// How many of the first records are older than `MaximumRecordAgeInSeconds`.
    fn expired(&self, candidates: &[Read<S::Record>]) -> usize {
        let settings = self.stream.settings;
        let Some(max_age) = settings.max_record_age_seconds else { return 0 };
        let now = settings.now().as_millis() as i64;
        let max_age = max_age as i64 * 1000;
        candidates.iter().take_while(|r| r.arrival_ms.is_some_and(|c| now - c > max_age)).count()
    }

    /// One invocation with `candidates`, and the checkpoint moved (or held) as its answer says.
    async fn invoke(&self, shard: &mut Shard, mut candidates: Vec<Read<S::Record>>) -> Result<StreamPoll> {
        let settings = self.stream.settings;
        let sequences: Vec<String> = candidates.iter().map(|r| r.sequence.clone()).collect();
        let mut poll = StreamPoll { delivered: candidates.len(), ..StreamPoll::default() };
        shard.invocations += 1;
        let answer = self.source.invoke(candidates.iter().map(|r| r.record.clone()).collect()).await;
        let outcome = outcome(&sequences, &answer, settings.report_batch_item_failures);
        shard.function_error = matches!(outcome, Outcome::Failed { function_error: true });
        let last_of_batch = sequences.last().cloned().unwrap_or_default();
        poll.failed_batches = usize::from(outcome != Outcome::Success);
        match outcome {
            Outcome::Success => {
                shard.pending.pop();
                shard.advance(Resume::After(last_of_batch));
                return Ok(poll);
            }
            Outcome::Partial(i) => {
                shard.failed_at(i, &sequences, settings.bisect_on_error);
                candidates.drain(..i);
            }
            Outcome::Failed { .. } => {
                if shard.failed_whole(candidates.len(), settings.bisect_on_error) {
                    return Ok(poll);
                }
            }
        }
        // The first invocation is not a retry: MaximumRetryAttempts = 5 allows six.
        if shard.retries > settings.max_retries {
            self.discard(shard, &candidates, Condition::RetryAttemptsExhausted).await?;
            poll.given_up += candidates.len();
            shard.pending.pop();
            shard.advance(Resume::After(last_of_batch));
        } else if shard.resume.is_none() {
            // Nothing succeeded yet on a fresh shard: retry from its first record.
            shard.resume = Some(Resume::At(sequences[0].clone()));
        }
        Ok(poll)
    }

    /// Sends the on-failure destination the invocation record Lambda sends for a discarded
    /// stream batch.
    async fn discard(&self, shard: &Shard, batch: &[Read<S::Record>], condition: Condition) -> Result<()> {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else { return Ok(()) };
        tracing::warn!(
            shard = %shard.id,
            start = %first.sequence,
            end = %last.sequence,
            records = batch.len(),
            ?condition,
            "stream batch discarded to the on-failure destination"
        );
        let Some(url) = &self.stream.settings.failures_url else { return Ok(()) };
        let record = failure_record::<S>(self.stream.settings, shard, batch, condition);
        let send = self.stream.clients.sqs.send_message().queue_url(url).message_body(record.to_string());
        send.send().await.context("on-failure destination")?;
        Ok(())
    }
}

/// The invocation record of a discarded batch: metadata, not the records, which a reader
/// fetches from the stream by sequence number while they last (shape from "Example invocation
/// record" on both sources' error pages; only the batch info's key differs).
fn failure_record<S: Source>(
    settings: &Settings,
    shard: &Shard,
    batch: &[Read<S::Record>],
    condition: Condition,
) -> Value {
    let now = settings.now();
    let arrival = |r: Option<&Read<S::Record>>| r?.arrival_ms.map(|ms| crate::time::rfc3339(ms as u64));
    let mut response_context = json!({"statusCode": 200, "executedVersion": "$LATEST"});
    if shard.function_error {
        response_context["functionError"] = json!("Unhandled");
    }
    let mut record = json!({
        "requestContext": {
            "requestId": format!("local-{}", now.as_nanos()),
            "functionArn": settings.function_arn,
            "condition": format!("{condition:?}"),
            "approximateInvokeCount": shard.invocations,
        },
        "responseContext": response_context,
        "version": "1.0",
        "timestamp": crate::time::rfc3339(now.as_millis() as u64),
    });
    record[S::BATCH_INFO] = json!({
        "shardId": shard.id,
        "startSequenceNumber": batch.first().map(|r| &r.sequence),
        "endSequenceNumber": batch.last().map(|r| &r.sequence),
        "approximateArrivalOfFirstRecord": arrival(batch.first()),
        "approximateArrivalOfLastRecord": arrival(batch.last()),
        "batchSize": batch.len(),
        "streamArn": shard.stream_arn,
    });
    record
}
