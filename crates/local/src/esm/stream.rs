//! The DynamoDB Streams event source mapping: the outbox stream is read through shard iterators
//! from a checkpoint, and a failing batch is retried, bisected, aged and discarded to the
//! on-failure destination as the template's mapping says
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>: retries, record
//! age, bisection, the on-failure destination and its record;
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>:
//! partial batch responses on a stream, the checkpoint).

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use serde_json::{json, Value};

use crate::error::{Result, ResultExt};
use crate::invoke::StreamFunction;
use crate::resources::{mapping_settings, Clients};

/// A DynamoDB Streams event source mapping and its checkpoint.
#[derive(Debug, Clone)]
pub struct StreamMapping {
    /// The table whose stream is read.
    pub table: String,
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
    /// Event names delivered; others are passed over, as the template's `FilterCriteria` has
    /// Lambda do. Empty: every name.
    pub event_names: Vec<String>,
    /// Named in the on-failure record's `requestContext.functionArn`.
    pub function_arn: String,
    /// The clock record ages are measured with; tests move it instead of waiting a day.
    pub clock: fn() -> SystemTime,
    shards: HashMap<String, Shard>,
}

impl StreamMapping {
    /// Reads `table`'s stream from its start with the template's outbox mapping (batch size,
    /// retries, record age, bisection, response types, filter); discarded batches go to
    /// `failures_url`.
    pub fn new(table: impl Into<String>, failures_url: Option<String>) -> Self {
        let settings = mapping_settings("OutboxTable").expect("infra/template.json maps the outbox stream");
        StreamMapping {
            table: table.into(),
            batch_size: settings.batch_size,
            max_retries: settings.maximum_retry_attempts.unwrap_or(u32::MAX),
            max_record_age_seconds: settings.maximum_record_age_seconds,
            bisect_on_error: settings.bisect_batch_on_function_error,
            report_batch_item_failures: settings.report_batch_item_failures,
            failures_url,
            event_names: settings.event_names,
            function_arn: "arn:aws:lambda:us-east-1:000000000000:function:receipts-relay".into(),
            clock: SystemTime::now,
            shards: HashMap::new(),
        }
    }

    fn now(&self) -> std::time::Duration {
        (self.clock)().duration_since(UNIX_EPOCH).unwrap_or_default()
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
    /// number and Lambda retries only the remaining records"
    /// (<https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>).
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
    /// "Splitting a batch does not count towards the retry quota"
    /// (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>): true when
    /// it was split.
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

#[derive(Debug, Clone, PartialEq, Eq)]
enum Resume {
    At(String),
    After(String),
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

/// How an invocation of a stream batch ended, as Lambda reads the answer
/// (<https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>).
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

fn stream_outcome(sequences: &[String], answer: &Result<DynamoDbEventResponse>, report: bool) -> Outcome {
    let response = match answer {
        Err(_) => return Outcome::Failed { function_error: true },
        // Without ReportBatchItemFailures the answer is not read.
        Ok(_) if !report => return Outcome::Success,
        Ok(response) => response,
    };
    let mut lowest: Option<usize> = None;
    for f in &response.batch_item_failures {
        let Some(i) = f.item_identifier.as_deref().and_then(|id| sequences.iter().position(|s| s == id)) else {
            return Outcome::Failed { function_error: false };
        };
        // Records are in sequence order within a shard: the lowest sequence number is the
        // earliest position.
        lowest = Some(lowest.map_or(i, |l| l.min(i)));
    }
    lowest.map_or(Outcome::Success, Outcome::Partial)
}

/// One record as read from the shard: Lambda's event shape and what the mapping needs of it.
struct Read {
    record: EventRecord,
    sequence: String,
    created_secs: Option<i64>,
}

/// Why records were discarded: the on-failure record's `requestContext.condition`.
#[derive(Debug, Clone, Copy)]
enum Condition {
    RetryAttemptsExhausted,
    RecordAgeExceeded,
}

/// One batch per shard from its checkpoint.
///
/// A failing batch is retried from the checkpoint until it succeeds, its records pass
/// `MaximumRecordAgeInSeconds`, or it has failed `MaximumRetryAttempts` times after the first;
/// then it is discarded to the on-failure destination and the shard moves on
/// (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>).
pub async fn poll_stream<F: StreamFunction>(
    clients: &Clients,
    mapping: &mut StreamMapping,
    function: &F,
) -> Result<StreamPoll> {
    let stream_arn = stream_arn(clients, &mapping.table).await?;
    let description =
        clients.streams.describe_stream().stream_arn(&stream_arn).send().await.context("describe stream")?;
    let shards: Vec<String> = description
        .stream_description()
        .map(|d| d.shards().iter().filter_map(|s| s.shard_id().map(str::to_owned)).collect())
        .unwrap_or_default();
    let mut poll = StreamPoll::default();
    for id in shards {
        let mut shard = mapping.shards.remove(&id).unwrap_or_else(|| Shard { id: id.clone(), ..Shard::default() });
        shard.stream_arn.clone_from(&stream_arn);
        let result = ShardPoller { clients, mapping, function }.poll(&mut shard).await;
        mapping.shards.insert(id, shard);
        poll += result?;
    }
    Ok(poll)
}

/// The latest stream of `table`.
async fn stream_arn(clients: &Clients, table: &str) -> Result<String> {
    let out = clients.dynamodb.describe_table().table_name(table).send().await.context("describe table")?;
    let arn = out.table().and_then(|t| t.latest_stream_arn()).map(str::to_owned);
    arn.ok_or_else(|| format!("table {table} has no stream").into())
}

/// The mapping at work on one shard.
struct ShardPoller<'a, F> {
    clients: &'a Clients,
    mapping: &'a StreamMapping,
    function: &'a F,
}

impl<F: StreamFunction> ShardPoller<'_, F> {
    /// Reads from the shard's checkpoint until one invocation is made or the shard has nothing
    /// left: records the filter passes over and records too old are passed without one.
    async fn poll(&self, shard: &mut Shard) -> Result<StreamPoll> {
        let mapping = self.mapping;
        let mut given_up = 0;
        loop {
            let records = self.read(shard).await?;
            let Some(last) = records.last().map(|r| r.sequence.clone()) else {
                return Ok(StreamPoll { given_up, ..StreamPoll::default() });
            };
            let mut candidates: Vec<Read> = records
                .into_iter()
                .filter(|r| mapping.event_names.is_empty() || mapping.event_names.contains(&r.record.event_name))
                .collect();
            if candidates.is_empty() {
                // Everything filtered out: the checkpoint passes it without an invocation.
                shard.advance(Resume::After(last));
                continue;
            }
            // A bisected batch delivers its halves one after the other before whole batches resume.
            let size = shard.pending.last().copied().unwrap_or(mapping.batch_size.max(1) as usize);
            candidates.truncate(size);
            let expired = self.expired(&candidates);
            if expired == 0 {
                let poll = self.invoke(shard, candidates).await?;
                return Ok(StreamPoll { given_up: given_up + poll.given_up, ..poll });
            }
            // "MaximumRecordAgeInSeconds: discard records older than the specified age": they are
            // not sent to the function, and the destination hears of them
            // (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>).
            self.discard(shard, &candidates[..expired], Condition::RecordAgeExceeded).await?;
            given_up += expired;
            shard.pending.clear();
            shard.advance(Resume::After(candidates[expired - 1].sequence.clone()));
        }
    }

    /// How many of the first records are older than `MaximumRecordAgeInSeconds`.
    fn expired(&self, candidates: &[Read]) -> usize {
        let Some(max_age) = self.mapping.max_record_age_seconds else { return 0 };
        let now = self.mapping.now().as_secs() as i64;
        candidates.iter().take_while(|r| r.created_secs.is_some_and(|c| now - c > max_age as i64)).count()
    }

    /// One invocation with `candidates`, and the checkpoint moved (or held) as its answer says.
    async fn invoke(&self, shard: &mut Shard, mut candidates: Vec<Read>) -> Result<StreamPoll> {
        let mapping = self.mapping;
        let sequences: Vec<String> = candidates.iter().map(|r| r.sequence.clone()).collect();
        let mut event = Event::default();
        event.records = candidates.iter().map(|r| r.record.clone()).collect();
        let mut poll = StreamPoll { delivered: candidates.len(), ..StreamPoll::default() };
        shard.invocations += 1;
        let answer = self.function.invoke(event).await;
        let outcome = stream_outcome(&sequences, &answer, mapping.report_batch_item_failures);
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
                shard.failed_at(i, &sequences, mapping.bisect_on_error);
                candidates.drain(..i);
            }
            Outcome::Failed { .. } => {
                if shard.failed_whole(candidates.len(), mapping.bisect_on_error) {
                    return Ok(poll);
                }
            }
        }
        // The first invocation is not a retry: MaximumRetryAttempts = 5 allows six.
        if shard.retries > mapping.max_retries {
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

    /// Up to `batch_size` records from the checkpoint.
    async fn read(&self, shard: &Shard) -> Result<Vec<Read>> {
        let streams = &self.clients.streams;
        let iterator = streams.get_shard_iterator().stream_arn(&shard.stream_arn).shard_id(&shard.id);
        let iterator = match &shard.resume {
            None => iterator.shard_iterator_type(ShardIteratorType::TrimHorizon),
            Some(Resume::At(seq)) => {
                iterator.shard_iterator_type(ShardIteratorType::AtSequenceNumber).sequence_number(seq)
            }
            Some(Resume::After(seq)) => {
                iterator.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).sequence_number(seq)
            }
        };
        let iterator = iterator.send().await.context("shard iterator")?;
        let Some(iterator) = iterator.shard_iterator() else { return Ok(Vec::new()) };
        let request = streams.get_records().shard_iterator(iterator).limit(self.mapping.batch_size);
        let out = request.send().await.context("get records")?;
        out.records().iter().map(|r| read(r, &shard.stream_arn)).collect()
    }

    /// Sends the on-failure destination the invocation record Lambda sends for a discarded
    /// stream batch.
    async fn discard(&self, shard: &Shard, batch: &[Read], condition: Condition) -> Result<()> {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else { return Ok(()) };
        tracing::warn!(
            shard = %shard.id,
            start = %first.sequence,
            end = %last.sequence,
            records = batch.len(),
            ?condition,
            "stream batch discarded to the on-failure destination"
        );
        let Some(url) = &self.mapping.failures_url else { return Ok(()) };
        let record = failure_record(self.mapping, shard, batch, condition);
        let send = self.clients.sqs.send_message().queue_url(url).message_body(record.to_string());
        send.send().await.context("on-failure destination")?;
        Ok(())
    }
}

/// A stream record as the mapping reads it.
fn read(r: &aws_sdk_dynamodbstreams::types::Record, stream_arn: &str) -> Result<Read> {
    let record: EventRecord = serde_json::from_value(record_json(r, stream_arn)).context("stream record")?;
    let change = r.dynamodb();
    Ok(Read {
        record,
        sequence: change.and_then(|c| c.sequence_number()).unwrap_or_default().to_owned(),
        created_secs: change.and_then(|c| c.approximate_creation_date_time()).map(|t| t.secs()),
    })
}

/// The invocation record of a discarded batch: metadata, not the records, which a reader
/// fetches from the stream by sequence number while they last (shape from "Example invocation
/// record", <https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>).
fn failure_record(mapping: &StreamMapping, shard: &Shard, batch: &[Read], condition: Condition) -> Value {
    let now = mapping.now();
    let arrival = |r: Option<&Read>| r?.created_secs.map(|s| payments::rfc3339(s as u64 * 1000));
    let mut response_context = json!({"statusCode": 200, "executedVersion": "$LATEST"});
    if shard.function_error {
        response_context["functionError"] = json!("Unhandled");
    }
    json!({
        "requestContext": {
            "requestId": format!("local-{}", now.as_nanos()),
            "functionArn": mapping.function_arn,
            "condition": format!("{condition:?}"),
            "approximateInvokeCount": shard.invocations,
        },
        "responseContext": response_context,
        "version": "1.0",
        "timestamp": payments::rfc3339(now.as_millis() as u64),
        "DDBStreamBatchInfo": {
            "shardId": shard.id,
            "startSequenceNumber": batch.first().map(|r| &r.sequence),
            "endSequenceNumber": batch.last().map(|r| &r.sequence),
            "approximateArrivalOfFirstRecord": arrival(batch.first()),
            "approximateArrivalOfLastRecord": arrival(batch.last()),
            "batchSize": batch.len(),
            "streamArn": shard.stream_arn,
        },
    })
}

/// A stream record in the shape Lambda hands to a function.
fn record_json(r: &aws_sdk_dynamodbstreams::types::Record, stream_arn: &str) -> Value {
    let change = r.dynamodb();
    // In Lambda's DynamoDB JSON, every type included (binary as base64), by serde_dynamo.
    let image = |m: Option<&HashMap<String, AttributeValue>>| -> Value {
        let item = serde_dynamo::Item::from(m.cloned().unwrap_or_default());
        serde_json::to_value(item).expect("a DynamoDB item serialises to JSON")
    };
    json!({
        "eventID": r.event_id(),
        "eventName": r.event_name().map(|n| n.as_str()).unwrap_or("INSERT"),
        "eventVersion": r.event_version().unwrap_or("1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": r.aws_region().unwrap_or("us-east-1"),
        "eventSourceARN": stream_arn,
        "dynamodb": {
            "ApproximateCreationDateTime": change.and_then(|c| c.approximate_creation_date_time()).map(|t| t.secs()).unwrap_or(0),
            "Keys": image(change.and_then(|c| c.keys())),
            "NewImage": image(change.and_then(|c| c.new_image())),
            "OldImage": image(change.and_then(|c| c.old_image())),
            "SequenceNumber": change.and_then(|c| c.sequence_number()),
            "SizeBytes": change.and_then(|c| c.size_bytes()).unwrap_or(0),
            "StreamViewType": change.and_then(|c| c.stream_view_type()).map(|v| v.as_str()).unwrap_or("NEW_IMAGE"),
        },
    })
}

/// A raw stream function answer as the mapping reads it; see [`super::sqs_response`].
pub fn stream_response(payload: &[u8]) -> Result<DynamoDbEventResponse> {
    let mut response = DynamoDbEventResponse::default();
    for id in super::sqs::item_failures(payload)? {
        let mut f = DynamoDbBatchItemFailure::default();
        f.item_identifier = id;
        response.batch_item_failures.push(f);
    }
    Ok(response)
}
