//! The DynamoDB Streams driver: records in order; the first retryable failure's sequence
//! number is reported and the rest of the batch left, so Lambda resumes from there (a
//! checkpoint). A permanent failure is logged and counted, never the checkpoint.

use std::future::Future;
use std::time::Duration;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use lambda_runtime::LambdaEvent;
use tracing::Instrument;

use crate::metrics::{self, Counts, Emf, Metrics};
use crate::{deadline_of, now_ms, panics, redact_emails, Disposition, RecordError, RecordResult, Retry};

/// Handles one stream record.
pub trait Handler: Send + Sync {
    /// Handles `record`; `deadline_ms` is the invocation's deadline, when known.
    fn handle(&self, record: &EventRecord, deadline_ms: Option<u64>) -> impl Future<Output = RecordResult> + Send;

    /// The handler's own span for `record`, entered inside the driver's `record` span
    /// (`event_name`, `sequence`): its fields are the handler's to name, recorded in `handle`
    /// through `tracing::Span::current()`. Default: none.
    fn span(&self, record: &EventRecord) -> tracing::Span {
        let _ = record;
        tracing::Span::none()
    }
}

/// Driver settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which event names the handler sees (default: `INSERT` only); others are skipped.
    pub event_names: Vec<String>,
    /// No record is started with less than this before the deadline. Default 1 s.
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
        Options {
            event_names: vec!["INSERT".into()],
            deadline_margin: Duration::from_secs(1),
            emf: Metrics::new(emf),
            metrics: true,
        }
    }
}

/// Processes a batch in order, stopping at the first retryable failure and reporting its sequence
/// number. Records after it are redelivered with it, so handlers must be idempotent: they are.
///
/// A [`Retry::Permanent`] failure is not the checkpoint: it is logged at error with its sequence
/// number and reason (redacted), counted (`Failed`, and `PermanentFailures` beside it on the
/// invocation's EMF line), and the batch goes on. A retry cannot change a permanent answer, and a shard's
/// checkpoint holds every record behind it: under `MaximumRetryAttempts` -1 for up to the
/// record age limit (24 h), after which the mapping discards the batch, innocent records
/// included. The handler records the record's fate where it can (the receipts relay marks its
/// row FAILED); the log line is the trace of the rest.
///
/// A handler that panics is a failure at its record: the checkpoint is there, with the panic's
/// message (redacted) logged at error. The first call replaces the process's panic hook with a
/// redacting one ([`panics::install_hook`]).
///
/// Every log line of the batch is in an `invocation` span (`request_id`, `function_name`,
/// `function_version`, `cold_start`) and each record's in a `record` span (`event_name`,
/// `sequence`; stream records carry no trace header), and within it the handler's own ([`Handler::span`]). At the end one EMF line counts
/// the batch's dispositions, skipped records included, and holds what the handler added to
/// [`Options::emf`] (see [`metrics`]).
pub async fn process<H: Handler>(handler: &H, event: LambdaEvent<Event>, options: &Options) -> DynamoDbEventResponse {
    let (cold_start, span) = metrics::invocation_span(options.emf.emf(), &event.context);
    let request_id = event.context.request_id.clone();
    let (response, counts) = batch(handler, &event, options).instrument(span).await;
    options.emf.flush(&counts, cold_start, &request_id, options.metrics);
    response
}

/// The common `main`: serves DynamoDB Streams batches from the Lambda runtime until it stops,
/// each through [`process`] with `handler` and `options`. Build both once, before calling it:
///
/// ```no_run
/// use effectively_once_lambda::events::EventRecord;
/// use effectively_once_lambda::streams::{self, Handler, Options};
/// use effectively_once_lambda::{Disposition, RecordResult};
///
/// struct Relay;
///
/// impl Handler for Relay {
///     async fn handle(&self, _record: &EventRecord, _deadline_ms: Option<u64>) -> RecordResult {
///         Ok(Disposition::Applied)
///     }
/// }
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), effectively_once_lambda::Error> {
///     streams::run(Relay, Options::new("relay")).await
/// }
/// ```
pub async fn run<H: Handler>(handler: H, options: Options) -> Result<(), lambda_runtime::Error> {
    let (handler, options) = (&handler, &options);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<Event>| async move {
        Ok::<DynamoDbEventResponse, lambda_runtime::Error>(process(handler, event, options).await)
    }))
    .await
}

async fn batch<H: Handler>(
    handler: &H,
    event: &LambdaEvent<Event>,
    options: &Options,
) -> (DynamoDbEventResponse, Counts) {
    panics::install_hook();
    panics::warn_if_aborting();
    let deadline = deadline_of(&event.context);
    let mut counts = Counts::default();
    let mut response = DynamoDbEventResponse::default();
    for record in &event.payload.records {
        let sequence = record.change.sequence_number.clone();
        let span = tracing::info_span!("record", event_name = %record.event_name, sequence = sequence.as_deref().unwrap_or(""));
        let mut panicked = false;
        // The handler's own span (its fields), a child of `span`: the outcome is logged in it.
        let mut own = tracing::Span::none();
        let result = if !options.event_names.contains(&record.event_name) {
            Ok(Disposition::Skipped)
        } else if deadline.is_some_and(|d| now_ms() + options.deadline_margin.as_millis() as u64 >= d) {
            Err(RecordError::retryable("not started: the invocation's deadline is near"))
        } else {
            let handle = || {
                own = span.in_scope(|| handler.span(record));
                handler.handle(record, deadline).instrument(own.clone())
            };
            match panics::catch(handle).instrument(span.clone()).await {
                Ok(result) => result,
                Err(panic) => {
                    span.in_scope(|| {
                        tracing::error!(sequence = sequence.as_deref().unwrap_or(""), panic = %panic, "record handler panicked; checkpoint here")
                    });
                    panicked = true;
                    Err(RecordError::retryable(format!("handler panicked: {panic}")))
                }
            }
        };
        counts.add(&result);
        if let Err(error) = result {
            if error.retry == Retry::Permanent && !panicked {
                span.in_scope(|| own.in_scope(|| {
                    tracing::error!(
                        sequence = sequence.as_deref().unwrap_or(""),
                        reason = %redact_emails(&error.reason),
                        "record failed permanently; not retried (a retry cannot change a permanent answer), the batch goes on"
                    )
                }));
                continue;
            }
            if !panicked {
                span.in_scope(|| {
                    own.in_scope(
                        || tracing::warn!(retry = ?error.retry, reason = %error.reason, "record failed; checkpoint here"),
                    )
                });
            }
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = sequence;
            response.batch_item_failures.push(failure);
            break;
        }
    }
    (response, counts)
}
