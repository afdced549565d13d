//! The SQS trigger: every message handled alone, failures reported as `batchItemFailures` so
//! only they are delivered again (the event source mapping needs `ReportBatchItemFailures`).

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};

use crate::driver::{self, Record};
pub use crate::driver::{BatchHandler, Handler, Options, OrderedBatch, OrderedBatchHandler};
use crate::{RecordError, RecordResult};

impl Record for SqsMessage {
    const PERMANENT: &'static str = "record failed permanently; reported failed, bound for the DLQ";
    const RETRY: &'static str = "record failed; reported failed for redelivery";
    const PANICKED: &'static str = "record handler panicked; reported failed";

    fn id(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.message_id.as_deref().map(Into::into)
    }

    /// `message_id`, and the X-Ray `xray_trace_id` of the message's `AWSTraceHeader`.
    fn span(&self) -> tracing::Span {
        let message_id = self.message_id.as_deref().unwrap_or("");
        let span = tracing::info_span!("record", message_id, xray_trace_id = tracing::field::Empty);
        if let Some(trace) = self.attributes.get("AWSTraceHeader").and_then(|h| trace_id(h)) {
            span.record("xray_trace_id", trace);
        }
        span
    }

    fn screen(&self, _options: &Options) -> Option<RecordResult> {
        self.message_id.is_none().then(|| Err(RecordError::permanent("message has no messageId")))
    }
}

/// The X-Ray trace id in an `AWSTraceHeader` (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=...;Sampled=1`):
/// its `Root`.
pub fn trace_id(header: &str) -> Option<&str> {
    header.split(';').find_map(|part| part.trim().strip_prefix("Root=")).filter(|root| !root.is_empty())
}

/// Whether SQS delivered `message` before: its `ApproximateReceiveCount` attribute is above 1
/// (a handler that failed, a lost ack, a visibility timeout that ran out, a DLQ redrive). Then
/// its effect may already be recorded, by this sandbox or another; a batch handler may read
/// ahead for it. A producer's retry is a new message with a count of 1, so `false` says nothing
/// of duplicates. A missing or unreadable count is `false`.
pub fn may_be_redelivery(message: &SqsMessage) -> bool {
    // Bounded before parsing: a count has at most ten digits.
    let count = message.attributes.get("ApproximateReceiveCount").filter(|c| c.len() <= 10);
    count.and_then(|c| c.parse::<u64>().ok()).is_some_and(|c| c > 1)
}

/// Whether the batch comes from a FIFO queue: its order within a message group must hold.
fn is_fifo(message: &SqsMessage) -> bool {
    message.attributes.contains_key("MessageGroupId")
        || message.event_source_arn.as_deref().is_some_and(|arn| arn.ends_with(".fifo"))
}

driver::entry_points! {
    Sqs: SqsEvent => SqsMessage => SqsBatchResponse;
    /// Processes a batch record by record; returns the messages to deliver again.
    ///
    /// Standard queues: records run concurrently, at most [`Options::concurrency`] at once, except
    /// that records with equal [`Handler::key`]s run one after the other, in batch order (one of
    /// them in flight at a time, counting as one towards `concurrency`). A failure there holds
    /// nothing back: each later same-key record is still attempted, and an in-batch duplicate of a
    /// record that took effect gets its answer from it. FIFO queues: groups run concurrently,
    /// records within a group in order, and other groups go on whatever one group does. Within a
    /// group:
    ///
    /// - after a failure that a later delivery may undo (retryable, in progress elsewhere, a panic,
    ///   not started for the deadline), the rest of the group is reported failed, not started: the
    ///   failed record may yet take effect, and running the later ones first would break the
    ///   group's order (a debit would overtake the credit it needs);
    /// - after a [`Retry::Never`](crate::Retry::Never) failure (malformed, key reused) the
    ///   group goes on, and that record alone is reported failed, bound for the dead-letter queue.
    ///   It never takes effect, so no later record can depend on it having taken effect, and order
    ///   is kept for every record that does. Holding the group back would not make it succeed: SQS
    ///   hands a group's messages out together, so the held back records would be received as often
    ///   as it is and reach `maxReceiveCount`, and the DLQ, with it. (If a fixed consumer later
    ///   applies it from a DLQ redrive, it takes effect after the group's later records, as any
    ///   dead-lettered message does: see docs/ordering.md.)
    ///
    ///   That holds only while `Never` is a verdict on the message itself, which no later
    ///   delivery changes. A handler must report a fault of the store, the provider or the
    ///   deployment (a 5xx, a missing table, a setting left out) [`Retry::Now`](crate::Retry::Now)
    ///   or [`Retry::AfterFix`](crate::Retry::AfterFix), however long its fix takes: reported
    ///   `Never`, the group would go on without a record that takes effect once
    ///   fixed and redriven, and a debit behind a credit failed that way is rejected for good.
    ///
    /// A handler that panics fails its record alone, whether it panics while its future runs or
    /// while `handle` makes it: the record is reported failed with the panic's message (redacted)
    /// logged at error, a FIFO group holds back its rest (a panic may be transient), and the other
    /// records go on. The first call replaces the process's panic hook with a redacting one
    /// ([`panics::install_hook`](crate::panics::install_hook)).
    ///
    /// Every log line of the batch is in an `invocation` span (`request_id`, `function_name`,
    /// `function_version`, `cold_start`) and each record's in a `record` span (`message_id`,
    /// `xray_trace_id` from the message's `AWSTraceHeader`), and within it the handler's own
    /// ([`Handler::span`]). At the end one EMF line counts the batch's dispositions and holds what
    /// the handler added to [`Options::metrics`] (see [`metrics`](crate::metrics)).
    process;
    /// The common `main`: serves SQS batches from the Lambda runtime until it stops, each through
    /// [`process`] with `handler` and `options`. Build both once, before calling it:
    ///
    /// ```no_run
    /// use effectively_once_lambda::events::{Context, SqsMessage};
    /// use effectively_once_lambda::sqs::{self, Options};
    /// use effectively_once_lambda::{Handled, Handler, RecordResult};
    ///
    /// struct Orders;
    ///
    /// impl Handler<SqsMessage> for Orders {
    ///     async fn handle(&self, _message: &SqsMessage, _context: &Context) -> RecordResult {
    ///         Ok(Handled::Applied)
    ///     }
    /// }
    ///
    /// #[tokio::main(flavor = "current_thread")]
    /// async fn main() -> Result<(), effectively_once_lambda::Error> {
    ///     sqs::run(Orders, Options::new("orders")).await
    /// }
    /// ```
    run;
    /// [`process`] for a [`BatchHandler`]: the batch in as few calls as order allows.
    ///
    /// - Standard queues: one call with every message.
    /// - FIFO queues: rounds, each a call with the next message of every group still going; a
    ///   failure that a later delivery may undo holds back the rest of its group (reported failed,
    ///   not started), a permanent one does not, as in [`process`].
    /// - A round is not started within [`Options::deadline_margin`] of the deadline: its messages
    ///   are reported failed, retryable.
    /// - A call that panics is not trusted with any of its messages: each is handled again alone
    ///   through [`Handler::handle`] (with its panic caught); what the panicking call committed is
    ///   found by the handler's own idempotency and answered as a duplicate.
    ///
    /// Partial batch failures are reported per message, as in [`process`], with the same spans,
    /// logs and metrics.
    process_batch;
    /// [`run`] for a [`BatchHandler`]: each batch through [`process_batch`].
    run_batch;
    /// [`process`] for an [`OrderedBatchHandler`]: every message in **one** call, in batch order,
    /// each with its message group ([`OrderedBatch::lane`]) and the message before it in its group
    /// ([`OrderedBatch::after`]); the handler applies them in that order and lets no message take
    /// effect behind one of its group answered with a failure a later delivery may undo.
    ///
    /// - Standard queues: one call, nothing ordered (no lanes, no predecessors), nothing held.
    /// - FIFO queues: the answers are read in batch order and the hold-back is exactly
    ///   [`process_batch`]'s: a message behind such a failure is reported failed, not started,
    ///   whatever the handler answered (an `Applied` there is logged at error as a breach); one
    ///   behind a permanent failure is not held.
    /// - Within [`Options::deadline_margin`] of the deadline there is no call: every message is
    ///   reported failed, retryable.
    /// - A call that panics or answers for another number of messages is not trusted: the batch is
    ///   handled again one message at a time through [`Handler::handle`], as [`process`] does.
    process_ordered;
    /// [`run`] for an [`OrderedBatchHandler`]: each batch through [`process_ordered`].
    run_ordered;
}

/// SQS parks nothing: a queue's DLQ keeps its poison.
const PARKS: Option<&str> = None;

fn source(_event: &SqsEvent) -> driver::Source {
    driver::Source::default()
}

/// The event's records, as Lambda gave them.
fn records(event: SqsEvent) -> Vec<SqsMessage> {
    event.records
}

/// FIFO: by message group, a failure that may pass holding back the rest of its group.
/// Standard: by the handler's key ([`Handler::key`]), nothing held back, on the record path;
/// each message alone on the batch path (the batch handler answers in-batch keys itself).
fn groups<H: Handler<SqsMessage>>(handler: &H, records: &[SqsMessage], rounds: bool) -> driver::Groups {
    if records.first().is_some_and(is_fifo) {
        let group = |record: &SqsMessage| [Some(record.attributes.get("MessageGroupId").cloned().unwrap_or_default())];
        driver::joined_groups(records, true, group)
    } else if rounds {
        driver::joined_groups(records, false, |_| [None::<String>])
    } else {
        driver::joined_groups(records, false, |record| [driver::key_of(handler, record)])
    }
}

/// Every failed record's message id.
fn respond(records: &[SqsMessage], results: &[RecordResult]) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for (record, result) in records.iter().zip(results) {
        if result.is_err() {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = record.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
    }
    response
}

#[cfg(test)]
mod redelivery_tests {
    use super::*;

    #[test]
    fn a_receive_count_above_one_may_be_a_redelivery() {
        let message = |count: Option<&str>| {
            let mut message = SqsMessage::default();
            if let Some(count) = count {
                message.attributes.insert("ApproximateReceiveCount".into(), count.into());
            }
            message
        };
        assert!(!may_be_redelivery(&message(None)));
        assert!(!may_be_redelivery(&message(Some("1"))));
        assert!(may_be_redelivery(&message(Some("2"))));
        assert!(may_be_redelivery(&message(Some("17"))));
        assert!(!may_be_redelivery(&message(Some("two"))));
        assert!(!may_be_redelivery(&message(Some("0"))));
        assert!(!may_be_redelivery(&message(Some(&"9".repeat(11)))), "over ten digits is not parsed");
    }
}
