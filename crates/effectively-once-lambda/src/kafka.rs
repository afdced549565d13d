//! The Kafka trigger (Amazon MSK and self-managed Apache Kafka): records grouped by
//! topic-partition, in offset order within a partition. The event source mapping needs
//! `FunctionResponseTypes: [ReportBatchItemFailures]`: without it Lambda does not read the answer
//! and commits the whole batch, failed records included.
//!
//! **The answer relies on no reading of it.** Lambda's Kafka error-handling page says only that a
//! partial batch response lets "Lambda retry only the failed records"
//! (<https://docs.aws.amazon.com/lambda/latest/dg/kafka-retry-configurations.html>); it does not
//! say whether a named record is a resume point for its partition (as Lambda documents for
//! Kinesis and DynamoDB Streams: the lowest one wins, everything after it comes again) or the
//! only record of its partition retried (as Powertools, which names every failed record, reads
//! it). So for each partition the answer names *every* record of the batch from that partition's
//! first record a later delivery may still make take effect (a retryable failure, in progress
//! elsewhere, a panic, not started for the deadline or held back behind it) onward: that record
//! and each later offset of the partition in the batch, whatever its own result, even one that
//! succeeded. Read as resume points, the lowest wins and nothing changes; read record by record,
//! nothing that may still have to take effect is committed, and the records after the failure
//! come back in order, answered as duplicates where they took effect. Partitions without such a
//! record are named nowhere and committed whole.
//!
//! The answer's shape: `{"batchItemFailures": [{"itemIdentifier": {"partition": "orders-0",
//! "offset": 42}}]}`, `partition` the string `{topic}-{partition}` as the event's `records` map
//! names it and `offset` a JSON integer, as Powertools for AWS Lambda (Python) sends it
//! (`KafkaItemIdentifier`, <https://github.com/aws-powertools/powertools-lambda-python/pull/7941>).
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
pub use crate::driver::{BatchHandler, Handler, Options, OrderedBatch, OrderedBatchHandler};
use crate::park::Coordinates;
use crate::RecordResult;

/// The answer to a Kafka batch: the records to deliver again (`aws_lambda_events` has no Kafka
/// response type yet).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaEventResponse {
    /// One per record to deliver again, by partition name, then offset.
    pub batch_item_failures: Vec<KafkaBatchItemFailure>,
}

/// A record to deliver again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaBatchItemFailure {
    /// The record.
    pub item_identifier: KafkaItemIdentifier,
}

/// A record of a Kafka batch: its topic-partition (`{topic}-{partition}`) and offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaItemIdentifier {
    /// `{topic}-{partition}`, as the event's `records` map names it (a JSON string).
    pub partition: String,
    /// The record's offset (a JSON integer).
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
    const RETRY: &'static str = "record failed; it and the rest of its partition in the batch are delivered again";
    const PANICKED: &'static str =
        "record handler panicked; it and the rest of its partition in the batch are delivered again";

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
    /// that record and every later record of its partition in the batch, by partition and
    /// offset. That answer is safe whichever way Lambda reads it (see the [module](self) docs):
    /// as a resume point at the lowest named offset, or as the only records of the partition to
    /// retry; either way nothing after the failure is lost, and records after it that took
    /// effect come back and are answered as duplicates.
    ///
    /// A [`Retry::Never`](crate::Retry::Never) failure (a value that does not decode, a
    /// key reused) is logged at error, counted, parked in the [`Options`]' park destination
    /// ([`crate::park`]) and then not named: a retry cannot change it, and a partition held there
    /// would stall until the mapping's retries or record age give up. A park that fails makes it
    /// retryable: named, as above.
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
    /// [`process`] for an [`OrderedBatchHandler`]: the whole batch in **one** call, partition by
    /// partition in offset order, each record with its topic-partition ([`OrderedBatch::lane`])
    /// and the records it follows (the previous of its partition and of its [`Handler::key`],
    /// [`OrderedBatch::after`]). The handler applies them in that order and lets no record take
    /// effect behind one answered with a failure a later delivery may undo. The driver reads the
    /// answers in batch order with [`process_batch`]'s hold-back, so the answer is the same: a
    /// record behind such a failure is named whatever the handler said (an `Applied` there is
    /// logged at error as a breach), before any permanent failure is parked. A call that panics
    /// or answers for another number of records is not trusted: the batch is handled again one
    /// record at a time, as [`process`] does.
    process_ordered;
    /// [`run`] for an [`OrderedBatchHandler`]: each batch through [`process_ordered`].
    run_ordered;
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

/// For each partition, every record from its first one a later delivery may still make take
/// effect onward: that record and each later offset of the partition in the batch, whatever its
/// own result, so the answer holds under either reading of it (the module docs). By partition
/// name, then offset.
fn respond(records: &[KafkaRecord], results: &[RecordResult]) -> KafkaEventResponse {
    let mut first: BTreeMap<String, i64> = BTreeMap::new();
    for (record, result) in records.iter().zip(results) {
        if driver::may_take_effect_later(result) {
            let offset = first.entry(topic_partition(record)).or_insert(record.offset);
            *offset = (*offset).min(record.offset);
        }
    }
    let mut named: Vec<KafkaItemIdentifier> = records
        .iter()
        .map(|record| KafkaItemIdentifier { partition: topic_partition(record), offset: record.offset })
        .filter(|id| first.get(&id.partition).is_some_and(|&from| id.offset >= from))
        .collect();
    named.sort_by(|a, b| (&a.partition, a.offset).cmp(&(&b.partition, b.offset)));
    named.dedup();
    let batch_item_failures =
        named.into_iter().map(|item_identifier| KafkaBatchItemFailure { item_identifier }).collect();
    KafkaEventResponse { batch_item_failures }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Handled, RecordError};

    fn at(partition: i64, offset: i64) -> KafkaRecord {
        let mut record = KafkaRecord::default();
        record.topic = Some("t".into());
        record.partition = partition;
        record.offset = offset;
        record
    }

    /// Later records of the partition are named whatever their own result: one that succeeded
    /// after the failure comes back in order (and is answered as a duplicate); a permanent
    /// failure after it comes back too, and fails again.
    #[test]
    fn every_record_of_a_partition_from_its_first_retryable_failure_is_named() {
        let records = [at(0, 10), at(0, 11), at(0, 12), at(0, 13), at(1, 4), at(1, 5)];
        let results = [
            Ok(Handled::Applied),
            Err(RecordError::retryable("throttled")),
            Ok(Handled::Applied),
            Err(RecordError::permanent("not an order")),
            Err(RecordError::permanent("not an order")),
            Ok(Handled::Applied),
        ];
        let named: Vec<(String, i64)> = respond(&records, &results)
            .batch_item_failures
            .into_iter()
            .map(|f| (f.item_identifier.partition, f.item_identifier.offset))
            .collect();
        assert_eq!(named, [("t-0".to_owned(), 11), ("t-0".to_owned(), 12), ("t-0".to_owned(), 13)]);
    }
}
