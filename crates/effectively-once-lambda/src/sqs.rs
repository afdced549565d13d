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

use crate::metrics::{self, Counts, Emf, Metrics};
use crate::{deadline_of, now_ms, panics, RecordError, RecordResult, Retry};

/// Handles one SQS message.
pub trait Handler: Send + Sync {
    /// Handles `message`; `deadline_ms` is the invocation's deadline, when known. The driver
    /// opens a span per record with `message_id` (and `xray_trace_id` when the message carries
    /// an `AWSTraceHeader`), and runs `handle` inside [`Handler::span`] within it.
    fn handle(&self, message: &SqsMessage, deadline_ms: Option<u64>) -> impl Future<Output = RecordResult> + Send;

    /// The message's business key (an idempotency key, say), when it has one: on a standard
    /// queue, records of one batch with equal keys run one after the other, in batch order, so an
    /// in-batch duplicate is answered from the first instead of finding it in progress and being
    /// redelivered. `None` (the default) puts no constraint on the record. Keep it cheap: it is
    /// called once per record before any runs. A FIFO queue ignores it (a message group already
    /// runs in order).
    fn key(&self, message: &SqsMessage) -> Option<String> {
        let _ = message;
        None
    }

    /// The handler's own span for `message`, entered inside the driver's `record` span: its
    /// fields are the handler's to name (`tracing::info_span!("order", order_id =
    /// tracing::field::Empty)`), recorded in `handle` through `tracing::Span::current()`.
    /// Default: none, and the record span alone.
    fn span(&self, message: &SqsMessage) -> tracing::Span {
        let _ = message;
        tracing::Span::none()
    }
}

impl<H: Handler + ?Sized> Handler for &H {
    fn handle(&self, message: &SqsMessage, deadline_ms: Option<u64>) -> impl Future<Output = RecordResult> + Send {
        (**self).handle(message, deadline_ms)
    }

    fn key(&self, message: &SqsMessage) -> Option<String> {
        (**self).key(message)
    }

    fn span(&self, message: &SqsMessage) -> tracing::Span {
        (**self).span(message)
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
    /// Where the metrics go (namespace, `Function` dimension, service: see [`metrics`]), and
    /// the handle a handler adds metrics of its own through: clone it into the handler.
    pub emf: Metrics,
    /// Print the EMF metrics line after each batch. Default true.
    pub metrics: bool,
}

impl Options {
    /// Defaults for a function the code calls `function`: the metrics' namespace, `Function`
    /// dimension and service are read from the environment now, once ([`Emf::from_env`];
    /// `function` where Lambda's `AWS_LAMBDA_FUNCTION_NAME` is absent). Build the options once,
    /// outside the handler closure.
    pub fn new(function: &str) -> Self {
        Options::with_emf(Emf::from_env(function))
    }

    /// Defaults, with metrics going to `emf`.
    pub fn with_emf(emf: Emf) -> Self {
        Options { concurrency: 10, deadline_margin: Duration::from_secs(1), emf: Metrics::new(emf), metrics: true }
    }
}

/// The X-Ray trace id in an `AWSTraceHeader` (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=...;Sampled=1`):
/// its `Root`.
pub fn trace_id(header: &str) -> Option<&str> {
    header.split(';').find_map(|part| part.trim().strip_prefix("Root=")).filter(|root| !root.is_empty())
}

/// Whether the batch comes from a FIFO queue: its order within a message group must hold.
fn is_fifo(message: &SqsMessage) -> bool {
    message.attributes.contains_key("MessageGroupId")
        || message.event_source_arn.as_deref().is_some_and(|arn| arn.ends_with(".fifo"))
}

/// Processes a batch; returns the messages to redeliver.
///
/// Standard queues: records run concurrently, at most `concurrency` at once, except that records
/// with equal [`Handler::key`]s run one after the other, in batch order (one of them in flight
/// at a time, counting as one towards `concurrency`). A failure there holds nothing back: each
/// later same-key record is still attempted, and an in-batch duplicate of a record that took
/// effect gets its answer from it. FIFO queues:
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
///
/// Every log line of the batch is in an `invocation` span (`request_id`, `function_name`,
/// `function_version`, `cold_start`) and each record's in a `record` span (`message_id`,
/// `xray_trace_id` from the message's `AWSTraceHeader`), and within it the handler's own ([`Handler::span`]). At the end one EMF line
/// counts the batch's dispositions and holds what the handler added to [`Options::emf`]
/// (see [`metrics`]).
pub async fn process<H: Handler>(handler: &H, event: LambdaEvent<SqsEvent>, options: &Options) -> SqsBatchResponse {
    let (cold_start, span) = metrics::invocation_span(options.emf.emf(), &event.context);
    let request_id = event.context.request_id.clone();
    let (response, counts) = batch(handler, event, options).instrument(span).await;
    options.emf.flush(&counts, cold_start, &request_id, options.metrics);
    response
}

/// The common `main`: serves SQS batches from the Lambda runtime until it stops, each through
/// [`process`] with `handler` and `options`. Build both once, before calling it:
///
/// ```no_run
/// use effectively_once_lambda::events::SqsMessage;
/// use effectively_once_lambda::sqs::{self, Handler, Options};
/// use effectively_once_lambda::{Disposition, RecordResult};
///
/// struct Orders;
///
/// impl Handler for Orders {
///     async fn handle(&self, _message: &SqsMessage, _deadline_ms: Option<u64>) -> RecordResult {
///         Ok(Disposition::Applied)
///     }
/// }
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), effectively_once_lambda::Error> {
///     sqs::run(Orders, Options::new("orders")).await
/// }
/// ```
pub async fn run<H: Handler>(handler: H, options: Options) -> Result<(), lambda_runtime::Error> {
    let (handler, options) = (&handler, &options);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(process(handler, event, options).await)
    }))
    .await
}

/// Handles a batch's messages together, for a handler that does better than one message at a
/// time (one transaction for the batch, say). It is a [`Handler`] too: the driver falls back to
/// one message at a time through [`Handler::handle`] when a call panics.
pub trait BatchHandler: Handler {
    /// Handles `messages`, returning one result per message, in the same order; `deadline_ms`
    /// is the invocation's deadline, when known. On a FIFO queue each call holds at most one
    /// message per message group, the next of its group, so a group's order holds whatever
    /// the handler does within a call.
    fn handle_batch(
        &self,
        messages: &[&SqsMessage],
        deadline_ms: Option<u64>,
    ) -> impl Future<Output = Vec<RecordResult>> + Send;
}

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
pub async fn process_batch<H: BatchHandler>(
    handler: &H,
    event: LambdaEvent<SqsEvent>,
    options: &Options,
) -> SqsBatchResponse {
    let (cold_start, span) = metrics::invocation_span(options.emf.emf(), &event.context);
    let request_id = event.context.request_id.clone();
    let (response, counts) = whole(handler, event, options).instrument(span).await;
    options.emf.flush(&counts, cold_start, &request_id, options.metrics);
    response
}

/// [`run`] for a [`BatchHandler`]: each batch through [`process_batch`].
pub async fn run_batch<H: BatchHandler>(handler: H, options: Options) -> Result<(), lambda_runtime::Error> {
    let (handler, options) = (&handler, &options);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(process_batch(handler, event, options).await)
    }))
    .await
}

/// The positions of a FIFO batch's records, by message group, groups in order of first
/// appearance, each in batch order.
fn fifo_groups(records: &[SqsMessage]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut index_of: HashMap<&str, usize> = HashMap::new();
    for (position, record) in records.iter().enumerate() {
        let group = record.attributes.get("MessageGroupId").map(String::as_str).unwrap_or("");
        let at = *index_of.entry(group).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[at].push(position);
    }
    groups
}

/// The batch response (every failed record's message id) and the counts of the results, given
/// by position.
fn respond<'r>(
    records: &[SqsMessage],
    results: impl IntoIterator<Item = (usize, &'r RecordResult)>,
) -> (SqsBatchResponse, Counts) {
    let mut counts = Counts::default();
    let mut response = SqsBatchResponse::default();
    for (position, result) in results {
        counts.add(result);
        if result.is_err() {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = records[position].message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
    }
    (response, counts)
}

async fn whole<H: BatchHandler>(
    handler: &H,
    event: LambdaEvent<SqsEvent>,
    options: &Options,
) -> (SqsBatchResponse, Counts) {
    panics::install_hook();
    panics::warn_if_aborting();
    let deadline = deadline_of(&event.context);
    let records = &event.payload.records;
    let mut results: Vec<Option<RecordResult>> = records.iter().map(|_| None).collect();
    // The queues a round takes from: every group on a FIFO queue, the whole batch otherwise.
    let mut queues: Vec<std::collections::VecDeque<usize>> = if records.first().is_some_and(is_fifo) {
        fifo_groups(records).into_iter().map(Into::into).collect()
    } else {
        (0..records.len()).map(|position| std::collections::VecDeque::from([position])).collect()
    };
    let mut held: Vec<Option<String>> = queues.iter().map(|_| None).collect();
    loop {
        let round: Vec<(usize, usize)> = queues
            .iter_mut()
            .enumerate()
            .filter(|(at, _)| held[*at].is_none())
            .filter_map(|(at, queue)| queue.pop_front().map(|position| (at, position)))
            .collect();
        if round.is_empty() {
            break;
        }
        let positions: Vec<usize> = round.iter().map(|(_, position)| *position).collect();
        for (position, result) in run_round(handler, records, &positions, deadline, options).await {
            let may_take_effect_later = result.as_ref().is_err_and(|e| e.retry != Retry::Permanent);
            if may_take_effect_later {
                if let Some((at, _)) = round.iter().find(|(_, p)| *p == position) {
                    held[*at].get_or_insert_with(|| records[position].message_id.clone().unwrap_or_default());
                }
            }
            results[position] = Some(result);
        }
    }
    for (at, queue) in queues.iter().enumerate() {
        for &position in queue {
            let earlier = held[at].as_deref().unwrap_or("");
            results[position] = Some(Err(RecordError::retryable(format!(
                "not started: message {earlier} before it in its group failed"
            ))));
        }
    }
    let results: Vec<RecordResult> = results
        .into_iter()
        .map(|result| result.unwrap_or_else(|| Err(RecordError::retryable("not handled"))))
        .collect();
    respond(records, results.iter().enumerate())
}

/// One call of the handler with the messages at `positions`; the results by position.
async fn run_round<H: BatchHandler>(
    handler: &H,
    records: &[SqsMessage],
    positions: &[usize],
    deadline: Option<u64>,
    options: &Options,
) -> Vec<(usize, RecordResult)> {
    let mut out = Vec::with_capacity(positions.len());
    let mut called = Vec::with_capacity(positions.len());
    for &position in positions {
        let message = &records[position];
        let refused = if deadline.is_some_and(|d| now_ms() + options.deadline_margin.as_millis() as u64 >= d) {
            Some(RecordError::retryable("not started: the invocation's deadline is near"))
        } else if message.message_id.is_none() {
            Some(RecordError::permanent("message has no messageId"))
        } else {
            None
        };
        match refused {
            Some(error) => {
                let result = Err(error);
                record_span(message).in_scope(|| log(&result));
                out.push((position, result));
            }
            None => called.push(position),
        }
    }
    if called.is_empty() {
        return out;
    }
    let messages: Vec<&SqsMessage> = called.iter().map(|&position| &records[position]).collect();
    match panics::catch(|| handler.handle_batch(&messages, deadline)).await {
        Ok(results) if results.len() == called.len() => {
            for (position, result) in called.into_iter().zip(results) {
                record_span(&records[position]).in_scope(|| log(&result));
                out.push((position, result));
            }
        }
        Ok(results) => {
            tracing::error!(
                returned = results.len(),
                messages = called.len(),
                "batch handler returned a result count unlike its messages'; each handled again alone"
            );
            out.extend(alone(handler, records, called, deadline, options).await);
        }
        Err(panic) => {
            tracing::error!(panic = %panic, "batch handler panicked; each of its messages handled again alone");
            out.extend(alone(handler, records, called, deadline, options).await);
        }
    }
    out
}

/// Messages one at a time through the per-message path (its panics caught per message).
async fn alone<H: Handler>(
    handler: &H,
    records: &[SqsMessage],
    positions: Vec<usize>,
    deadline: Option<u64>,
    options: &Options,
) -> Vec<(usize, RecordResult)> {
    let mut out = Vec::with_capacity(positions.len());
    for position in positions {
        out.extend(run_group(handler, vec![(position, &records[position])], false, deadline, options).await);
    }
    out
}

fn record_span(message: &SqsMessage) -> tracing::Span {
    let message_id = message.message_id.as_deref().unwrap_or("");
    let span = tracing::info_span!("record", message_id, xray_trace_id = tracing::field::Empty);
    if let Some(trace) = message.attributes.get("AWSTraceHeader").and_then(|h| trace_id(h)) {
        span.record("xray_trace_id", trace);
    }
    span
}

async fn batch<H: Handler>(handler: &H, event: LambdaEvent<SqsEvent>, options: &Options) -> (SqsBatchResponse, Counts) {
    panics::install_hook();
    panics::warn_if_aborting();
    let deadline = deadline_of(&event.context);
    let records = event.payload.records;
    let fifo = records.first().is_some_and(is_fifo);
    let mut groups: Vec<Vec<(usize, &SqsMessage)>> = Vec::new();
    if fifo {
        groups = fifo_groups(&records)
            .into_iter()
            .map(|group| group.into_iter().map(|position| (position, &records[position])).collect())
            .collect();
    } else {
        // Equal keys share a group, in batch order; a record without a key is alone.
        let mut index_of: HashMap<String, usize> = HashMap::new();
        for (position, record) in records.iter().enumerate() {
            // The key is the user's code: one that panics leaves its record alone (no grouping),
            // and the handler's own panic isolation then judges that record; the batch goes on.
            let key = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.key(record))).unwrap_or(None);
            let group_index = match key {
                Some(key) => *index_of.entry(key).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                }),
                None => {
                    groups.push(Vec::new());
                    groups.len() - 1
                }
            };
            groups[group_index].push((position, record));
        }
    }

    // Futures made eagerly, not in a stream's `map` closure: a closure over borrowed records
    // makes the batch future's `Send` unprovable for callers that spawn it.
    let pending: Vec<_> = groups.into_iter().map(|group| run_group(handler, group, fifo, deadline, options)).collect();
    let results: Vec<Vec<(usize, RecordResult)>> =
        stream::iter(pending).buffer_unordered(options.concurrency.max(1)).collect().await;
    let mut results: Vec<(usize, RecordResult)> = results.into_iter().flatten().collect();
    results.sort_by_key(|(i, _)| *i);

    respond(&records, results.iter().map(|(position, result)| (*position, result)))
}

async fn run_group<H: Handler>(
    handler: &H,
    group: Vec<(usize, &SqsMessage)>,
    hold_back: bool,
    deadline: Option<u64>,
    options: &Options,
) -> Vec<(usize, RecordResult)> {
    let mut out = Vec::with_capacity(group.len());
    // The first record of the group that failed in a way a later delivery may undo; the records
    // after it wait for it (see `process`). A permanent failure holds nothing back: the handler
    // answers permanent only for a verdict on the message (malformed, key reused), never for a
    // fault a fix or a moment removes. Only a FIFO group (`hold_back`) holds back: a standard
    // queue's same-key group is sequential for the answer, not for order, so each record is tried.
    let mut held_back_by: Option<String> = None;
    for (position, message) in group {
        let message_id = message.message_id.as_deref().unwrap_or("");
        let span = record_span(message);
        let mut panicked = false;
        // The handler's own span (its fields), a child of `span`: the outcome is logged in it.
        let mut own = tracing::Span::none();
        let result = if let Some(earlier) = &held_back_by {
            Err(RecordError::retryable(format!("not started: message {earlier} before it in its group failed")))
        } else if deadline.is_some_and(|d| now_ms() + options.deadline_margin.as_millis() as u64 >= d) {
            Err(RecordError::retryable("not started: the invocation's deadline is near"))
        } else if message.message_id.is_none() {
            Err(RecordError::permanent("message has no messageId"))
        } else {
            let handle = || {
                own = span.in_scope(|| handler.span(message));
                handler.handle(message, deadline).instrument(own.clone())
            };
            match panics::catch(handle).instrument(span.clone()).await {
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
            span.in_scope(|| own.in_scope(|| log(&result)));
        }
        let may_take_effect_later = result.as_ref().is_err_and(|e| e.retry != Retry::Permanent);
        if hold_back && may_take_effect_later && held_back_by.is_none() {
            held_back_by = Some(message_id.to_owned());
        }
        out.push((position, result));
    }
    out
}

fn log(result: &RecordResult) {
    match result {
        Ok(disposition) => tracing::info!(?disposition, "record done"),
        Err(error) => match error.retry {
            Retry::Permanent => {
                tracing::error!(reason = %error.reason, "record failed permanently; reported failed, bound for the DLQ")
            }
            Retry::Retryable | Retry::InProgressElsewhere => {
                tracing::warn!(retry = ?error.retry, reason = %error.reason, "record failed; reported failed for redelivery")
            }
        },
    }
}
