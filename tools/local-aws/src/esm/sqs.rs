//! The SQS event source mapping: a poll receives a batch, invokes the function, and deletes only
//! what its answer lets through; the rest comes back after the visibility timeout, its receive
//! count raised, until the redrive policy moves it to the DLQ
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>: partial
//! batch responses, their success and failure conditions, FIFO).

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use serde_json::Value;

use crate::error::{Result, ResultExt};
use crate::invoke::SqsFunction;
use crate::resources::{Clients, MappingSettings};

/// An SQS event source mapping.
#[derive(Debug, Clone)]
pub struct SqsMapping {
    /// The queue.
    pub queue_url: String,
    /// Messages per invocation (`BatchSize`).
    pub batch_size: i32,
    /// How long a received message stays invisible; a failed one returns after it.
    pub visibility_timeout: i32,
    /// Long-poll wait. 0 against the local AWS: it serves one request at a time, so a long poll
    /// would hold every other request back while it waits; the emulator sleeps between empty
    /// polls instead.
    pub wait_seconds: i32,
    /// The mapping's `FunctionResponseTypes` holds `ReportBatchItemFailures`. Without it Lambda
    /// ignores the answer's `batchItemFailures`: a batch succeeds or fails as a whole.
    pub report_batch_item_failures: bool,
    arn: std::sync::OnceLock<String>,
}

impl SqsMapping {
    /// [`MappingSettings::sqs`] (10 a batch, answers read), with a 2 s visibility timeout
    /// (redelivery within a local run) and short polls.
    pub fn new(queue_url: impl Into<String>) -> Self {
        SqsMapping::with(queue_url, &MappingSettings::sqs())
    }

    /// The batch size and response types `settings` give (a template's,
    /// [`crate::resources::mapping_settings`]), with a 2 s visibility timeout and short polls.
    pub fn with(queue_url: impl Into<String>, settings: &MappingSettings) -> Self {
        SqsMapping {
            queue_url: queue_url.into(),
            batch_size: settings.batch_size,
            visibility_timeout: 2,
            wait_seconds: 0,
            report_batch_item_failures: settings.report_batch_item_failures,
            arn: std::sync::OnceLock::new(),
        }
    }

    /// The queue's ARN, asked once per mapping: GetQueueAttributes costs time in proportion to
    /// the queue's depth on the local AWS.
    async fn arn(&self, clients: &Clients) -> Result<String> {
        if let Some(arn) = self.arn.get() {
            return Ok(arn.clone());
        }
        let arn = crate::resources::queue_arn(&clients.sqs, &self.queue_url).await?;
        Ok(self.arn.get_or_init(|| arn).clone())
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
/// and failure conditions"): `Err` for the whole batch, else the reported ones.
///
/// - an invocation error (the function threw, crashed, timed out, or answered with invalid
///   JSON) fails the whole batch: "If your function throws an exception, the entire batch is
///   considered a complete failure";
/// - without `ReportBatchItemFailures` the answer is not read: success is the whole batch;
/// - an empty or null `batchItemFailures` list, or an empty or null answer, is complete success;
/// - an empty or null `itemIdentifier`, a bad key name, or "an itemIdentifier value with a
///   message ID that doesn't exist" in the batch is complete failure.
fn sqs_failed<'a>(ids: &[&'a str], answer: &Result<SqsBatchResponse>, report: bool) -> Result<Vec<&'a str>> {
    let response = match answer {
        Err(e) => return Err(format!("invocation failed: {e}").into()),
        Ok(_) if !report => return Ok(Vec::new()),
        Ok(response) => response,
    };
    let mut failed = Vec::new();
    for f in &response.batch_item_failures {
        let id = f.item_identifier.as_str();
        if id.is_empty() {
            return Err("batchItemFailures holds an empty itemIdentifier".into());
        }
        let Some(id) = ids.iter().find(|known| **known == id) else {
            return Err(format!("batchItemFailures names {id}, not a message of the batch").into());
        };
        failed.push(*id);
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
pub async fn poll_sqs<F: SqsFunction>(clients: &Clients, mapping: &SqsMapping, function: &F) -> Result<SqsPoll> {
    let messages = receive(clients, mapping).await?;
    if messages.is_empty() {
        return Ok(SqsPoll::default());
    }
    let event = sqs_event(&messages, &mapping.arn(clients).await?);
    let ids: Vec<&str> = messages.iter().map(|m| m.message_id().unwrap_or("")).collect();
    let answer = function.invoke(event).await;
    let (failed, whole) = match sqs_failed(&ids, &answer, mapping.report_batch_item_failures) {
        Ok(named) => (ids.iter().copied().filter(|id| named.contains(id)).collect(), false),
        Err(reason) => {
            // Nothing is deleted: every message returns after the visibility timeout, its receive
            // count raised, and may reach the DLQ. Message ids only: no payload in the log.
            tracing::warn!(queue = %mapping.queue_url, messages = ids.len(), %reason, "the whole batch failed");
            (ids.clone(), true)
        }
    };
    // Ack only what succeeded: the rest reappears after the visibility timeout.
    let done: Vec<&Message> = messages.iter().filter(|m| !failed.contains(&m.message_id().unwrap_or(""))).collect();
    acknowledge(clients, mapping, &done).await?;
    Ok(SqsPoll { received: messages.len(), failed: failed.len(), failed_batches: usize::from(whole) })
}

async fn receive(clients: &Clients, mapping: &SqsMapping) -> Result<Vec<Message>> {
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
        .context("receive")?;
    Ok(out.messages.unwrap_or_default())
}

/// Deletes `messages` from the mapping's queue.
async fn acknowledge(clients: &Clients, mapping: &SqsMapping, messages: &[&Message]) -> Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let entries = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .build()
        })
        .collect::<Result<Vec<_>, _>>()
        .context("delete entries")?;
    clients
        .sqs
        .delete_message_batch()
        .queue_url(&mapping.queue_url)
        .set_entries(Some(entries))
        .send()
        .await
        .context("delete")?;
    Ok(())
}

/// The `batchItemFailures` of a raw answer, as Lambda reads one: `null`, `{}` and a null list
/// are success; an entry without a string `itemIdentifier` (null, or a bad key name) is kept as
/// a null identifier, which fails the whole batch; anything but JSON `null` or an object is an
/// invalid response, a complete failure
/// (<https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>).
pub(super) fn item_failures(payload: &[u8]) -> Result<Vec<Option<String>>> {
    let value: Value = serde_json::from_slice(payload).context("the answer is not JSON")?;
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

/// A stream function's raw answer read as [`item_failures`] reads it, in the stream's response
/// type (`DynamoDbEventResponse`, `KinesisEventResponse`: the same JSON shape).
pub(super) fn stream_batch_response<T: serde::de::DeserializeOwned>(payload: &[u8]) -> Result<T> {
    let failures: Vec<Value> =
        item_failures(payload)?.into_iter().map(|id| serde_json::json!({"itemIdentifier": id})).collect();
    serde_json::from_value(serde_json::json!({"batchItemFailures": failures})).context("batch response")
}

/// The Lambda event an SQS event source mapping builds from received `messages` of the queue
/// `arn` (their ids, receipt handles, bodies and system attributes, FIFO group included).
pub fn sqs_event(messages: &[Message], arn: &str) -> SqsEvent {
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
pub fn sqs_response(payload: &[u8]) -> Result<SqsBatchResponse> {
    let mut response = SqsBatchResponse::default();
    for id in item_failures(payload)? {
        let mut f = BatchItemFailure::default();
        f.item_identifier = id.unwrap_or_default();
        response.batch_item_failures.push(f);
    }
    Ok(response)
}
