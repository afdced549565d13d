//! An event source mapping emulator that behaves as Lambda documents, not kinder: SQS is polled,
//! each batch invokes the function, only the messages the answer lets through are deleted, and
//! the rest come back after the visibility timeout until the redrive policy moves them to the
//! DLQ; the outbox stream is read through shard iterators, retried, bisected, aged and discarded
//! to the on-failure destination as the template's mapping says. The settings come from
//! `infra/template.json` ([`crate::resources::mapping_settings`]), so local and cloud agree.
//!
//! The pages each behaviour follows:
//! - SQS: <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>
//!   (partial batch responses, their success and failure conditions, FIFO);
//! - streams: <https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>
//!   (retries, record age, bisection, the on-failure destination and its record) and
//!   <https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>
//!   (partial batch responses on a stream, the checkpoint).

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName};
use serde_json::{json, Value};

use crate::invoke::{SqsFunction, StreamFunction};
use crate::resources::{mapping_settings, Clients};

/// An SQS event source mapping.
#[derive(Debug, Clone)]
pub struct SqsMapping {
    /// The queue.
    pub queue_url: String,
    /// Messages per invocation (the template's `BatchSize`).
    pub batch_size: i32,
    /// How long a received message stays invisible; a failed one returns after it.
    pub visibility_timeout: i32,
    /// Long-poll wait. 0 against the local AWS: it serves one request at a time, so a long poll
    /// would hold every other request back while it waits; the emulator sleeps between empty
    /// polls instead.
    pub wait_seconds: i32,
    /// The template's `FunctionResponseTypes` holds `ReportBatchItemFailures`. Without it Lambda
    /// ignores the answer's `batchItemFailures`: a batch succeeds or fails as a whole.
    pub report_batch_item_failures: bool,
    arn: std::sync::OnceLock<String>,
}

impl SqsMapping {
    /// The template's payments mapping (batch size, response types), with a 2 s visibility
    /// timeout (redelivery within the demo) and short polls.
    pub fn new(queue_url: impl Into<String>) -> Self {
        let settings = mapping_settings("PaymentsQueue").expect("infra/template.json maps the payments queue");
        SqsMapping {
            queue_url: queue_url.into(),
            batch_size: settings.batch_size,
            visibility_timeout: 2,
            wait_seconds: 0,
            report_batch_item_failures: settings.report_batch_item_failures,
            arn: std::sync::OnceLock::new(),
        }
    }
}

/// What an SQS poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SqsPoll {
    /// Messages received (deliveries).
    pub received: usize,
    /// Messages left for redelivery: those reported failed, or the whole batch when it failed.
    pub failed: usize,
    /// Invocations that failed as a whole (a function error, or an answer Lambda rejects).
    pub failed_batches: usize,
}

/// Which messages of a batch stay on the queue after an invocation, as Lambda decides it
/// (<https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>, "Success
/// and failure conditions"): `None` for the whole batch, else the reported ones.
///
/// - an invocation error (the function threw, crashed, timed out, or answered with invalid
///   JSON) fails the whole batch: "If your function throws an exception, the entire batch is
///   considered a complete failure";
/// - without `ReportBatchItemFailures` the answer is not read: success is the whole batch;
/// - an empty or null `batchItemFailures` list, or an empty or null answer, is complete success;
/// - an empty or null `itemIdentifier`, a bad key name, or "an itemIdentifier value with a
///   message ID that doesn't exist" in the batch is complete failure.
fn sqs_failed(ids: &[&str], answer: &Result<SqsBatchResponse, String>, report: bool) -> Result<Vec<String>, String> {
    let response = match answer {
        Err(e) => return Err(format!("invocation failed: {e}")),
        Ok(_) if !report => return Ok(Vec::new()),
        Ok(response) => response,
    };
    let mut failed = Vec::new();
    for f in &response.batch_item_failures {
        let id = f.item_identifier.as_str();
        if id.is_empty() {
            return Err("batchItemFailures holds an empty itemIdentifier".into());
        }
        if !ids.contains(&id) {
            return Err(format!("batchItemFailures names {id}, not a message of the batch"));
        }
        failed.push(id.to_owned());
    }
    Ok(failed)
}

/// One receive, one invocation, one delete of what the answer lets through.
///
/// FIFO queues take the same path: Lambda deletes what the answer does not name, so keeping a
/// message group in order is the function's work ("your function should stop processing
/// messages after the first failure and return all failed and unprocessed messages in
/// batchItemFailures", <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>);
/// the effectively-once-lambda crate's driver does it.
/// Meanwhile SQS itself holds back a group's later messages while one of it is in flight.
pub async fn poll_sqs<F: SqsFunction>(
    clients: &Clients,
    mapping: &SqsMapping,
    function: &F,
) -> Result<SqsPoll, String> {
    let out = clients
        .sqs
        .receive_message()
        .queue_url(&mapping.queue_url)
        .max_number_of_messages(mapping.batch_size)
        .visibility_timeout(mapping.visibility_timeout)
        .wait_time_seconds(mapping.wait_seconds)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .map_err(|e| format!("receive: {}", e.into_service_error()))?;
    let messages = out.messages();
    if messages.is_empty() {
        return Ok(SqsPoll::default());
    }
    // The ARN once per mapping: GetQueueAttributes costs time in proportion to the queue's depth
    // on the local AWS.
    let arn = match mapping.arn.get() {
        Some(arn) => arn.clone(),
        None => {
            let arn = crate::resources::queue_arn(&clients.sqs, &mapping.queue_url).await?;
            mapping.arn.get_or_init(|| arn).clone()
        }
    };
    let event = sqs_event(messages, &arn);
    let ids: Vec<&str> = messages.iter().map(|m| m.message_id().unwrap_or("")).collect();
    let answer = function.invoke(event).await;
    let (failed, whole): (Vec<&str>, bool) = match sqs_failed(&ids, &answer, mapping.report_batch_item_failures) {
        Ok(failed) => (ids.iter().copied().filter(|id| failed.iter().any(|f| f == id)).collect(), false),
        Err(reason) => {
            // Nothing is deleted: every message returns after the visibility timeout, its receive
            // count raised, and may reach the DLQ. Message ids only: no payload in the log.
            tracing::warn!(queue = %mapping.queue_url, messages = ids.len(), %reason, "the whole batch failed");
            (ids.clone(), true)
        }
    };
    // Ack only what succeeded: the rest reappears after the visibility timeout.
    let entries: Vec<DeleteMessageBatchRequestEntry> = messages
        .iter()
        .filter(|m| !failed.contains(&m.message_id().unwrap_or("")))
        .enumerate()
        .map(|(i, m)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .build()
                .expect("id and receipt handle are set")
        })
        .collect();
    if !entries.is_empty() {
        clients
            .sqs
            .delete_message_batch()
            .queue_url(&mapping.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| format!("delete: {}", e.into_service_error()))?;
    }
    Ok(SqsPoll { received: messages.len(), failed: failed.len(), failed_batches: usize::from(whole) })
}

/// The `batchItemFailures` of a raw answer, as Lambda reads one: `null`, `{}` and a null list
/// are success; an entry without a string `itemIdentifier` (null, or a bad key name) is kept as
/// a null identifier, which fails the whole batch; anything but JSON `null` or an object is an
/// invalid response, a complete failure
/// (<https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>).
fn item_failures(payload: &[u8]) -> Result<Vec<Option<String>>, String> {
    let value: Value = serde_json::from_slice(payload).map_err(|e| format!("the answer is not JSON: {e}"))?;
    let list = match &value {
        Value::Null => return Ok(Vec::new()),
        Value::Object(o) => o.get("batchItemFailures").unwrap_or(&Value::Null),
        _ => return Err("the answer is not a batch response object".into()),
    };
    match list {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => {
            Ok(items.iter().map(|i| i.get("itemIdentifier").and_then(Value::as_str).map(str::to_owned)).collect())
        }
        _ => Err("batchItemFailures is not a list".into()),
    }
}

/// The Lambda event an SQS event source mapping builds from received `messages` of the queue
/// `arn` (their ids, receipt handles, bodies and system attributes, FIFO group included).
pub fn sqs_event(messages: &[aws_sdk_sqs::types::Message], arn: &str) -> SqsEvent {
    let mut event = SqsEvent::default();
    for m in messages {
        let mut record = SqsMessage::default();
        record.message_id = m.message_id().map(str::to_owned);
        record.receipt_handle = m.receipt_handle().map(str::to_owned);
        record.body = m.body().map(str::to_owned);
        record.md5_of_body = m.md5_of_body().map(str::to_owned);
        record.attributes = m
            .attributes()
            .map(|a| a.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect())
            .unwrap_or_default();
        record.event_source = Some("aws:sqs".into());
        record.event_source_arn = Some(arn.to_owned());
        record.aws_region = Some("us-east-1".into());
        event.records.push(record);
    }
    event
}

/// A raw SQS function answer (from an invoke endpoint) as the mapping reads it; `Err` is an
/// invalid response, which fails the whole batch. A null identifier becomes an empty one, which
/// fails it too.
pub fn sqs_response(payload: &[u8]) -> Result<SqsBatchResponse, String> {
    let mut response = SqsBatchResponse::default();
    for id in item_failures(payload)? {
        let mut f = BatchItemFailure::default();
        f.item_identifier = id.unwrap_or_default();
        response.batch_item_failures.push(f);
    }
    Ok(response)
}

/// A raw stream function answer as the mapping reads it; see [`sqs_response`].
pub fn stream_response(payload: &[u8]) -> Result<DynamoDbEventResponse, String> {
    let mut response = DynamoDbEventResponse::default();
    for id in item_failures(payload)? {
        let mut f = DynamoDbBatchItemFailure::default();
        f.item_identifier = id;
        response.batch_item_failures.push(f);
    }
    Ok(response)
}

/// Messages in a queue, visible and in flight.
pub async fn queue_depth(clients: &Clients, queue_url: &str) -> Result<u64, String> {
    let out = clients
        .sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| format!("queue attributes: {}", e.into_service_error()))?;
    let attrs = out.attributes().cloned().unwrap_or_default();
    let n = |k: QueueAttributeName| attrs.get(&k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok(n(QueueAttributeName::ApproximateNumberOfMessages)
        + n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible))
}

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

/// Where a shard is read from next, and what its current batch has been through.
#[derive(Debug, Clone, Default)]
struct Shard {
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Resume {
    At(String),
    After(String),
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

fn stream_outcome(sequences: &[String], answer: &Result<DynamoDbEventResponse, String>, report: bool) -> Outcome {
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
) -> Result<StreamPoll, String> {
    let table = clients
        .dynamodb
        .describe_table()
        .table_name(&mapping.table)
        .send()
        .await
        .map_err(|e| format!("describe table: {}", e.into_service_error()))?;
    let Some(stream_arn) = table.table().and_then(|t| t.latest_stream_arn()).map(str::to_owned) else {
        return Err(format!("table {} has no stream", mapping.table));
    };
    let description = clients
        .streams
        .describe_stream()
        .stream_arn(&stream_arn)
        .send()
        .await
        .map_err(|e| format!("describe stream: {}", e.into_service_error()))?;
    let shards: Vec<String> = description
        .stream_description()
        .map(|d| d.shards().iter().filter_map(|s| s.shard_id().map(str::to_owned)).collect())
        .unwrap_or_default();
    let mut poll = StreamPoll::default();
    for shard_id in shards {
        let mut shard = mapping.shards.remove(&shard_id).unwrap_or_default();
        let result = poll_shard(clients, mapping, function, &stream_arn, &shard_id, &mut shard, &mut poll).await;
        mapping.shards.insert(shard_id, shard);
        result?;
    }
    Ok(poll)
}

/// Reads from the shard's checkpoint until one invocation is made or the shard has nothing
/// left: records the filter passes over and records too old are passed without one.
#[allow(clippy::too_many_arguments)]
async fn poll_shard<F: StreamFunction>(
    clients: &Clients,
    mapping: &StreamMapping,
    function: &F,
    stream_arn: &str,
    shard_id: &str,
    shard: &mut Shard,
    poll: &mut StreamPoll,
) -> Result<(), String> {
    loop {
        let records = read_shard(clients, mapping, stream_arn, shard_id, shard.resume.as_ref()).await?;
        let Some(last) = records.last().map(|r| r.sequence.clone()) else { return Ok(()) };
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
        // "MaximumRecordAgeInSeconds: discard records older than the specified age": they are
        // not sent to the function, and the destination hears of them
        // (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>).
        if let Some(max_age) = mapping.max_record_age_seconds {
            let now = (mapping.clock)().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
            let expired =
                candidates.iter().take_while(|r| r.created_secs.is_some_and(|c| now - c > max_age as i64)).count();
            if expired > 0 {
                discard(
                    clients,
                    mapping,
                    stream_arn,
                    shard_id,
                    &candidates[..expired],
                    shard,
                    Condition::RecordAgeExceeded,
                )
                .await?;
                poll.given_up += expired;
                shard.pending.clear();
                shard.advance(Resume::After(candidates[expired - 1].sequence.clone()));
                continue;
            }
        }
        let sequences: Vec<String> = candidates.iter().map(|r| r.sequence.clone()).collect();
        let mut event = Event::default();
        event.records = candidates.iter().map(|r| r.record.clone()).collect();
        poll.delivered += candidates.len();
        shard.invocations += 1;
        let answer = function.invoke(event).await;
        let outcome = stream_outcome(&sequences, &answer, mapping.report_batch_item_failures);
        shard.function_error = matches!(outcome, Outcome::Failed { function_error: true });
        let last_of_batch = sequences.last().cloned().unwrap_or_default();
        match outcome {
            Outcome::Success => {
                shard.pending.pop();
                shard.advance(Resume::After(last_of_batch));
                return Ok(());
            }
            Outcome::Partial(i) => {
                poll.failed_batches += 1;
                // "Lambda retries all records starting from that checkpoint"; with bisection on,
                // "the batch is bisected at the returned sequence number and Lambda retries
                // only the remaining records"
                // (<https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>).
                let remaining = candidates.len() - i;
                if mapping.bisect_on_error {
                    match shard.pending.last_mut() {
                        Some(top) => *top = remaining,
                        None => shard.pending.push(remaining),
                    }
                }
                if i > 0 {
                    // The records before it are checkpointed; the failed one has failed once.
                    shard.advance(Resume::At(sequences[i].clone()));
                    shard.invocations = 1;
                }
                shard.retries += 1;
                candidates.drain(..i);
            }
            Outcome::Failed { .. } => {
                poll.failed_batches += 1;
                // "If your invocation fails and BisectBatchOnFunctionError is turned on, the
                // batch is bisected regardless of your ReportBatchItemFailures setting"; an
                // answer Lambda rejects fails the batch the same way. "Splitting a batch does
                // not count towards the retry quota"
                // (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>).
                if mapping.bisect_on_error && candidates.len() > 1 {
                    let first = candidates.len().div_ceil(2);
                    shard.pending.pop();
                    shard.pending.push(candidates.len() - first);
                    shard.pending.push(first);
                    return Ok(());
                }
                shard.retries += 1;
            }
        }
        // The first invocation is not a retry: MaximumRetryAttempts = 5 allows six.
        if shard.retries > mapping.max_retries {
            discard(clients, mapping, stream_arn, shard_id, &candidates, shard, Condition::RetryAttemptsExhausted)
                .await?;
            poll.given_up += candidates.len();
            shard.pending.pop();
            shard.advance(Resume::After(last_of_batch));
        } else if shard.resume.is_none() {
            // Nothing succeeded yet on a fresh shard: retry from its first record.
            shard.resume = Some(Resume::At(sequences[0].clone()));
        }
        return Ok(());
    }
}

/// Up to `batch_size` records from the checkpoint.
async fn read_shard(
    clients: &Clients,
    mapping: &StreamMapping,
    stream_arn: &str,
    shard_id: &str,
    resume: Option<&Resume>,
) -> Result<Vec<Read>, String> {
    let mut iterator = clients.streams.get_shard_iterator().stream_arn(stream_arn).shard_id(shard_id);
    iterator = match resume {
        None => iterator.shard_iterator_type(ShardIteratorType::TrimHorizon),
        Some(Resume::At(seq)) => iterator.shard_iterator_type(ShardIteratorType::AtSequenceNumber).sequence_number(seq),
        Some(Resume::After(seq)) => {
            iterator.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).sequence_number(seq)
        }
    };
    let iterator = iterator.send().await.map_err(|e| format!("shard iterator: {}", e.into_service_error()))?;
    let Some(iterator) = iterator.shard_iterator() else { return Ok(Vec::new()) };
    let out = clients
        .streams
        .get_records()
        .shard_iterator(iterator)
        .limit(mapping.batch_size)
        .send()
        .await
        .map_err(|e| format!("get records: {}", e.into_service_error()))?;
    out.records()
        .iter()
        .map(|r| {
            let record: EventRecord =
                serde_json::from_value(record_json(r, stream_arn)).map_err(|e| format!("stream record: {e}"))?;
            let change = r.dynamodb();
            Ok(Read {
                record,
                sequence: change.and_then(|c| c.sequence_number()).unwrap_or_default().to_owned(),
                created_secs: change.and_then(|c| c.approximate_creation_date_time()).map(|t| t.secs()),
            })
        })
        .collect()
}

/// Sends the on-failure destination the invocation record Lambda sends for a discarded stream
/// batch: metadata, not the records, which a reader fetches from the stream by sequence number
/// while they last (shape from "Example invocation record",
/// <https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>).
async fn discard(
    clients: &Clients,
    mapping: &StreamMapping,
    stream_arn: &str,
    shard_id: &str,
    batch: &[Read],
    shard: &Shard,
    condition: Condition,
) -> Result<(), String> {
    let (Some(first), Some(last)) = (batch.first(), batch.last()) else { return Ok(()) };
    tracing::warn!(
        shard = shard_id,
        start = %first.sequence,
        end = %last.sequence,
        records = batch.len(),
        ?condition,
        "stream batch discarded to the on-failure destination"
    );
    let Some(url) = &mapping.failures_url else { return Ok(()) };
    let now = (mapping.clock)().duration_since(UNIX_EPOCH).unwrap_or_default();
    let arrival = |r: &Read| r.created_secs.map(|s| effectively_once_effects::rfc3339(s as u64 * 1000));
    let mut response_context = json!({"statusCode": 200, "executedVersion": "$LATEST"});
    if shard.function_error {
        response_context["functionError"] = json!("Unhandled");
    }
    let record = json!({
        "requestContext": {
            "requestId": format!("local-{}", now.as_nanos()),
            "functionArn": mapping.function_arn,
            "condition": format!("{condition:?}"),
            "approximateInvokeCount": shard.invocations,
        },
        "responseContext": response_context,
        "version": "1.0",
        "timestamp": effectively_once_effects::rfc3339(now.as_millis() as u64),
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": first.sequence,
            "endSequenceNumber": last.sequence,
            "approximateArrivalOfFirstRecord": arrival(first),
            "approximateArrivalOfLastRecord": arrival(last),
            "batchSize": batch.len(),
            "streamArn": stream_arn,
        },
    });
    clients
        .sqs
        .send_message()
        .queue_url(url)
        .message_body(record.to_string())
        .send()
        .await
        .map_err(|e| format!("on-failure destination: {}", e.into_service_error()))?;
    Ok(())
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

/// Progress of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// SQS deliveries so far.
    pub deliveries: usize,
    /// SQS messages reported failed so far.
    pub failed: usize,
    /// Stream records delivered so far.
    pub stream_records: usize,
}

/// Runs `pollers` concurrent SQS pollers and the stream poller until the queue is empty and the
/// stream has nothing new, twice in a row. `on_progress` sees the totals after each round.
pub async fn run_until_drained<P: SqsFunction, R: StreamFunction>(
    clients: &Clients,
    sqs: &SqsMapping,
    stream: &mut StreamMapping,
    payments: &P,
    relay: &R,
    pollers: usize,
    on_progress: impl FnMut(Progress),
) -> Result<Progress, String> {
    run_fed(clients, sqs, stream, payments, relay, pollers, &mut Feed::default(), on_progress).await
}

/// Messages a producer sends while the consumers run, a few per round, so the queue holds what
/// a live one would rather than the whole workload at once.
#[derive(Debug, Clone, Default)]
pub struct Feed {
    bodies: Vec<String>,
    next: usize,
    per_round: usize,
}

impl Feed {
    /// Sends `per_round` of `bodies` before each round.
    pub fn new(bodies: Vec<String>, per_round: usize) -> Self {
        Feed { bodies, next: 0, per_round: per_round.max(1) }
    }

    fn is_done(&self) -> bool {
        self.next >= self.bodies.len()
    }
}

/// [`run_until_drained`], with a producer sending `feed` as it goes.
#[allow(clippy::too_many_arguments)]
pub async fn run_fed<P: SqsFunction, R: StreamFunction>(
    clients: &Clients,
    sqs: &SqsMapping,
    stream: &mut StreamMapping,
    payments: &P,
    relay: &R,
    pollers: usize,
    feed: &mut Feed,
    mut on_progress: impl FnMut(Progress),
) -> Result<Progress, String> {
    let mut progress = Progress::default();
    let mut idle = 0;
    while idle < 2 {
        if !feed.is_done() {
            let end = (feed.next + feed.per_round).min(feed.bodies.len());
            crate::workload::send(&clients.sqs, &sqs.queue_url, &feed.bodies[feed.next..end]).await?;
            feed.next = end;
        }
        let polls = futures_util::future::join_all((0..pollers.max(1)).map(|_| poll_sqs(clients, sqs, payments))).await;
        let mut received = 0;
        for poll in polls {
            let poll = poll?;
            received += poll.received;
            progress.deliveries += poll.received;
            progress.failed += poll.failed;
        }
        let streamed = poll_stream(clients, stream, relay).await?;
        progress.stream_records += streamed.delivered;
        on_progress(progress);
        // The depth is asked only when a round found nothing: on the local AWS it costs time in
        // proportion to the queue.
        let busy = received > 0
            || streamed.delivered > 0
            || !feed.is_done()
            || queue_depth(clients, &sqs.queue_url).await? > 0;
        idle = if busy { 0 } else { idle + 1 };
        if received == 0 {
            // Nothing visible: messages in flight come back after their visibility timeout.
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
    Ok(progress)
}

/// Moves every message of `dlq_url` back to `queue_url`, as after a bug fix. Harmless: every
/// effect is keyed, so what was applied is not applied again. Returns how many moved.
pub async fn redrive(clients: &Clients, dlq_url: &str, queue_url: &str) -> Result<usize, String> {
    let mut moved = 0;
    loop {
        let out = clients
            .sqs
            .receive_message()
            .queue_url(dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .send()
            .await
            .map_err(|e| format!("receive from the DLQ: {}", e.into_service_error()))?;
        if out.messages().is_empty() {
            return Ok(moved);
        }
        for m in out.messages() {
            clients
                .sqs
                .send_message()
                .queue_url(queue_url)
                .message_body(m.body().unwrap_or_default())
                .send()
                .await
                .map_err(|e| format!("redrive send: {}", e.into_service_error()))?;
            clients
                .sqs
                .delete_message()
                .queue_url(dlq_url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .map_err(|e| format!("redrive delete: {}", e.into_service_error()))?;
            moved += 1;
        }
    }
}

/// Every message body in a queue, left in place: received, then made visible again at once.
pub async fn peek_bodies(clients: &Clients, queue_url: &str) -> Result<Vec<String>, String> {
    let mut bodies = Vec::new();
    let mut handles = Vec::new();
    let mut seen = std::collections::HashSet::new();
    loop {
        let out = clients
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .send()
            .await
            .map_err(|e| format!("receive: {}", e.into_service_error()))?;
        let fresh: Vec<_> =
            out.messages().iter().filter(|m| seen.insert(m.message_id().unwrap_or("").to_owned())).collect();
        if fresh.is_empty() {
            break;
        }
        for m in fresh {
            bodies.push(m.body().unwrap_or_default().to_owned());
            handles.push(m.receipt_handle().unwrap_or_default().to_owned());
        }
    }
    for handle in handles {
        clients
            .sqs
            .change_message_visibility()
            .queue_url(queue_url)
            .receipt_handle(handle)
            .visibility_timeout(0)
            .send()
            .await
            .map_err(|e| format!("change visibility: {}", e.into_service_error()))?;
    }
    Ok(bodies)
}
