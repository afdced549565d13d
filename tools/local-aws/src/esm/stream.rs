//! The DynamoDB Streams event source mapping: a table's stream is read through shard iterators
//! from a checkpoint, and a failing batch is retried, bisected, aged and discarded to the
//! on-failure destination as the mapping's settings say ([`super::checkpoint`], shared with
//! Kinesis; <https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>).
//! This module says how the stream's shards are listed and read and what the event looks like,
//! and keeps the stream's 24 h retention ([`RETENTION`]): by the mapping's clock
//! ([`Settings::clock`], which tests move instead of waiting a day), a record older than that is
//! trimmed, unreadable by the mapping and by a replay of the on-failure destination alike.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use serde_json::{json, Value};

use super::checkpoint::{Checkpoints, Listed, Position, Read, Resume, Settings, Source, Stream};
use crate::error::{Result, ResultExt};
use crate::invoke::StreamFunction;
use crate::resources::{Clients, MappingSettings};

pub use super::checkpoint::StreamPoll;

/// How long DynamoDB Streams keeps a record: "All data in DynamoDB Streams is subject to a 24
/// hour lifetime", after which it is trimmed and a read of it fails with
/// `TrimmedDataAccessException`
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html>). The local
/// AWS never trims; the emulator reads past what is older, as a reader starting at
/// `TRIM_HORIZON` would.
pub const RETENTION: Duration = Duration::from_secs(86_400);

/// A DynamoDB Streams event source mapping and its checkpoint. Its [`Settings`] read as its own
/// fields (`mapping.max_retries`).
#[derive(Debug, Clone)]
pub struct StreamMapping {
    /// The table whose stream is read.
    pub table: String,
    /// Event names delivered; others are passed over, as a mapping's `FilterCriteria` has
    /// Lambda do. Empty: every name.
    pub event_names: Vec<String>,
    /// Batch size, retries, record age, bisection, response types, destination.
    pub settings: Settings,
    checkpoints: Checkpoints,
}

impl StreamMapping {
    /// Reads `table`'s stream from its start with [`MappingSettings::dynamodb_stream`] (every
    /// event name); discarded batches go to `failures_url`.
    pub fn new(table: impl Into<String>, failures_url: Option<String>) -> Self {
        StreamMapping::with(table, &MappingSettings::dynamodb_stream(), failures_url)
    }

    /// Reads `table`'s stream from its start as `mapping` says (a template's, with its filter:
    /// [`crate::resources::mapping_settings`]); discarded batches go to `failures_url`.
    pub fn with(table: impl Into<String>, mapping: &MappingSettings, failures_url: Option<String>) -> Self {
        StreamMapping {
            table: table.into(),
            event_names: mapping.event_names.clone(),
            settings: Settings::new(mapping, failures_url),
            checkpoints: Checkpoints::default(),
        }
    }
}

impl std::ops::Deref for StreamMapping {
    type Target = Settings;

    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl std::ops::DerefMut for StreamMapping {
    fn deref_mut(&mut self) -> &mut Settings {
        &mut self.settings
    }
}

/// One batch per shard from its checkpoint, parents before children.
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
    let listed: Vec<Listed> =
        description.stream_description().map(|d| d.shards().iter().map(listed).collect()).unwrap_or_default();
    let mut checkpoints = std::mem::take(&mut mapping.checkpoints);
    let stream = Stream { clients, settings: &mapping.settings, arn: &stream_arn };
    let source = Dynamo { event_names: &mapping.event_names, function, clock: mapping.settings.clock };
    let poll = checkpoints.poll(stream, &source, &listed).await;
    mapping.checkpoints = checkpoints;
    poll
}

/// Replays the mapping's on-failure destination through `function`: see [`super::replay`].
pub async fn replay_stream_failures<F: StreamFunction>(
    clients: &Clients,
    mapping: &StreamMapping,
    function: &F,
) -> Result<super::Replayed> {
    let source = Dynamo { event_names: &mapping.event_names, function, clock: mapping.settings.clock };
    super::replay::replay(clients, &mapping.settings, &source).await
}

fn listed(shard: &aws_sdk_dynamodbstreams::types::Shard) -> Listed {
    Listed {
        id: shard.shard_id().unwrap_or_default().to_owned(),
        parents: shard.parent_shard_id().map(str::to_owned).into_iter().collect(),
        closed: shard.sequence_number_range().and_then(|r| r.ending_sequence_number()).is_some(),
    }
}

/// The latest stream of `table`.
pub(crate) async fn stream_arn(clients: &Clients, table: &str) -> Result<String> {
    let out = clients.dynamodb.describe_table().table_name(table).send().await.context("describe table")?;
    let arn = out.table().and_then(|t| t.latest_stream_arn()).map(str::to_owned);
    arn.ok_or_else(|| format!("table {table} has no stream").into())
}

/// The DynamoDB Streams source: the event names the filter lets through, the function, and
/// the clock the stream's retention is measured by.
pub(crate) struct Dynamo<'a, F> {
    pub event_names: &'a [String],
    pub function: &'a F,
    pub clock: fn() -> SystemTime,
}

impl<F> Dynamo<'_, F> {
    /// Whether a record created at `created_ms` is past the stream's [`RETENTION`].
    fn trimmed(&self, created_ms: Option<i64>) -> bool {
        let now = (self.clock)().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
        created_ms.is_some_and(|created| now - created > RETENTION.as_millis() as i64)
    }

    /// Up to `limit` records from `from`, as the local AWS holds them (it never trims).
    async fn read_raw(&self, clients: &Clients, from: Position<'_>, limit: i32) -> Result<Vec<Read<EventRecord>>> {
        let streams = &clients.streams;
        let (kind, sequence) = from.iterator();
        let iterator = streams.get_shard_iterator().stream_arn(from.stream_arn).shard_id(from.shard);
        let iterator = iterator.shard_iterator_type(ShardIteratorType::from(kind)).set_sequence_number(sequence);
        let iterator = iterator.send().await.context("shard iterator")?;
        let Some(iterator) = iterator.shard_iterator() else { return Ok(Vec::new()) };
        let out = streams.get_records().shard_iterator(iterator).limit(limit).send().await.context("get records")?;
        out.records().iter().map(|r| read(r, from.stream_arn)).collect()
    }
}

impl<F: StreamFunction> Source for Dynamo<'_, F> {
    type Record = EventRecord;
    const BATCH_INFO: &'static str = "DDBStreamBatchInfo";

    fn passes(&self, record: &EventRecord) -> bool {
        self.event_names.is_empty() || self.event_names.contains(&record.event_name)
    }

    /// Up to `limit` records from `from` that the stream still holds: trimmed ones are passed
    /// over (records are in time order within a shard, so they all come first).
    async fn read(&self, clients: &Clients, from: Position<'_>, limit: i32) -> Result<Vec<Read<EventRecord>>> {
        let mut resume = from.resume.cloned();
        loop {
            let from = Position { resume: resume.as_ref(), ..from };
            let records = self.read_raw(clients, from, limit).await?;
            let Some(last) = records.last().map(|r| r.sequence.clone()) else { return Ok(records) };
            let held: Vec<_> = records.into_iter().filter(|r| !self.trimmed(r.arrival_ms)).collect();
            if !held.is_empty() {
                return Ok(held);
            }
            resume = Some(Resume::After(last));
        }
    }

    async fn invoke(&self, records: Vec<EventRecord>) -> Result<Vec<Option<String>>> {
        let mut event = Event::default();
        event.records = records;
        let answer = self.function.invoke(event).await?;
        Ok(answer.batch_item_failures.into_iter().map(|f| f.item_identifier).collect())
    }
}

/// A stream record as the mapping reads it.
fn read(r: &aws_sdk_dynamodbstreams::types::Record, stream_arn: &str) -> Result<Read<EventRecord>> {
    let record: EventRecord = serde_json::from_value(record_json(r, stream_arn)).context("stream record")?;
    let change = r.dynamodb();
    Ok(Read {
        record,
        sequence: change.and_then(|c| c.sequence_number()).unwrap_or_default().to_owned(),
        arrival_ms: change.and_then(|c| c.approximate_creation_date_time()).map(|t| t.secs() * 1000),
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
    super::sqs::stream_batch_response(payload)
}
