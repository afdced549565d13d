//! The SQS batch driver: every record handled alone, failures reported as
//! `batchItemFailures` so only they are redelivered (the event source mapping needs
//! `ReportBatchItemFailures`).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::stream::{self, StreamExt};
use lambda_runtime::LambdaEvent;
use tracing::Instrument;

use crate::metrics::Counts;
use crate::{deadline_of, now_ms, panics, RecordError, RecordResult, Retry};

/// Handles one SQS message.
pub trait Handler: Send + Sync {
    /// Handles `message`; `deadline_ms` is the invocation's deadline, when known. The driver
    /// opens a span per record with `message_id`; record `event_id` into it once parsed.
    fn handle(&self, message: &SqsMessage, deadline_ms: Option<u64>) -> impl Future<Output = RecordResult> + Send;
}

impl<H: Handler + ?Sized> Handler for &H {
    fn handle(&self, message: &SqsMessage, deadline_ms: Option<u64>) -> impl Future<Output = RecordResult> + Send {
        (**self).handle(message, deadline_ms)
    }
}

/// Driver settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Records (standard queues) or message groups (FIFO) in flight at once. Default 10.
    pub concurrency: usize,
    /// A record is not started when less than this remains before the deadline; it is
    /// reported failed and redelivered. Default 1 s: several transactions' worth, and a third of the
    /// shortest (3 s) function timeout.
    pub deadline_margin: Duration,
    /// The `Function` dimension of the metrics.
    pub function: String,
    /// Print the EMF metrics line after each batch. Default true.
    pub metrics: bool,
}

impl Options {
    /// Defaults for a function name.
    pub fn new(function: impl Into<String>) -> Self {
        Options { concurrency: 10, deadline_margin: Duration::from_secs(1), function: function.into(), metrics: true }
    }
}

/// Whether the batch comes from a FIFO queue: its order within a message group must hold.
fn is_fifo(message: &SqsMessage) -> bool {
    message.attributes.contains_key("MessageGroupId")
        || message.event_source_arn.as_deref().is_some_and(|arn| arn.ends_with(".fifo"))
}

/// Processes a batch; returns the messages to redeliver.
///
/// Standard queues: records run concurrently, at most `concurrency` at once. FIFO queues:
/// groups run concurrently, records within a group in order, and other groups go on whatever
/// one group does. Within a group:
///
/// - after a failure that a later delivery may undo (retryable, in progress elsewhere, a panic,
///   not started for the deadline), the rest of the group is reported failed, not started: the
///   failed record may yet take effect, and running the later ones first would break the
///   group's order (a debit would overtake the credit it needs);
/// - after a [`Retry::Permanent`] failure (malformed, key reused) the group goes on, and that
///   record alone is reported failed, bound for the dead-letter queue. It never takes effect,
///   so no later record can depend on it having taken effect, and order is kept for every
///   record that does. Holding the group back would not make it succeed: SQS hands a group's
///   messages out together, so the held back records would be received as often as it is and
///   reach `maxReceiveCount`, and the DLQ, with it. (If a fixed consumer later applies it from
///   a DLQ redrive, it takes effect after the group's later records, as any dead-lettered
///   message does: see docs/ordering.md.)
///
///   That holds only while `Permanent` is a verdict on the message itself, which no later
///   delivery changes. A handler must report a fault of the store, the provider or the
///   deployment (a 5xx, a missing table, a setting left out) retryable, however long its fix
///   takes: reported permanent, the group would go on without a record that takes effect once
///   fixed and redriven, and a debit behind a credit failed that way is rejected for good.
///
/// A handler that panics fails its record alone, on either path, whether it panics while its
/// future runs or while `handle` makes it: the record is reported failed with the panic's
/// message (redacted) logged at error, a FIFO group holds back its rest (a panic may be
/// transient), and the other records go on. The first call replaces the process's panic hook
/// with a redacting one ([`panics::install_hook`]).
pub async fn process<H: Handler>(handler: &H, event: LambdaEvent<SqsEvent>, options: &Options) -> SqsBatchResponse {
    panics::install_hook();
    panics::warn_if_aborting();
    let deadline = deadline_of(&event.context);
    let records = event.payload.records;
    let fifo = records.first().is_some_and(is_fifo);
    let mut groups: Vec<Vec<(usize, &SqsMessage)>> = Vec::new();
    if fifo {
        let mut index_of: HashMap<&str, usize> = HashMap::new();
        for (i, m) in records.iter().enumerate() {
            let group = m.attributes.get("MessageGroupId").map(String::as_str).unwrap_or("");
            let g = *index_of.entry(group).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push((i, m));
        }
    } else {
        groups = records.iter().enumerate().map(|r| vec![r]).collect();
    }

    // Futures made eagerly, not in a stream's `map` closure: a closure over borrowed records
    // makes the batch future's `Send` unprovable for callers that spawn it.
    let pending: Vec<_> = groups.into_iter().map(|group| run_group(handler, group, deadline, options)).collect();
    let results: Vec<Vec<(usize, RecordResult)>> =
        stream::iter(pending).buffer_unordered(options.concurrency.max(1)).collect().await;
    let mut results: Vec<(usize, RecordResult)> = results.into_iter().flatten().collect();
    results.sort_by_key(|(i, _)| *i);

    let mut counts = Counts::default();
    let mut response = SqsBatchResponse::default();
    for (i, result) in &results {
        counts.add(result);
        if result.is_err() {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = records[*i].message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
    }
    if options.metrics {
        counts.publish(&options.function);
    }
    response
}

async fn run_group<H: Handler>(
    handler: &H,
    group: Vec<(usize, &SqsMessage)>,
    deadline: Option<u64>,
    options: &Options,
) -> Vec<(usize, RecordResult)> {
    let mut out = Vec::with_capacity(group.len());
    // The first record of the group that failed in a way a later delivery may undo; the records
    // after it wait for it (see `process`). A permanent failure holds nothing back: the handler
    // answers permanent only for a verdict on the message (malformed, key reused), never for a
    // fault a fix or a moment removes.
    let mut held_back_by: Option<String> = None;
    for (i, message) in group {
        let message_id = message.message_id.as_deref().unwrap_or("");
        let span = tracing::info_span!("record", message_id, event_id = tracing::field::Empty);
        let mut panicked = false;
        let result = if let Some(earlier) = &held_back_by {
            Err(RecordError::retryable(format!("not started: message {earlier} before it in its group failed")))
        } else if deadline.is_some_and(|d| now_ms() + options.deadline_margin.as_millis() as u64 >= d) {
            Err(RecordError::retryable("not started: the invocation's deadline is near"))
        } else if message.message_id.is_none() {
            Err(RecordError::permanent("message has no messageId"))
        } else {
            match panics::catch(|| handler.handle(message, deadline)).instrument(span.clone()).await {
                Ok(result) => result,
                Err(panic) => {
                    span.in_scope(
                        || tracing::error!(message_id, panic = %panic, "record handler panicked; reported failed"),
                    );
                    panicked = true;
                    Err(RecordError::retryable(format!("handler panicked: {panic}")))
                }
            }
        };
        if !panicked {
            span.in_scope(|| log(&result));
        }
        let may_take_effect_later = result.as_ref().is_err_and(|e| e.retry != Retry::Permanent);
        if may_take_effect_later && held_back_by.is_none() {
            held_back_by = Some(message_id.to_owned());
        }
        out.push((i, result));
    }
    out
}

fn log(result: &RecordResult) {
    match result {
        Ok(disposition) => tracing::info!(?disposition, "record done"),
        Err(e) => match e.retry {
            Retry::Permanent => {
                tracing::error!(reason = %e.reason, "record failed permanently; reported failed, bound for the DLQ")
            }
            Retry::Retryable | Retry::InProgressElsewhere => {
                tracing::warn!(retry = ?e.retry, reason = %e.reason, "record failed; reported failed for redelivery")
            }
        },
    }
}
