//! The Kafka trigger (Amazon MSK and self-managed Apache Kafka): records grouped by
//! topic-partition, in offset order within a partition; for each partition the first record that
//! failed in a way a later delivery may undo is reported by its partition and offset
//! (`batchItemFailures` with `{"partition": "topic-0", "offset": 42}`), and Lambda resumes that
//! partition from it. Partitions without a failure are committed whole. The event source mapping
//! needs `FunctionResponseTypes: [ReportBatchItemFailures]`: without it Lambda does not read the
//! answer and commits the whole batch, failed records included.
//!
//! Key a handler's effects on the business id in the record's value or a header
//! ([`header`]), never on its offset: a producer that retries a send whose answer it lost writes
//! the same event at a new offset, and a consumer group that rebalances delivers records again.

use std::borrow::Cow;
use std::collections::BTreeMap;

use aws_lambda_events::event::kafka::{KafkaEvent, KafkaRecord};
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::driver::{self, Record};
pub use crate::driver::{BatchHandler, Handler, Options};
use crate::park::Coordinates;
use crate::RecordResult;

/// The answer to a Kafka batch: for each partition to resume, where (`aws_lambda_events` has no
/// Kafka response type yet).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaEventResponse {
    /// One per partition with a record to deliver again.
    pub batch_item_failures: Vec<KafkaBatchItemFailure>,
}

/// A partition to resume, and from which record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaBatchItemFailure {
    /// The record Lambda resumes the partition from.
    pub item_identifier: KafkaItemIdentifier,
}

/// A record of a Kafka batch: its topic-partition (`{topic}-{partition}`) and offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaItemIdentifier {
    /// `{topic}-{partition}`, as the event's `records` map names it.
    pub partition: String,
    /// The record's offset.
    pub offset: i64,
}

/// The topic-partition a record came from, as Lambda names it: `{topic}-{partition}`.
pub fn topic_partition(record: &KafkaRecord) -> String {
    format!("{}-{}", record.topic.as_deref().unwrap_or_default(), record.partition)
}

/// The record's key, decoded from base64; `None` when it has none or it is not base64.
pub fn key_bytes(record: &KafkaRecord) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(record.key.as_deref()?).ok()
}

/// The record's value, decoded from base64; `None` when it has none or it is not base64.
pub fn value_bytes(record: &KafkaRecord) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(record.value.as_deref()?).ok()
}

/// The value of the record's header `name` (the first, when repeated), as bytes: Lambda sends
/// header values as arrays of signed bytes.
pub fn header(record: &KafkaRecord, name: &str) -> Option<Vec<u8>> {
    let values = record.headers.iter().find_map(|header| header.get(name))?;
    Some(values.iter().map(|&byte| byte as u8).collect())
}

impl Record for KafkaRecord {
    const PERMANENT: &'static str =
        "record failed permanently; not retried (a retry cannot change a permanent answer), the batch goes on";
    const RETRY: &'static str = "record failed; its partition resumes here";
    const PANICKED: &'static str = "record handler panicked; its partition resumes here";

    fn id(&self) -> Option<Cow<'_, str>> {
        Some(format!("{}@{}", topic_partition(self), self.offset).into())
    }

    fn coordinates(&self) -> Option<Coordinates> {
        Some(Coordinates::Kafka { topic_partition: topic_partition(self), offset: self.offset })
    }

    /// `topic_partition` and `offset`.
    fn span(&self) -> tracing::Span {
        tracing::info_span!("record", topic_partition = %topic_partition(self), offset = self.offset)
    }
}

driver::entry_points! {
    Kafka: KafkaEvent => KafkaRecord => KafkaEventResponse;
    /// Processes a batch record by record: partitions concurrently (at most
    /// [`Options::concurrency`] at once), each partition's records in offset order; records
    /// sharing the handler's business key ([`Handler::key`]) join one group, so a producer retry
    /// at another offset (or in another partition) runs after the first copy and is answered from
    /// it. After a failure a later delivery may undo (retryable, in progress elsewhere, a panic,
    /// not started for the deadline) the rest of the group is not started, and the answer names
    /// that partition's first such record by partition and offset: Lambda resumes the partition
    /// there, so nothing after it is lost, and records after it that took effect come back and
    /// are answered as duplicates.
    ///
    /// A [`Retry::Permanent`](crate::Retry::Permanent) failure (a value that does not decode, a
    /// key reused) is logged at error, counted, and not a resume point: a retry cannot change it,
    /// and a partition held there would stall until the mapping's retries or record age give up.
    ///
    /// Spans, logs, panics and metrics as in [`crate::sqs::process`], with `topic_partition` and
    /// `offset` on the `record` span.
    process;
    /// The common `main`: serves Kafka batches from the Lambda runtime until it stops, each
    /// through [`process`] with `handler` and `options`.
    run;
    /// [`process`] for a [`BatchHandler`]: rounds, each one call with the next record of every
    /// group still going, so a batch of distinct partitions is one call (one `commit_batch`).
    process_batch;
    /// [`run`] for a [`BatchHandler`]: each batch through [`process_batch`].
    run_batch;
}

/// Lambda's name for the event source, for MSK and self-managed Kafka alike: poison is parked
/// ([`crate::park`]).
const PARKS: Option<&str> = Some("aws:kafka");

/// The cluster's ARN and bootstrap servers are the event's, not the record's.
fn source(event: &KafkaEvent) -> driver::Source {
    driver::Source {
        event_source_arn: event.event_source_arn.clone(),
        bootstrap_servers: event.bootstrap_servers.clone(),
    }
}

/// The event's records, partition by partition (in the name order of their topic-partitions),
/// each partition in offset order.
fn records(event: KafkaEvent) -> Vec<KafkaRecord> {
    let partitions: BTreeMap<String, Vec<KafkaRecord>> = event.records.into_iter().collect();
    partitions
        .into_values()
        .flat_map(|mut records| {
            records.sort_by_key(|record| record.offset);
            records
        })
        .collect()
}

/// By topic-partition (Kafka's order), joined with records sharing the handler's business key.
fn groups<H: Handler<KafkaRecord>>(handler: &H, records: &[KafkaRecord], _rounds: bool) -> driver::Groups {
    let keys = |record: &KafkaRecord| [Some(topic_partition(record)), driver::key_of(handler, record)];
    driver::joined_groups(records, true, keys)
}

/// For each partition, its first record a later delivery may still make take effect.
fn respond(records: &[KafkaRecord], results: &[RecordResult]) -> KafkaEventResponse {
    let mut resume: BTreeMap<String, i64> = BTreeMap::new();
    for (record, result) in records.iter().zip(results) {
        if driver::may_take_effect_later(result) {
            let offset = resume.entry(topic_partition(record)).or_insert(record.offset);
            *offset = (*offset).min(record.offset);
        }
    }
    let batch_item_failures = resume
        .into_iter()
        .map(|(partition, offset)| KafkaBatchItemFailure { item_identifier: KafkaItemIdentifier { partition, offset } })
        .collect();
    KafkaEventResponse { batch_item_failures }
}
