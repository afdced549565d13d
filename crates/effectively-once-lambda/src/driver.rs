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

use lambda_runtime::Context;

#[cfg(doc)]
use crate::metrics;
use crate::metrics::{Emf, Metrics};
use crate::park::{self, Poison};
use crate::RecordResult;

// This file holds what a user of a trigger module writes against: the handler traits and the
// options. The core is filed by concept beside it: `trigger` (what a trigger module gives the
// core, and the entry points it gets back), `groups` (how a batch's records group and what each
// waits for), `record` (one record's execution and log line), `run` (groups run record by record
// or in rounds, holding back behind a failure), `ordered` (a batch in one call), `settle` (a
// stream's permanent failures parked or held) and `invocation` (one invocation, its span and
// metrics line, and the run loop). Public: the traits, `Options` and `OrderedBatch`.
mod groups;
mod invocation;
mod ordered;
mod record;
mod run;
mod settle;
mod trigger;

pub(crate) use groups::{joined_groups, key_of, Groups};
pub(crate) use invocation::{in_rounds, one_by_one, serve, serve_rounds};
pub(crate) use ordered::{in_one_call, serve_ordered};
pub use ordered::{OrderedBatch, OrderedBatchHandler};
pub(crate) use record::{may_take_effect_later, Record};
pub(crate) use trigger::{checkpoint, entry_points, Source, Trigger};

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
