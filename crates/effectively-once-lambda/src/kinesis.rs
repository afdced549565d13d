//! The Kinesis Data Streams trigger: records grouped by partition key, in order within a key;
//! the first record that failed in a way a later delivery may undo is reported by its sequence
//! number (`batchItemFailures`), and Lambda resumes the shard from there (the checkpoint). The
//! event source mapping needs `ReportBatchItemFailures`.
//!
//! Kinesis keeps order per shard, and a producer's order per partition key; the driver keeps
//! the second, running different partition keys concurrently ([`Options::concurrency`]). With
//! a `ParallelizationFactor` above 1, Lambda itself runs up to that many batches of one shard at
//! once, still in order per partition key: the same guarantee this driver gives within a batch.
//!
//! Key a handler's effects on the business id in the record's data, never on its sequence
//! number: a producer that retries a `PutRecord` whose answer it lost writes the same event
//! again under a new sequence number, and a resharded stream can deliver a record again.

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;

use crate::driver::{self, Record};
pub use crate::driver::{BatchHandler, Handler, Options, OrderedBatch, OrderedBatchHandler};
use crate::park::Coordinates;
use crate::RecordResult;

impl Record for KinesisEventRecord {
    const PERMANENT: &'static str =
        "record failed permanently; not retried (a retry cannot change a permanent answer), the batch goes on";
    const RETRY: &'static str = "record failed; checkpoint at the first such record";
    const PANICKED: &'static str = "record handler panicked; checkpoint at the first such record";

    fn id(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some(self.kinesis.sequence_number.as_str().into())
    }

    /// The shard is the `eventID`'s part before its `:` (`shardId-000000000000:4959...`).
    fn coordinates(&self) -> Option<Coordinates> {
        let event_id = self.event_id.as_deref().unwrap_or_default();
        let shard_id = event_id.split_once(':').map_or(event_id, |(shard, _)| shard).to_owned();
        Some(Coordinates::Kinesis { shard_id, sequence_number: self.kinesis.sequence_number.clone() })
    }

    fn source_arn(&self) -> Option<&str> {
        self.event_source_arn.as_deref()
    }

    /// `partition_key` (the producer's text, so its addresses redacted) and `sequence`.
    fn span(&self) -> tracing::Span {
        let partition_key = crate::redact_emails(&self.kinesis.partition_key);
        tracing::info_span!("record", partition_key, sequence = self.kinesis.sequence_number.as_str())
    }
}

driver::entry_points! {
    Kinesis: KinesisEvent => KinesisEventRecord => KinesisEventResponse;
    /// Processes a batch record by record: partition keys concurrently (at most
    /// [`Options::concurrency`] at once), each key's records in order. After a failure a later
    /// delivery may undo (retryable, in progress elsewhere, a panic, not started for the deadline)
    /// the rest of that key's records are not started. The answer names the first such record in
    /// the batch by its sequence number: Lambda delivers the shard again from it, so records after
    /// it that took effect come back and are answered as duplicates, and none is lost.
    ///
    /// A [`Retry::Never`](crate::Retry::Never) failure (a body that does not decode, a key
    /// reused) is logged at error, counted, parked ([`Options::poison`], [`crate::park`]) and then
    /// not the checkpoint: a retry cannot change it, and a checkpoint held there would stall the
    /// shard until `MaximumRecordAgeInSeconds`. A park that fails makes it the checkpoint.
    ///
    /// A failure that may pass comes back until the mapping's `MaximumRetryAttempts` or
    /// `MaximumRecordAgeInSeconds` gives up on it; with `BisectBatchOnFunctionError` Lambda splits
    /// the failing batch first. Then it sends the batch's metadata (`KinesisBatchInfo`: shard,
    /// first and last sequence numbers) to the on-failure destination and the shard moves on (see
    /// docs/streams.md for replaying it).
    ///
    /// Spans, logs, panics and metrics as in [`crate::sqs::process`], with `partition_key` and
    /// `sequence` on the `record` span.
    process;
    /// The common `main`: serves Kinesis batches from the Lambda runtime until it stops, each
    /// through [`process`] with `handler` and `options`.
    run;
    /// [`process`] for a [`BatchHandler`]: rounds, each one call with the next record of every
    /// partition key still going, so a batch of distinct keys is one call (one `commit_batch`). A
    /// failure that may pass holds back the rest of its key; the checkpoint is the first record not
    /// durably done. A call that panics is not trusted: each of its records is handled again alone.
    process_batch;
    /// [`run`] for a [`BatchHandler`]: each batch through [`process_batch`].
    run_batch;
    /// [`process`] for an [`OrderedBatchHandler`]: the whole batch in **one** call, in shard
    /// order, each record with its partition key ([`OrderedBatch::lane`]) and the records it
    /// follows (the previous of its partition key and of its [`Handler::key`],
    /// [`OrderedBatch::after`]). The handler applies them in that order and lets no record take
    /// effect behind one answered with a failure a later delivery may undo. The driver reads the
    /// answers in batch order with [`process_batch`]'s hold-back, so the checkpoint is the same
    /// (an `Applied` behind such a failure is logged at error as a breach and still reported not
    /// started), settled before any permanent failure is parked. A call that panics or answers
    /// for another number of records is not trusted: the batch is handled again one record at a
    /// time, as [`process`] does.
    process_ordered;
    /// [`run`] for an [`OrderedBatchHandler`]: each batch through [`process_ordered`].
    run_ordered;
}

/// Lambda's name for the event source: poison is parked ([`crate::park`]).
const PARKS: Option<&str> = Some("aws:kinesis");

/// Each record carries its stream's ARN.
fn source(_event: &KinesisEvent) -> driver::Source {
    driver::Source::default()
}

/// The event's records, as Lambda gave them.
fn records(event: KinesisEvent) -> Vec<KinesisEventRecord> {
    event.records
}

/// By partition key (the producer's order), joined with records sharing the handler's
/// business key ([`Handler::key`]): a producer retry that wrote the same event under another
/// partition key runs after the first copy and is answered from it, rather than finding it
/// in progress and holding the checkpoint. A failure that may pass holds back the rest.
fn groups<H: Handler<KinesisEventRecord>>(
    handler: &H,
    records: &[KinesisEventRecord],
    _rounds: bool,
) -> driver::Groups {
    let keys =
        |record: &KinesisEventRecord| [Some(record.kinesis.partition_key.clone()), driver::key_of(handler, record)];
    driver::joined_groups(records, true, keys)
}

/// The checkpoint, if any.
fn respond(records: &[KinesisEventRecord], results: &[RecordResult]) -> KinesisEventResponse {
    driver::checkpoint(records, results)
}
