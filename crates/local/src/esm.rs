//! An event source mapping emulator, as Lambda runs one: SQS is long-polled, each batch invokes
//! the function, only the messages that succeeded are deleted, and failed ones come back after
//! the visibility timeout until the redrive policy moves them to the DLQ; the outbox stream is
//! read through shard iterators, and the checkpoint advances past a batch only when it
//! succeeded, or to the first failed record otherwise.

use std::collections::HashMap;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName};
use serde_json::{json, Value};

use crate::invoke::{SqsFunction, StreamFunction};
use crate::resources::Clients;

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
    arn: std::sync::OnceLock<String>,
}

impl SqsMapping {
    /// Batches of 10, a 2 s visibility timeout (redelivery within the demo), short polls.
    pub fn new(queue_url: impl Into<String>) -> Self {
        SqsMapping {
            queue_url: queue_url.into(),
            batch_size: 10,
            visibility_timeout: 2,
            wait_seconds: 0,
            arn: std::sync::OnceLock::new(),
        }
    }
}

/// What an SQS poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SqsPoll {
    /// Messages received (deliveries).
    pub received: usize,
    /// Messages the function reported failed: left for redelivery.
    pub failed: usize,
}

/// One receive, one invocation, one delete of the successes.
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
        record.event_source_arn = Some(arn.clone());
        record.aws_region = Some("us-east-1".into());
        event.records.push(record);
    }
    let response = function.invoke(event).await?;
    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
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
    Ok(SqsPoll { received: messages.len(), failed: failed.len() })
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
    /// Records per invocation.
    pub batch_size: i32,
    /// Retries of a failing record before it goes to `failures_url` and is passed.
    pub max_retries: u32,
    /// The on-failure destination.
    pub failures_url: Option<String>,
    /// Event names delivered; others are passed over, as the template's `FilterCriteria`
    /// (`{"eventName": ["INSERT"]}`) has Lambda do.
    pub event_names: Vec<String>,
    checkpoints: HashMap<String, Resume>,
    attempts: HashMap<String, u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Resume {
    At(String),
    After(String),
}

impl StreamMapping {
    /// Reads `table`'s stream from its start, 10 records a batch, 5 retries.
    pub fn new(table: impl Into<String>, failures_url: Option<String>) -> Self {
        StreamMapping {
            table: table.into(),
            batch_size: 10,
            max_retries: 5,
            failures_url,
            event_names: vec!["INSERT".into()],
            checkpoints: HashMap::new(),
            attempts: HashMap::new(),
        }
    }
}

/// What a stream poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamPoll {
    /// Records handed to the function.
    pub delivered: usize,
    /// Batches that reported a failure (their checkpoint stays at it).
    pub failed_batches: usize,
    /// Records given up after `max_retries` and sent to the on-failure destination.
    pub given_up: usize,
}

/// One batch per shard from its checkpoint.
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
    for shard in shards {
        let mut iterator = clients.streams.get_shard_iterator().stream_arn(&stream_arn).shard_id(&shard);
        iterator = match mapping.checkpoints.get(&shard) {
            None => iterator.shard_iterator_type(ShardIteratorType::TrimHorizon),
            Some(Resume::At(seq)) => {
                iterator.shard_iterator_type(ShardIteratorType::AtSequenceNumber).sequence_number(seq)
            }
            Some(Resume::After(seq)) => {
                iterator.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).sequence_number(seq)
            }
        };
        let iterator = iterator.send().await.map_err(|e| format!("shard iterator: {}", e.into_service_error()))?;
        let Some(iterator) = iterator.shard_iterator() else { continue };
        let out = clients
            .streams
            .get_records()
            .shard_iterator(iterator)
            .limit(mapping.batch_size)
            .send()
            .await
            .map_err(|e| format!("get records: {}", e.into_service_error()))?;
        let records = out.records();
        if records.is_empty() {
            continue;
        }
        let mut event = Event::default();
        for r in records {
            let value = record_json(r, &stream_arn);
            let record: EventRecord = serde_json::from_value(value).map_err(|e| format!("stream record: {e}"))?;
            if mapping.event_names.contains(&record.event_name) {
                event.records.push(record);
            }
        }
        let last =
            records.last().and_then(|r| r.dynamodb()).and_then(|c| c.sequence_number()).unwrap_or_default().to_owned();
        if event.records.is_empty() {
            // Everything filtered out: the checkpoint passes it without an invocation.
            mapping.checkpoints.insert(shard, Resume::After(last));
            continue;
        }
        poll.delivered += event.records.len();
        let response = function.invoke(event.clone()).await?;
        match response.batch_item_failures.first().and_then(|f| f.item_identifier.clone()) {
            None => {
                mapping.checkpoints.insert(shard, Resume::After(last));
            }
            Some(failed) => {
                poll.failed_batches += 1;
                let attempts = mapping.attempts.entry(failed.clone()).or_default();
                *attempts += 1;
                if *attempts > mapping.max_retries {
                    // Lambda's on-failure destination: the record's description, then move on.
                    if let Some(url) = &mapping.failures_url {
                        let body = json!({"sequenceNumber": failed, "streamArn": stream_arn, "attempts": *attempts});
                        clients.sqs.send_message().queue_url(url).message_body(body.to_string()).send().await.ok();
                    }
                    poll.given_up += 1;
                    mapping.checkpoints.insert(shard, Resume::After(failed));
                } else {
                    mapping.checkpoints.insert(shard, Resume::At(failed));
                }
            }
        }
    }
    Ok(poll)
}

/// A stream record in the shape Lambda hands to a function.
fn record_json(r: &aws_sdk_dynamodbstreams::types::Record, stream_arn: &str) -> Value {
    let change = r.dynamodb();
    let image = |m: Option<&HashMap<String, AttributeValue>>| -> Value {
        Value::Object(m.map(|m| m.iter().map(|(k, v)| (k.clone(), attribute_json(v))).collect()).unwrap_or_default())
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

fn attribute_json(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        AttributeValue::Null(_) => json!({"NULL": true}),
        AttributeValue::Ss(v) => json!({"SS": v}),
        AttributeValue::Ns(v) => json!({"NS": v}),
        AttributeValue::L(l) => json!({"L": l.iter().map(attribute_json).collect::<Vec<_>>()}),
        AttributeValue::M(m) => {
            json!({"M": m.iter().map(|(k, v)| (k.clone(), attribute_json(v))).collect::<serde_json::Map<_, _>>()})
        }
        _ => json!({"NULL": true}),
    }
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
