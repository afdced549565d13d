//! The DynamoDB Streams trigger: records in order; the first record that failed in a way a later
//! delivery may undo is reported by its sequence number, and Lambda resumes from there (the
//! checkpoint). A permanent failure is logged, counted and parked ([`crate::park`]), then never
//! the checkpoint.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::DynamoDbEventResponse;

use crate::driver::{self, Record};
pub use crate::driver::{BatchHandler, Handler, Options, OrderedBatch, OrderedBatchHandler};
use crate::park::Coordinates;
use crate::{Handled, RecordResult};

impl Record for EventRecord {
    const PERMANENT: &'static str =
        "record failed permanently; not retried (a retry cannot change a permanent answer), the batch goes on";
    const RETRY: &'static str = "record failed; checkpoint here";
    const PANICKED: &'static str = "record handler panicked; checkpoint here";

    fn id(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.change.sequence_number.as_deref().map(Into::into)
    }

    fn coordinates(&self) -> Option<Coordinates> {
        Some(Coordinates::DynamoDb { sequence_number: self.change.sequence_number.clone().unwrap_or_default() })
    }

    fn source_arn(&self) -> Option<&str> {
        self.event_source_arn.as_deref()
    }

    /// `event_name` and `sequence` (stream records carry no trace header).
    fn span(&self) -> tracing::Span {
        let sequence = self.change.sequence_number.as_deref().unwrap_or("");
        tracing::info_span!("record", event_name = %self.event_name, sequence)
    }

    /// An event name the options do not name is skipped: counted, and logged at debug.
    fn screen(&self, options: &Options) -> Option<RecordResult> {
        if options.event_names.contains(&self.event_name) {
            return None;
        }
        self.span().in_scope(|| {
            tracing::debug!(event_name = %self.event_name, "record skipped: its event name is not in Options::event_names")
        });
        Some(Ok(Handled::Skipped))
    }
}

driver::entry_points! {
    Streams: Event => EventRecord => DynamoDbEventResponse;
    /// Processes a batch in order, one record at a time, stopping at the first failure a later
    /// delivery may undo (retryable, in progress elsewhere, a panic, not started for the deadline)
    /// and reporting its sequence number: the records after it are reported nowhere and come back
    /// with it, so handlers must be idempotent (they are).
    ///
    /// Records whose event name is not in [`Options::event_names`] (default `INSERT` only) are
    /// skipped: counted `Skipped` on the EMF line and logged at debug with their event name.
    ///
    /// A [`Retry::Never`](crate::Retry::Never) failure is not the checkpoint: it is logged
    /// at error with its sequence number and reason (redacted), counted (`Failed`, and
    /// `PermanentFailures` beside it on the invocation's EMF line), parked in
    /// [`Options::poison`]'s destination (`Parked`; a park that fails makes it the checkpoint),
    /// and the batch goes on. A retry
    /// cannot change a permanent answer, and a shard's checkpoint holds every record behind it:
    /// under `MaximumRetryAttempts` -1 for up to the record age limit (24 h), after which the
    /// mapping discards the batch, innocent records included. The handler records the record's
    /// fate where it can (the receipts relay marks its row FAILED); the parked record is the trace of
    /// the rest.
    ///
    /// A failure that may pass comes back until the mapping's `MaximumRetryAttempts` or
    /// `MaximumRecordAgeInSeconds` gives up on it; then the mapping sends the batch's metadata to
    /// its on-failure destination and the shard moves on (see docs/streams.md for replaying it).
    ///
    /// A handler that panics is a failure at its record: the checkpoint is there, with the panic's
    /// message (redacted) logged at error.
    ///
    /// Every log line of the batch is in an `invocation` span (`request_id`, `function_name`,
    /// `function_version`, `cold_start`) and each record's in a `record` span (`event_name`,
    /// `sequence`), and within it the handler's own ([`Handler::span`]); a record done logs
    /// `record done` with its disposition. At the end one EMF line counts the batch's dispositions
    /// and holds what the handler added to [`Options::metrics`](crate::metrics).
    process;
    /// The common `main`: serves DynamoDB Streams batches from the Lambda runtime until it stops,
    /// each through [`process`] with `handler` and `options`. Build both once, before calling it:
    ///
    /// ```no_run
    /// use effectively_once_lambda::events::{Context, EventRecord};
    /// use effectively_once_lambda::streams::{self, Options};
    /// use effectively_once_lambda::{Handled, Handler, RecordResult};
    ///
    /// struct Relay;
    ///
    /// impl Handler<EventRecord> for Relay {
    ///     async fn handle(&self, _record: &EventRecord, _context: &Context) -> RecordResult {
    ///         Ok(Handled::Applied)
    ///     }
    /// }
    ///
    /// #[tokio::main(flavor = "current_thread")]
    /// async fn main() -> Result<(), effectively_once_lambda::Error> {
    ///     streams::run(Relay, Options::new("relay")).await
    /// }
    /// ```
    run;
    /// [`process`] for a [`BatchHandler`]: the batch in as few calls as order allows. Records are
    /// grouped by their item (`Keys`), and records sharing a [`Handler::key`] join one group too;
    /// each call holds the next record of every group still going, so one item's changes are
    /// handled in stream order and a batch of distinct items is one call
    /// (one `commit_batch`, as few transactions as DynamoDB's limits allow). A failure that may pass
    /// holds back the rest of its item; the checkpoint is the first record, in stream order, not
    /// durably done, so nothing after it is lost (records after it that took effect come back and
    /// are answered as duplicates). A call that panics is not trusted: each of its records is handled
    /// again alone through [`Handler::handle`].
    process_batch;
    /// [`run`] for a [`BatchHandler`]: each batch through [`process_batch`].
    run_batch;
    /// [`process`] for an [`OrderedBatchHandler`]: every record of the batch whose event name is
    /// chosen, in **one** call, in stream order, each with its item ([`OrderedBatch::lane`]) and
    /// the records it follows (the previous change of its item and of its [`Handler::key`], through
    /// any record skipped between them, [`OrderedBatch::after`]). The handler applies them in that
    /// order and lets no record take effect behind one answered with a failure a later delivery
    /// may undo. The driver reads the answers in stream order with [`process_batch`]'s hold-back,
    /// so the checkpoint is the same (an `Applied` behind such a failure is logged at error as a
    /// breach and still reported not started), settled before any permanent failure is parked. A
    /// call that panics or answers for another number of records is not trusted: the batch is
    /// handled again one record at a time.
    process_ordered;
    /// [`run`] for an [`OrderedBatchHandler`]: each batch through [`process_ordered`].
    run_ordered;
}

/// Lambda's name for the event source: poison is parked ([`crate::park`]).
const PARKS: Option<&str> = Some("aws:dynamodb");

/// Each record carries its stream's ARN.
fn source(_event: &Event) -> driver::Source {
    driver::Source::default()
}

/// The event's records, as Lambda gave them.
fn records(event: Event) -> Vec<EventRecord> {
    event.records
}

/// The record's item, as text: its key attributes in name order (an item's `Keys` map has no
/// order of its own).
fn item_of(record: &EventRecord) -> String {
    let keys: std::collections::BTreeMap<_, _> = record.change.keys.iter().collect();
    serde_json::to_string(&keys).unwrap_or_default()
}

/// Record by record: the whole batch, in stream order. Batch path: by item, joined with the
/// handler's business key. Either way a failure that may pass holds back the rest.
fn groups<H: Handler<EventRecord>>(handler: &H, records: &[EventRecord], rounds: bool) -> driver::Groups {
    if rounds {
        driver::joined_groups(records, true, |record| [Some(item_of(record)), driver::key_of(handler, record)])
    } else {
        // One key for all: each record follows the one before it.
        driver::joined_groups(records, true, |_| [Some(String::new())])
    }
}

/// The checkpoint, if any.
fn respond(records: &[EventRecord], results: &[RecordResult]) -> DynamoDbEventResponse {
    driver::checkpoint(records, results)
}
