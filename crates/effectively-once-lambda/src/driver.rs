//! What every trigger shares: the handler traits, the options, the execution of one record
//! (deadline margin, panic isolation, spans, the outcome's log line), the three ways a batch runs
//! (record by record in ordered groups, in rounds through a [`BatchHandler`], or in one call
//! through an [`OrderedBatchHandler`]), the invocation around them (its span, the EMF line) and
//! the run loop.
//!
//! A trigger module ([`crate::sqs`], [`crate::streams`], [`crate::kinesis`]) says only what is
//! its own: how its records are grouped and ordered, and how failures go back to Lambda (SQS
//! names each failed message; a stream names the first record it must resume from).

use std::future::Future;
use std::time::Duration;

use lambda_runtime::{Context, LambdaEvent};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

use crate::metrics::{self, Counts, Emf, Metrics};
use crate::park::{self, Coordinates, Parcel, Poison};
use crate::{now_ms, panics, redact_emails, RecordError, RecordResult, Retry};

mod ordered;

pub(crate) use ordered::{in_one_call, serve_ordered};
pub use ordered::{OrderedBatch, OrderedBatchHandler};

/// Handles one record of a trigger's batch: `R` is the trigger's record type
/// ([`SqsMessage`](crate::events::SqsMessage), a DynamoDB Streams
/// [`EventRecord`](crate::events::EventRecord), a
/// [`KinesisEventRecord`](crate::events::KinesisEventRecord)). For a typed body decoded with
/// serde, implement [`BodyHandler`](crate::BodyHandler) and wrap it in [`Typed`](crate::Typed).
pub trait Handler<R>: Send + Sync {
    /// Handles `record`. `context` is the invocation's (`request_id`, `deadline`,
    /// `invoked_function_arn`): hand `context.deadline` to
    /// [`Idempotency::with_deadline`](effectively_once::Idempotency::with_deadline) so a lease
    /// ends with the invocation. The driver opens a `record` span (the trigger's identifiers)
    /// and runs `handle` inside [`Handler::span`] within it.
    fn handle(&self, record: &R, context: &Context) -> impl Future<Output = RecordResult> + Send;

    /// The record's business key (an idempotency key, say), when it has one: records of one
    /// batch with equal keys run one after the other, in batch order, so an in-batch duplicate
    /// is answered from the first instead of finding it in progress and being delivered again.
    /// On Kinesis and on the DynamoDB Streams batch path such records join the group of their
    /// partition key or item; a FIFO queue ignores it (a message group already runs in order),
    /// and so does the DynamoDB Streams record-by-record path (the whole batch runs in order).
    /// `None` (the default) puts no constraint on the record. Keep it cheap: it is called once
    /// per record before any runs.
    fn key(&self, record: &R) -> Option<String> {
        let _ = record;
        None
    }

    /// The handler's own span for `record`, entered inside the driver's `record` span: its
    /// fields are the handler's to name (`tracing::info_span!("order", order_id =
    /// tracing::field::Empty)`), recorded in `handle` through `tracing::Span::current()`. The
    /// outcome's log line is in it. Default: none, and the record span alone.
    fn span(&self, record: &R) -> tracing::Span {
        let _ = record;
        tracing::Span::none()
    }
}

impl<R, H: Handler<R> + ?Sized> Handler<R> for &H {
    fn handle(&self, record: &R, context: &Context) -> impl Future<Output = RecordResult> + Send {
        (**self).handle(record, context)
    }

    fn key(&self, record: &R) -> Option<String> {
        (**self).key(record)
    }

    fn span(&self, record: &R) -> tracing::Span {
        (**self).span(record)
    }
}

/// Handles a batch's records together, for a handler that does better than one record at a
/// time (one transaction for the batch, say, through `commit_batch`). It is a [`Handler`] too:
/// the driver falls back to one record at a time through [`Handler::handle`] when a call
/// panics or answers for another number of records.
pub trait BatchHandler<R>: Handler<R> {
    /// Handles `records`, returning one result per record, in the same order. On an ordered
    /// trigger each call holds at most one record of each ordered group (a FIFO message group,
    /// a stream item, a Kinesis partition key), the next of its group, so a group's order holds
    /// whatever the handler does within a call.
    fn handle_batch(&self, records: &[&R], context: &Context) -> impl Future<Output = Vec<RecordResult>> + Send;
}

/// Driver settings, shared by every trigger.
#[derive(Debug, Clone)]
pub struct Options {
    /// Groups in flight at once: SQS records (standard queues) or message groups (FIFO),
    /// Kinesis partition keys. DynamoDB Streams records run one at a time in order. Default 10.
    pub concurrency: usize,
    /// A record is not started when less than this remains before the deadline; it is reported
    /// failed and delivered again. Default 1 s: several transactions' worth, and a third of the
    /// shortest (3 s) function timeout.
    pub deadline_margin: Duration,
    /// DynamoDB Streams only: the event names the handler sees (default `INSERT` only). A
    /// record of another name is skipped: counted `Skipped`, and logged at debug with its event
    /// name. Name `MODIFY` and `REMOVE` here to see them.
    pub event_names: Vec<String>,
    /// Where the metrics go (namespace, `Function` dimension, service: see [`metrics`]), and the
    /// handle a handler adds metrics of its own through: clone it into the handler.
    pub metrics: Metrics,
    /// Print the EMF metrics line after each batch. Default true.
    pub emit_metrics: bool,
    /// Kafka, Kinesis and DynamoDB Streams: what becomes of a record that failed permanently
    /// ([`park`]). Default [`Poison::Unchosen`]: `run` refuses to start, `process` holds such a
    /// record as if it were retryable. Set it with [`Options::park_in`] or, by name,
    /// [`Options::drop_poison`]. SQS ignores it: a queue's DLQ is its park.
    pub poison: Poison,
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
        Options {
            concurrency: 10,
            deadline_margin: Duration::from_secs(1),
            event_names: vec!["INSERT".into()],
            metrics: Metrics::new(emf),
            emit_metrics: true,
            poison: Poison::Unchosen,
        }
    }

    /// Parks a stream's poison in `destination` ([`park::SqsQueue`] with the `sqs` feature)
    /// before the position passes it.
    pub fn park_in(mut self, destination: impl park::Destination + 'static) -> Self {
        self.poison = Poison::Park(std::sync::Arc::new(destination));
        self
    }

    /// Drops a stream's poison: each such record is logged at error and counted, and the position
    /// passes it with nothing kept. Only for a function whose permanent failures are worth nothing.
    pub fn drop_poison(mut self) -> Self {
        self.poison = Poison::Drop;
        self
    }
}

/// A trigger's record, as the driver core needs it.
pub(crate) trait Record: Sync + Serialize {
    /// How the trigger names the record back to Lambda (an SQS message id, a sequence number).
    fn id(&self) -> Option<std::borrow::Cow<'_, str>>;
    /// The driver's `record` span, with the trigger's identifiers.
    fn span(&self) -> tracing::Span;
    /// Why the record cannot be handled at all, or why it is not for the handler, before any
    /// handler sees it.
    fn screen(&self, options: &Options) -> Option<RecordResult> {
        let _ = options;
        None
    }
    /// What a permanent failure of this trigger becomes, for the log line.
    const PERMANENT: &'static str;
    /// What a failure that may pass becomes, for the log line.
    const RETRY: &'static str;
    /// What a panic becomes, for the log line.
    const PANICKED: &'static str;
    /// Where the record sits in its source, for its parcel ([`park`]); `None` on a trigger that
    /// parks nothing (SQS: its DLQ keeps poison).
    fn coordinates(&self) -> Option<Coordinates> {
        None
    }
    /// The record's event source ARN, when the record carries it (Kinesis, DynamoDB Streams).
    fn source_arn(&self) -> Option<&str> {
        None
    }
}

/// What a batch's event says of its source beside its records, for parcels (Kafka's ARN and
/// bootstrap servers are the event's, not the record's).
#[derive(Debug, Default)]
pub(crate) struct Source {
    pub(crate) event_source_arn: Option<String>,
    pub(crate) bootstrap_servers: Option<String>,
}

/// A batch's ordered groups ([`joined_groups`]): the positions of each group, in batch order,
/// and, with `hold_back`, what each record waits for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Groups {
    /// Positions into the records, each group in order; groups in order of their first record.
    pub(crate) groups: Vec<Vec<usize>>,
    /// For each position, the earlier positions it follows: the previous record with each of its
    /// ordering keys (its partition, its business key). A record is held back when one of them
    /// may still take effect, and only then: an earlier record of another partition that merely
    /// shares the group does not hold it.
    pub(crate) after: Vec<Vec<usize>>,
    /// Whether a record that may take effect later holds back those that follow it.
    pub(crate) hold_back: bool,
    /// For each position, its lane: its first ordering key (a topic-partition, a partition key,
    /// an item, a message group) when `hold_back`; `None` when nothing is held back (a standard
    /// queue). What an [`OrderedBatchHandler`] sees as [`OrderedBatch::lane`].
    pub(crate) lanes: Vec<Option<String>>,
}

/// A trigger: its event, its records, how they group, and its answer to Lambda.
pub(crate) trait Trigger {
    /// The event Lambda sends.
    type Event: DeserializeOwned + Send + Sync + 'static;
    /// One of its records.
    type Record: Record + 'static;
    /// The answer Lambda reads.
    type Response: Serialize + Send;
    /// Lambda's name for the event source (`aws:kinesis`), when the trigger parks poison.
    const PARKS: Option<&'static str>;

    /// What the event says of its source beside its records.
    fn source(event: &Self::Event) -> Source;

    /// The event's records, in the order Lambda gave them (grouped by topic-partition, each in
    /// offset order, for Kafka).
    fn records(event: Self::Event) -> Vec<Self::Record>;

    /// The records' ordered groups and what each record waits for. `rounds`: for the batch path.
    fn groups<H: Handler<Self::Record>>(handler: &H, records: &[Self::Record], rounds: bool) -> Groups;

    /// The answer for the records' results, by position.
    fn respond(records: &[Self::Record], results: &[RecordResult]) -> Self::Response;
}

/// A batch record by record ([`run_groups`]), in one invocation.
pub(crate) async fn one_by_one<T: Trigger, H: Handler<T::Record>>(
    handler: &H,
    event: LambdaEvent<T::Event>,
    options: &Options,
) -> T::Response {
    let LambdaEvent { payload, context } = event;
    let source = T::source(&payload);
    let records = &T::records(payload);
    let batch = async {
        let groups = T::groups(handler, records, false);
        let mut results = run_groups(handler, records, groups, &context, options).await;
        let parked = settle::<T>(records, &mut results, &source, &context, options).await;
        (T::respond(records, &results), count(&results, parked))
    };
    invocation(options, &context, batch).await
}

/// A batch through a [`BatchHandler`] in rounds ([`run_rounds`]), in one invocation.
pub(crate) async fn in_rounds<T: Trigger, H: BatchHandler<T::Record>>(
    handler: &H,
    event: LambdaEvent<T::Event>,
    options: &Options,
) -> T::Response {
    let LambdaEvent { payload, context } = event;
    let source = T::source(&payload);
    let records = &T::records(payload);
    let batch = async {
        let groups = T::groups(handler, records, true);
        let mut results = run_rounds(handler, records, groups, &context, options).await;
        let parked = settle::<T>(records, &mut results, &source, &context, options).await;
        (T::respond(records, &results), count(&results, parked))
    };
    invocation(options, &context, batch).await
}

/// One invocation: its span (`request_id`, `function_name`, `function_version`, `cold_start`),
/// the batch run inside it, and the EMF line after it.
async fn invocation<T>(options: &Options, context: &Context, batch: impl Future<Output = (T, Counts)>) -> T {
    panics::install_hook();
    panics::warn_if_aborting();
    let (cold_start, span) = metrics::invocation_span(options.metrics.emf(), context);
    let (response, counts) = batch.instrument(span.clone()).await;
    span.in_scope(|| log_counts(&counts));
    options.metrics.flush(&counts, cold_start, &context.request_id, options.emit_metrics);
    response
}

/// The run loop, record by record: serves the trigger's events from the Lambda runtime until it
/// stops, each through [`one_by_one`].
///
/// Each event's future is boxed (one allocation per invocation), as is each handler call's
/// ([`panics::catch`]): rustc lays out a boxed future on its own, so the runtime's, the driver's
/// and the handler's nesting never add up, and a user's `main` stays within the default
/// `recursion_limit` of 128 however deep its handler's future nests. Four mains here needed
/// `#![recursion_limit = "256"]` before.
pub(crate) async fn serve<T: Trigger, H: Handler<T::Record>>(
    handler: H,
    options: Options,
) -> Result<(), lambda_runtime::Error> {
    refuse_unchosen_poison::<T>(&options)?;
    let (handler, options) = (&handler, &options);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<T::Event>| async move {
        Ok::<T::Response, lambda_runtime::Error>(Box::pin(one_by_one::<T, H>(handler, event, options)).await)
    }))
    .await
}

/// [`serve`] through a [`BatchHandler`], each event through [`in_rounds`].
pub(crate) async fn serve_rounds<T: Trigger, H: BatchHandler<T::Record>>(
    handler: H,
    options: Options,
) -> Result<(), lambda_runtime::Error> {
    refuse_unchosen_poison::<T>(&options)?;
    let (handler, options) = (&handler, &options);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<T::Event>| async move {
        Ok::<T::Response, lambda_runtime::Error>(Box::pin(in_rounds::<T, H>(handler, event, options)).await)
    }))
    .await
}

/// A stream function that has not said where its poison goes does not start: losing a record
/// that failed permanently is a choice ([`Options::drop_poison`]), never a default.
fn refuse_unchosen_poison<T: Trigger>(options: &Options) -> Result<(), lambda_runtime::Error> {
    match (T::PARKS, &options.poison) {
        (Some(trigger), Poison::Unchosen) => Err(format!(
            "a {trigger} function needs a park destination for records that fail permanently: \
             Options::park_in(park::SqsQueue::from_env(..)?) with {} set, or Options::drop_poison() to lose them",
            park::PARK_QUEUE_URL
        )
        .into()),
        _ => Ok(()),
    }
}

/// A trigger module's six entry points, with their docs: `process` and `run` (record by
/// record), `process_batch` and `run_batch` (through a [`BatchHandler`], in rounds),
/// `process_ordered` and `run_ordered` (through an [`OrderedBatchHandler`], in one call), each a
/// call into the core with the trigger's types. A macro, so the modules do not repeat the same
/// six functions.
macro_rules! entry_points {
    (
        $trigger:ident: $event:ty => $record:ty => $response:ty;
        $(#[$process:meta])* process;
        $(#[$run:meta])* run;
        $(#[$process_batch:meta])* process_batch;
        $(#[$run_batch:meta])* run_batch;
        $(#[$process_ordered:meta])* process_ordered;
        $(#[$run_ordered:meta])* run_ordered;
    ) => {
        /// The trigger, for the core: its types; `records`, `groups` and `respond` are the module's.
        pub(crate) struct $trigger;

        impl $crate::driver::Trigger for $trigger {
            type Event = $event;
            type Record = $record;
            type Response = $response;
            const PARKS: Option<&'static str> = PARKS;

            fn source(event: &$event) -> $crate::driver::Source {
                source(event)
            }

            fn records(event: $event) -> Vec<$record> {
                records(event)
            }

            fn groups<H: Handler<$record>>(handler: &H, records: &[$record], rounds: bool) -> $crate::driver::Groups {
                groups(handler, records, rounds)
            }

            fn respond(records: &[$record], results: &[$crate::RecordResult]) -> $response {
                respond(records, results)
            }
        }

        $(#[$process])*
        pub async fn process<H: Handler<$record>>(
            handler: &H,
            event: lambda_runtime::LambdaEvent<$event>,
            options: &Options,
        ) -> $response {
            $crate::driver::one_by_one::<$trigger, H>(handler, event, options).await
        }

        $(#[$run])*
        pub async fn run<H: Handler<$record>>(handler: H, options: Options) -> Result<(), lambda_runtime::Error> {
            $crate::driver::serve::<$trigger, H>(handler, options).await
        }

        $(#[$process_batch])*
        pub async fn process_batch<H: BatchHandler<$record>>(
            handler: &H,
            event: lambda_runtime::LambdaEvent<$event>,
            options: &Options,
        ) -> $response {
            $crate::driver::in_rounds::<$trigger, H>(handler, event, options).await
        }

        $(#[$run_batch])*
        pub async fn run_batch<H: BatchHandler<$record>>(
            handler: H,
            options: Options,
        ) -> Result<(), lambda_runtime::Error> {
            $crate::driver::serve_rounds::<$trigger, H>(handler, options).await
        }

        $(#[$process_ordered])*
        pub async fn process_ordered<H: OrderedBatchHandler<$record>>(
            handler: &H,
            event: lambda_runtime::LambdaEvent<$event>,
            options: &Options,
        ) -> $response {
            $crate::driver::in_one_call::<$trigger, H>(handler, event, options).await
        }

        $(#[$run_ordered])*
        pub async fn run_ordered<H: OrderedBatchHandler<$record>>(
            handler: H,
            options: Options,
        ) -> Result<(), lambda_runtime::Error> {
            $crate::driver::serve_ordered::<$trigger, H>(handler, options).await
        }
    };
}
pub(crate) use entry_points;

/// Whether the invocation's deadline is within the margin: a record is not started then.
fn too_late(context: &Context, options: &Options) -> bool {
    effectively_once::epoch_deadline_ms(context.deadline)
        .is_some_and(|deadline| now_ms() + options.deadline_margin.as_millis() as u64 >= deadline)
}

/// Whether a result leaves the record to take effect on a later delivery: the rest of its
/// ordered group waits for it. A permanent failure holds nothing back: it never takes effect.
pub(crate) fn may_take_effect_later(result: &RecordResult) -> bool {
    result.as_ref().is_err_and(|e| e.retry != Retry::Never)
}

/// A record held back behind `earlier`, its group's failure: reported failed (SQS) or after the
/// checkpoint (streams), and logged at debug only: the failure it waits for has its own line.
fn not_started<R: Record>(record: &R, earlier: &str) -> RecordResult {
    let reason = format!("not started: {earlier} before it in its group failed");
    record.span().in_scope(|| tracing::debug!(reason, "record not started"));
    Err(RecordError::retryable(reason))
}

/// One record: screened, not started near the deadline, or the handler's answer with its panic
/// caught; the outcome logged in the record's spans.
async fn one<R: Record, H: Handler<R>>(handler: &H, record: &R, context: &Context, options: &Options) -> RecordResult {
    let span = record.span();
    if let Some(result) = record.screen(options) {
        // A record passed over (`Ok`) was logged by the screen, at debug.
        if result.is_err() {
            span.in_scope(|| log::<R>(&result));
        }
        return result;
    }
    if too_late(context, options) {
        let result = Err(RecordError::retryable("not started: the invocation's deadline is near"));
        span.in_scope(|| log::<R>(&result));
        return result;
    }
    // The handler's own span (its fields), a child of `span`: the outcome is logged in it.
    let mut own = tracing::Span::none();
    let handle = || {
        own = span.in_scope(|| handler.span(record));
        handler.handle(record, context).instrument(own.clone())
    };
    match panics::catch(handle).instrument(span.clone()).await {
        Ok(result) => {
            span.in_scope(|| own.in_scope(|| log::<R>(&result)));
            result
        }
        Err(panic) => {
            let id = record.id().unwrap_or_default();
            span.in_scope(|| tracing::error!(id = %id, panic = %panic, "{}", R::PANICKED));
            Err(RecordError::retryable(format!("handler panicked: {panic}")))
        }
    }
}

/// Runs `groups` record by record, the groups concurrently, at most [`Options::concurrency`] at
/// once, each in order; the results by position. With `hold_back`, a record whose predecessor
/// ([`Groups::after`]) may take effect later is not started (reported failed, retryable):
/// running it first would break its partition's or its key's order.
pub(crate) async fn run_groups<R: Record, H: Handler<R>>(
    handler: &H,
    records: &[R],
    groups: Groups,
    context: &Context,
    options: &Options,
) -> Vec<RecordResult> {
    use futures_util::stream::{self, StreamExt};
    let Groups { groups, after, hold_back, .. } = groups;
    let after = (after.as_slice(), hold_back);
    // Futures made eagerly, not in a stream's `map` closure: a closure over borrowed records
    // makes the batch future's `Send` unprovable for callers that spawn it.
    let pending: Vec<_> =
        groups.into_iter().map(|group| run_group(handler, records, group, after, context, options)).collect();
    let done: Vec<Vec<(usize, RecordResult)>> =
        stream::iter(pending).buffer_unordered(options.concurrency.max(1)).collect().await;
    by_position(records.len(), done.into_iter().flatten())
}

async fn run_group<R: Record, H: Handler<R>>(
    handler: &H,
    records: &[R],
    group: Vec<usize>,
    (after, hold_back): (&[Vec<usize>], bool),
    context: &Context,
    options: &Options,
) -> Vec<(usize, RecordResult)> {
    let mut out = Vec::with_capacity(group.len());
    // The records of the group that may take effect later, with the failure each waits for.
    let mut holding = Holding::default();
    for position in group {
        let record = &records[position];
        let result = match holding.blocker(&after[position]) {
            Some(earlier) if hold_back => not_started(record, &earlier),
            _ => one(handler, record, context, options).await,
        };
        if hold_back {
            holding.note(records, position, &after[position], &result);
        }
        out.push((position, result));
    }
    out
}

/// The records of a batch that may take effect later, each with the failure it waits for (its
/// own id when it failed itself): a record following one of them is held back.
#[derive(Default)]
struct Holding(std::collections::HashMap<usize, String>);

impl Holding {
    /// The failure the first held predecessor waits for, if any.
    fn blocker(&self, after: &[usize]) -> Option<String> {
        after.iter().find_map(|earlier| self.0.get(earlier).cloned())
    }

    /// Notes `position`'s result: held when it may take effect later.
    fn note<R: Record>(&mut self, records: &[R], position: usize, after: &[usize], result: &RecordResult) {
        if may_take_effect_later(result) {
            let cause =
                self.blocker(after).unwrap_or_else(|| format!("record {}", records[position].id().unwrap_or_default()));
            self.0.insert(position, cause);
        }
    }
}

/// Runs `groups` through a [`BatchHandler`] in rounds, each one call with the next record of
/// every group still going; a record following one that may take effect later is held back
/// (reported failed, not started), one following a permanent failure is not. A round is not
/// started within the deadline margin: its records are reported failed, retryable. A call that
/// panics is not trusted with any of its records: each is handled again alone through
/// [`Handler::handle`] (its panic caught), and what the panicking call committed is found by the
/// handler's own idempotency and answered as a duplicate. The results by position.
pub(crate) async fn run_rounds<R: Record, H: BatchHandler<R>>(
    handler: &H,
    records: &[R],
    groups: Groups,
    context: &Context,
    options: &Options,
) -> Vec<RecordResult> {
    let Groups { groups, after, hold_back, .. } = groups;
    let mut results: Vec<Option<RecordResult>> = records.iter().map(|_| None).collect();
    let mut queues: Vec<std::collections::VecDeque<usize>> = groups.into_iter().map(Into::into).collect();
    let mut holding = Holding::default();
    loop {
        let mut round: Vec<usize> = Vec::with_capacity(queues.len());
        for queue in &mut queues {
            // A group's next record, past those held back (their predecessors ran in earlier
            // rounds: a group's records are in order).
            while let Some(position) = queue.pop_front() {
                match holding.blocker(&after[position]).filter(|_| hold_back) {
                    Some(earlier) => {
                        let result = not_started(&records[position], &earlier);
                        holding.note(records, position, &after[position], &result);
                        results[position] = Some(result);
                    }
                    None => {
                        round.push(position);
                        break;
                    }
                }
            }
        }
        if round.is_empty() {
            break;
        }
        for (&position, result) in round.iter().zip(run_round(handler, records, &round, context, options).await) {
            if hold_back {
                holding.note(records, position, &after[position], &result);
            }
            results[position] = Some(result);
        }
    }
    results.into_iter().map(|result| result.unwrap_or_else(|| Err(RecordError::retryable("not handled")))).collect()
}

/// One call of the handler with the records at `positions`; their results in that order.
async fn run_round<R: Record, H: BatchHandler<R>>(
    handler: &H,
    records: &[R],
    positions: &[usize],
    context: &Context,
    options: &Options,
) -> Vec<RecordResult> {
    let mut out: Vec<Option<RecordResult>> = positions.iter().map(|_| None).collect();
    let mut called = Vec::with_capacity(positions.len());
    let late = too_late(context, options);
    for (at, &position) in positions.iter().enumerate() {
        let record = &records[position];
        let refused = record
            .screen(options)
            .or_else(|| late.then(|| Err(RecordError::retryable("not started: the invocation's deadline is near"))));
        match refused {
            Some(result) => {
                if result.is_err() {
                    log_in(record, &result);
                }
                out[at] = Some(result);
            }
            None => called.push(at),
        }
    }
    if !called.is_empty() {
        let batch: Vec<&R> = called.iter().map(|&at| &records[positions[at]]).collect();
        let answers = match panics::catch(|| handler.handle_batch(&batch, context)).await {
            Ok(results) if results.len() == called.len() => Some(results),
            Ok(results) => {
                tracing::error!(
                    returned = results.len(),
                    records = called.len(),
                    "batch handler returned a result count unlike its records'; each handled again alone"
                );
                None
            }
            Err(panic) => {
                tracing::error!(panic = %panic, "batch handler panicked; each of its records handled again alone");
                None
            }
        };
        match answers {
            Some(results) => {
                for (&at, result) in called.iter().zip(results) {
                    log_in(&records[positions[at]], &result);
                    out[at] = Some(result);
                }
            }
            None => {
                for &at in &called {
                    out[at] = Some(one(handler, &records[positions[at]], context, options).await);
                }
            }
        }
    }
    out.into_iter().map(|result| result.unwrap_or_else(|| Err(RecordError::retryable("not handled")))).collect()
}

fn by_position(len: usize, results: impl Iterator<Item = (usize, RecordResult)>) -> Vec<RecordResult> {
    let mut out: Vec<Option<RecordResult>> = (0..len).map(|_| None).collect();
    for (position, result) in results {
        out[position] = Some(result);
    }
    out.into_iter().map(|result| result.unwrap_or_else(|| Err(RecordError::retryable("not handled")))).collect()
}

/// A stream's permanent failures, settled before the answer: parked (they stay permanent
/// failures, past which the position may move), or, when parking fails or no destination was
/// chosen, made retryable so the position holds there; dropped only under [`Poison::Drop`].
/// Returns how many were parked. A trigger that parks nothing (SQS) is left as it is.
async fn settle<T: Trigger>(
    records: &[T::Record],
    results: &mut [RecordResult],
    source: &Source,
    context: &Context,
    options: &Options,
) -> u64 {
    let Some(trigger) = T::PARKS else { return 0 };
    let poisoned: Vec<usize> =
        (0..results.len()).filter(|&at| results[at].as_ref().is_err_and(|e| e.retry == Retry::Never)).collect();
    if poisoned.is_empty() {
        return 0;
    }
    let destination = match &options.poison {
        Poison::Drop => {
            for &at in &poisoned {
                records[at].span().in_scope(|| tracing::error!("record dropped: Options::poison is Drop"));
            }
            return 0;
        }
        Poison::Unchosen => {
            for &at in &poisoned {
                hold(&records[at], &mut results[at], "no park destination was chosen (Options::poison)");
            }
            return 0;
        }
        Poison::Park(destination) => destination,
    };
    let parcels: Vec<Parcel> = poisoned.iter().map(|&at| parcel(trigger, &records[at], &results[at], source)).collect();
    let parking = panics::catch(|| destination.park(&parcels));
    // Bounded by the deadline: an answer that names the unparked poison beats no answer, after
    // which Lambda would deliver the whole batch again and every parcel would be sent again.
    let parking = async {
        match park_budget(context, options) {
            Some(budget) => tokio::time::timeout(budget, parking).await.unwrap_or_else(|_| {
                Ok(vec![Err("parking outlasted the invocation's deadline".to_owned()); parcels.len()])
            }),
            None => parking.await,
        }
    };
    let parked = match parking.await {
        Ok(parked) => parked,
        Err(panic) => vec![Err(format!("the park destination panicked: {panic}")); parcels.len()],
    };
    let mut count = 0;
    for (at, (&position, parcel)) in poisoned.iter().zip(&parcels).enumerate() {
        let record = &records[position];
        match parked.get(at) {
            Some(Ok(())) => {
                count += 1;
                record.span().in_scope(|| tracing::warn!(coordinates = %parcel.coordinates, "record parked"));
            }
            Some(Err(why)) => {
                hold(record, &mut results[position], &format!("parking it failed: {}", redact_emails(why)))
            }
            None => hold(record, &mut results[position], "the park destination did not answer for it"),
        }
    }
    count
}

/// How long parking may take: until half the deadline margin before the deadline, time enough
/// to answer; `None` when the context has no deadline.
fn park_budget(context: &Context, options: &Options) -> Option<Duration> {
    budget_keeping(context, options.deadline_margin / 2)
}

/// The time left before the deadline but `keep`; `None` when the context has no deadline.
fn budget_keeping(context: &Context, keep: Duration) -> Option<Duration> {
    let deadline = effectively_once::epoch_deadline_ms(context.deadline)?;
    Some(Duration::from_millis(deadline.saturating_sub(now_ms() + keep.as_millis() as u64)))
}

/// A permanent failure that was not parked, held: retryable, so the position stays at it.
fn hold<R: Record>(record: &R, result: &mut RecordResult, why: &str) {
    let reason = result.as_ref().err().map(|e| redact_emails(&e.reason)).unwrap_or_default();
    record.span().in_scope(|| tracing::error!(why, "record failed permanently and is held: not parked"));
    *result = Err(RecordError::retryable(format!("failed permanently ({reason}), held: {why}")));
}

/// The parcel of a record that failed permanently.
fn parcel<R: Record>(trigger: &str, record: &R, result: &RecordResult, source: &Source) -> Parcel {
    Parcel {
        trigger: trigger.to_owned(),
        event_source_arn: record.source_arn().map(str::to_owned).or_else(|| source.event_source_arn.clone()),
        coordinates: record.coordinates().unwrap_or(Coordinates::DynamoDb { sequence_number: String::new() }),
        reason: park::bounded(result.as_ref().err().map(|e| redact_emails(&e.reason)).unwrap_or_default()),
        record: serde_json::to_value(record).unwrap_or_default(),
        bootstrap_servers: source.bootstrap_servers.clone(),
    }
}

/// The counts of a batch's results, `parked` of them parked.
fn count<'r>(results: impl IntoIterator<Item = &'r RecordResult>, parked: u64) -> Counts {
    let mut counts = Counts::default();
    for result in results {
        counts.add(result);
    }
    counts.parked = parked;
    counts
}

/// The batch's one line at info: how many records were applied, rejected, duplicates, in
/// progress elsewhere, failed (of which for good) and skipped. Each failure has its own line
/// besides, with its reason ([`log`]); a record done has one at debug only.
fn log_counts(counts: &Counts) {
    tracing::info!(
        applied = counts.applied,
        rejected = counts.rejected,
        duplicate = counts.duplicate,
        in_progress = counts.in_progress,
        failed = counts.failed,
        permanent = counts.permanent,
        parked = counts.parked,
        skipped = counts.skipped,
        "batch done"
    );
}

/// A record's outcome logged in its span ([`log`]). A record done logs at debug only: when
/// debug is off, its span is not even made (a span's fields are formatted when it is made,
/// which per record cost more than the handler's own work in a batch).
fn log_in<R: Record>(record: &R, result: &RecordResult) {
    if result.is_ok() && !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    record.span().in_scope(|| log::<R>(result));
}

/// The outcome's log line: done at debug (the batch's counts are at info, [`log_counts`]), a
/// permanent failure at error, one that may pass at warn, each saying what the trigger does
/// with it.
/// A reason is the handler's text, and may quote the record: its addresses are redacted.
fn log<R: Record>(result: &RecordResult) {
    match result {
        Ok(disposition) => tracing::debug!(?disposition, "record done"),
        Err(error) => {
            let reason = redact_emails(&error.reason);
            match error.retry {
                Retry::Never => tracing::error!(reason, "{}", R::PERMANENT),
                Retry::Now | Retry::InProgressElsewhere | Retry::AfterFix => {
                    tracing::warn!(retry = ?error.retry, reason, "{}", R::RETRY)
                }
            }
        }
    }
}

/// A stream's answer (DynamoDB Streams' and Kinesis' share one shape): the checkpoint, the id of
/// the first record a later delivery may still make take effect, if any. A permanent failure
/// never will, and is not the checkpoint.
pub(crate) fn checkpoint<R: Record, T: DeserializeOwned>(records: &[R], results: &[RecordResult]) -> T {
    let failures: Vec<serde_json::Value> = results
        .iter()
        .position(may_take_effect_later)
        .map(|at| serde_json::json!({ "itemIdentifier": records[at].id() }))
        .into_iter()
        .collect();
    // Never a default on failure: an empty answer would pass the whole batch. A panic here fails
    // the invocation, and Lambda delivers the batch again.
    serde_json::from_value(serde_json::json!({ "batchItemFailures": failures }))
        .expect("DynamoDB Streams and Kinesis answers share the batchItemFailures shape")
}

/// The handler's key for `record`. The key is the user's code: one that panics leaves its record
/// without one (no grouping), and the handler's own panic isolation then judges that record.
pub(crate) fn key_of<R, H: Handler<R>>(handler: &H, record: &R) -> Option<String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.key(record))).unwrap_or(None)
}

/// Records in one group when they share any of their keys (an ordering key such as a partition
/// key, and the handler's business key), each group in batch order, groups in order of their
/// first record; each record follows the previous record with each of its keys
/// ([`Groups::after`]). Joined by hand (a union of positions, a dozen lines) rather than a crate.
pub(crate) fn joined_groups<R, const N: usize>(
    records: &[R],
    hold_back: bool,
    keys: impl Fn(&R) -> [Option<String>; N],
) -> Groups {
    fn root(parent: &mut [usize], mut at: usize) -> usize {
        while parent[at] != at {
            parent[at] = parent[parent[at]];
            at = parent[at];
        }
        at
    }
    let mut parent: Vec<usize> = (0..records.len()).collect();
    let mut after: Vec<Vec<usize>> = (0..records.len()).map(|_| Vec::new()).collect();
    let mut lanes: Vec<Option<String>> = Vec::with_capacity(records.len());
    let mut last_with: std::collections::HashMap<(usize, String), usize> = std::collections::HashMap::new();
    for (position, record) in records.iter().enumerate() {
        let keys = keys(record);
        // The first key is the trigger's ordering key: the record's lane.
        lanes.push(if hold_back { keys.first().cloned().flatten() } else { None });
        for (kind, key) in keys.into_iter().enumerate() {
            let Some(key) = key else { continue };
            let Some(previous) = last_with.insert((kind, key), position) else { continue };
            if !after[position].contains(&previous) {
                after[position].push(previous);
            }
            let (a, b) = (root(&mut parent, previous), root(&mut parent, position));
            // The earlier position stays the root: groups come out in order of their first record.
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for position in 0..records.len() {
        let at = root(&mut parent, position);
        let index = *group_of.entry(at).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[index].push(position);
    }
    Groups { groups, after, hold_back, lanes }
}

#[cfg(test)]
mod tests {
    use super::joined_groups;

    /// Records sharing either key are one group, in batch order; the rest stay apart.
    #[test]
    fn records_sharing_any_key_are_one_group() {
        let records = [("p1", "a"), ("p2", "b"), ("p3", "a"), ("p2", "c"), ("p4", "d"), ("p3", "e")];
        let groups =
            joined_groups(&records, true, |(partition, key)| [Some(partition.to_string()), Some(key.to_string())]);
        assert_eq!(groups.groups, vec![vec![0, 2, 5], vec![1, 3], vec![4]]);
        assert_eq!(groups.after, vec![vec![], vec![], vec![0], vec![1], vec![], vec![2]]);
        let unkeyed = joined_groups(&records, false, |_| [None::<String>]);
        assert_eq!(unkeyed.groups, (0..6).map(|p| vec![p]).collect::<Vec<_>>());
    }

    /// A chain of shared keys joins groups formed apart, and the group keeps batch order.
    #[test]
    fn a_chain_of_keys_joins_groups_formed_apart() {
        let records = [("p1", "a"), ("p2", "b"), ("p2", "a")];
        let groups =
            joined_groups(&records, true, |(partition, key)| [Some(partition.to_string()), Some(key.to_string())]);
        assert_eq!(groups.groups, vec![vec![0, 1, 2]]);
        // The third follows the second (its partition) and the first (its key); the second
        // follows nothing: the first, of another partition, does not hold it back.
        assert_eq!(groups.after, vec![vec![], vec![], vec![1, 0]]);
    }
}
