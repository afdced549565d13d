//! The Kinesis Data Streams event source mapping: each shard is polled with shard iterators from
//! `TRIM_HORIZON` or its checkpoint, as Lambda's standard-iterator poller does, parents before
//! children after a reshard, and a failing batch is retried, bisected, aged and discarded to the
//! on-failure destination with a `KinesisBatchInfo` record ([`super::checkpoint`], shared with
//! DynamoDB Streams; <https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-batchfailurereporting.html>).
//! One batch per shard at a time: a `ParallelizationFactor` of 1, Lambda's default.

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_kinesis::types::{Record, ShardIteratorType};
use serde_json::json;

use super::checkpoint::{Checkpoints, Listed, Position, Read, Resume, Settings, Source, Stream};
use crate::error::{Result, ResultExt};
use crate::invoke::KinesisFunction;
use crate::resources::{Clients, MappingSettings};

pub use super::checkpoint::StreamPoll;

/// A Kinesis event source mapping and its checkpoints.
#[derive(Debug, Clone)]
pub struct KinesisMapping {
    /// The stream's name.
    pub stream: String,
    /// Batch size, retries, record age, bisection, response types, destination.
    pub settings: Settings,
    checkpoints: Checkpoints,
}

impl KinesisMapping {
    /// Reads `stream` from `TRIM_HORIZON` with [`MappingSettings::kinesis`]; discarded batches
    /// go to `failures_url`.
    pub fn new(stream: impl Into<String>, failures_url: Option<String>) -> Self {
        KinesisMapping::with(stream, &MappingSettings::kinesis(), failures_url)
    }

    /// Reads `stream` from `TRIM_HORIZON` as `mapping` says (a template's,
    /// [`crate::resources::mapping_settings`]); discarded batches go to `failures_url`.
    pub fn with(stream: impl Into<String>, mapping: &MappingSettings, failures_url: Option<String>) -> Self {
        KinesisMapping {
            stream: stream.into(),
            settings: Settings::new(mapping, failures_url),
            checkpoints: Checkpoints::default(),
        }
    }
}

/// One batch per shard from its checkpoint; a child shard only once its parents are closed and
/// read to their end ("Lambda processes the parent shard before the children"). Failures are
/// handled as [`super::poll_stream`] handles them, with `KinesisBatchInfo` in the on-failure
/// record.
pub async fn poll_kinesis<F: KinesisFunction>(
    clients: &Clients,
    mapping: &mut KinesisMapping,
    function: &F,
) -> Result<StreamPoll> {
    let summary = clients.kinesis.describe_stream_summary().stream_name(&mapping.stream).send().await;
    let summary = summary.context(format!("describe stream {}", mapping.stream))?;
    let stream_arn = summary.stream_description_summary().map(|d| d.stream_arn().to_owned()).unwrap_or_default();
    let listed = list_shards(clients, &mapping.stream).await?;
    let mut checkpoints = std::mem::take(&mut mapping.checkpoints);
    let stream = Stream { clients, settings: &mapping.settings, arn: &stream_arn };
    let poll = checkpoints.poll(stream, &Kinesis(function), &listed).await;
    mapping.checkpoints = checkpoints;
    poll
}

/// Replays the mapping's on-failure destination through `function`: see [`super::replay`].
pub async fn replay_kinesis_failures<F: KinesisFunction>(
    clients: &Clients,
    mapping: &KinesisMapping,
    function: &F,
) -> Result<super::Replayed> {
    super::replay::replay(clients, &mapping.settings, &Kinesis(function)).await
}

/// Every shard of the stream, open and closed, in the order Kinesis lists them (parents first).
async fn list_shards(clients: &Clients, stream: &str) -> Result<Vec<Listed>> {
    let mut listed = Vec::new();
    let mut next: Option<String> = None;
    loop {
        // A page token and the stream name are exclusive in ListShards.
        let request = match &next {
            Some(token) => clients.kinesis.list_shards().next_token(token),
            None => clients.kinesis.list_shards().stream_name(stream),
        };
        let out = request.send().await.context(format!("list shards of {stream}"))?;
        listed.extend(out.shards().iter().map(|s| Listed {
            id: s.shard_id().to_owned(),
            parents: s.parent_shard_id().into_iter().chain(s.adjacent_parent_shard_id()).map(str::to_owned).collect(),
            closed: s.sequence_number_range().and_then(|r| r.ending_sequence_number()).is_some(),
        }));
        next = out.next_token().map(str::to_owned);
        if next.is_none() {
            return Ok(listed);
        }
    }
}

/// The Kinesis source, invoking a function.
pub(crate) struct Kinesis<'a, F>(pub &'a F);

impl<F: KinesisFunction> Source for Kinesis<'_, F> {
    type Record = KinesisEventRecord;
    const BATCH_INFO: &'static str = "KinesisBatchInfo";

    async fn read(&self, clients: &Clients, from: Position<'_>, limit: i32) -> Result<Vec<Read<KinesisEventRecord>>> {
        let records = get_records(clients, from, limit).await?;
        records.iter().map(|r| read(r, from.shard, from.stream_arn)).collect()
    }

    async fn invoke(&self, records: Vec<KinesisEventRecord>) -> Result<Vec<Option<String>>> {
        let mut event = KinesisEvent::default();
        event.records = records;
        let answer = self.0.invoke(event).await?;
        Ok(answer.batch_item_failures.into_iter().map(|f| f.item_identifier).collect())
    }
}

/// Up to `limit` records of a shard from `from` (`from.stream_arn` may be the stream's name).
async fn get_records(clients: &Clients, from: Position<'_>, limit: i32) -> Result<Vec<Record>> {
    let kinesis = &clients.kinesis;
    let (kind, sequence) = from.iterator();
    // By name: moto 5.2.5 builds an iterator that names no stream when asked by ARN alone,
    // and GetRecords then fails; Kinesis takes either.
    let name = from.stream_arn.rsplit_once("stream/").map_or(from.stream_arn, |(_, name)| name);
    let iterator = kinesis.get_shard_iterator().stream_name(name).shard_id(from.shard);
    let iterator = iterator.shard_iterator_type(ShardIteratorType::from(kind)).set_starting_sequence_number(sequence);
    let iterator = iterator.send().await.context("kinesis shard iterator")?;
    let Some(iterator) = iterator.shard_iterator() else { return Ok(Vec::new()) };
    let out = kinesis.get_records().shard_iterator(iterator).limit(limit).send().await;
    Ok(out.context("kinesis get records")?.records)
}

/// Every record of a shard from `resume` (its start when `None`) to `end` included (its end
/// when `None`).
async fn records_between(
    clients: &Clients,
    stream: &str,
    shard: &str,
    mut resume: Option<Resume>,
    end: Option<&str>,
) -> Result<Vec<Record>> {
    let mut all = Vec::new();
    loop {
        let from = Position { stream_arn: stream, shard, resume: resume.as_ref() };
        let records = get_records(clients, from, 1000).await?;
        let Some(last) = records.last().map(|r| r.sequence_number().to_owned()) else { return Ok(all) };
        for r in records {
            if end.is_some_and(|end| super::replay::after(r.sequence_number(), end)) {
                return Ok(all);
            }
            let at_end = end == Some(r.sequence_number());
            all.push(r);
            if at_end {
                return Ok(all);
            }
        }
        resume = Some(Resume::After(last));
    }
}

impl KinesisMapping {
    /// Records on the stream the mapping has not passed: on every shard, open or closed, those
    /// behind its checkpoint (all of a shard it never started). Zero once it is drained.
    pub async fn unread(&self, clients: &Clients) -> Result<usize> {
        let mut unread = 0;
        for shard in list_shards(clients, &self.stream).await? {
            let resume = self.checkpoints.resume(&shard.id).cloned();
            unread += records_between(clients, &self.stream, &shard.id, resume, None).await?.len();
        }
        Ok(unread)
    }
}

/// The data of the records an on-failure invocation record (`KinesisBatchInfo`) names, read
/// back from the stream while it holds them: what the destination stands for.
pub async fn discarded_records(clients: &Clients, invocation_record: &str) -> Result<Vec<Vec<u8>>> {
    let record: serde_json::Value = serde_json::from_str(invocation_record).context("invocation record")?;
    let info = &record["KinesisBatchInfo"];
    let field = |name: &str| info[name].as_str().ok_or(format!("KinesisBatchInfo without {name}"));
    let (stream, shard) = (field("streamArn")?, field("shardId")?);
    let (start, end) = (field("startSequenceNumber")?, field("endSequenceNumber")?);
    let records = records_between(clients, stream, shard, Some(Resume::At(start.to_owned())), Some(end)).await?;
    Ok(records.into_iter().map(|r| r.data.into_inner()).collect())
}

/// A Kinesis record in the shape Lambda hands to a function (the example event of
/// <https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html>).
fn read(r: &aws_sdk_kinesis::types::Record, shard: &str, stream_arn: &str) -> Result<Read<KinesisEventRecord>> {
    let arrival_ms =
        r.approximate_arrival_timestamp().map(|t| t.secs() * 1000 + i64::from(t.subsec_nanos()) / 1_000_000);
    // Base64, as Lambda hands it over, by the event type's own encoding.
    let mut data = Base64Data::default();
    *data = r.data().as_ref().to_vec();
    let data = serde_json::to_value(data).context("record data")?;
    let sequence = r.sequence_number().to_owned();
    let record = json!({
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": r.partition_key(),
            "sequenceNumber": sequence,
            "data": data,
            "approximateArrivalTimestamp": arrival_ms.map_or(0.0, |ms| ms as f64 / 1000.0),
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": format!("{shard}:{sequence}"),
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::000000000000:role/kinesis-consumer",
        "awsRegion": stream_arn.split(':').nth(3).unwrap_or("us-east-1"),
        "eventSourceARN": stream_arn,
    });
    let record = serde_json::from_value(record).context("kinesis record")?;
    Ok(Read { record, sequence, arrival_ms })
}

/// A raw Kinesis function answer as the mapping reads it; see [`super::sqs_response`].
pub fn kinesis_response(payload: &[u8]) -> Result<KinesisEventResponse> {
    super::sqs::stream_batch_response(payload)
}
