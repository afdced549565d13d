//! The DynamoDB Streams driver: records in order; the first retryable failure's sequence
//! number is reported and the rest of the batch left, so Lambda resumes from there (a
//! checkpoint). A permanent failure is logged and counted, never the checkpoint.

use std::future::Future;
use std::time::Duration;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use lambda_runtime::LambdaEvent;
use tracing::Instrument;

use crate::metrics::Counts;
use crate::{deadline_of, now_ms, panics, redact_emails, Disposition, RecordError, RecordResult, Retry};

/// Handles one stream record.
pub trait Handler: Send + Sync {
    /// Handles `record`; `deadline_ms` is the invocation's deadline, when known.
    fn handle(&self, record: &EventRecord, deadline_ms: Option<u64>) -> impl Future<Output = RecordResult> + Send;
}

/// Driver settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which event names the handler sees (default: `INSERT` only); others are skipped.
    pub event_names: Vec<String>,
    /// No record is started with less than this before the deadline. Default 1 s.
    pub deadline_margin: Duration,
    /// The `Function` dimension of the metrics.
    pub function: String,
    /// Print the EMF metrics line after each batch. Default true.
    pub metrics: bool,
}

impl Options {
    /// Defaults for a function name.
    pub fn new(function: impl Into<String>) -> Self {
        Options {
            event_names: vec!["INSERT".into()],
            deadline_margin: Duration::from_secs(1),
            function: function.into(),
            metrics: true,
        }
    }
}

/// Processes a batch in order, stopping at the first retryable failure and reporting its sequence
/// number. Records after it are redelivered with it, so handlers must be idempotent: they are.
///
/// A [`Retry::Permanent`] failure is not the checkpoint: it is logged at error with its sequence
/// number and reason (redacted), counted (`Failed`, and `PermanentFailures` on its own EMF
/// line), and the batch goes on. A retry cannot change a permanent answer, and a shard's
/// checkpoint holds every record behind it: under `MaximumRetryAttempts` -1 for up to the
/// record age limit (24 h), after which the mapping discards the batch, innocent records
/// included. The handler records the record's fate where it can (the receipts relay marks its
/// row FAILED); the log line is the trace of the rest.
///
/// A handler that panics is a failure at its record: the checkpoint is there, with the panic's
/// message (redacted) logged at error. The first call replaces the process's panic hook with a
/// redacting one ([`panics::install_hook`]).
pub async fn process<H: Handler>(handler: &H, event: LambdaEvent<Event>, options: &Options) -> DynamoDbEventResponse {
    panics::install_hook();
    panics::warn_if_aborting();
    let deadline = deadline_of(&event.context);
    let mut counts = Counts::default();
    let mut permanent = 0u64;
    let mut response = DynamoDbEventResponse::default();
    for record in &event.payload.records {
        let sequence = record.change.sequence_number.clone();
        let span = tracing::info_span!("record", event_name = %record.event_name, sequence = sequence.as_deref().unwrap_or(""), event_id = tracing::field::Empty);
        let mut panicked = false;
        let result = if !options.event_names.contains(&record.event_name) {
            Ok(Disposition::Skipped)
        } else if deadline.is_some_and(|d| now_ms() + options.deadline_margin.as_millis() as u64 >= d) {
            Err(RecordError::retryable("not started: the invocation's deadline is near"))
        } else {
            match panics::catch(|| handler.handle(record, deadline)).instrument(span.clone()).await {
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
        if let Err(e) = result {
            if e.retry == Retry::Permanent && !panicked {
                span.in_scope(|| {
                    tracing::error!(
                        sequence = sequence.as_deref().unwrap_or(""),
                        reason = %redact_emails(&e.reason),
                        "record failed permanently; not retried (a retry cannot change a permanent answer), the batch goes on"
                    )
                });
                permanent += 1;
                continue;
            }
            if !panicked {
                span.in_scope(
                    || tracing::warn!(retry = ?e.retry, reason = %e.reason, "record failed; checkpoint here"),
                );
            }
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = sequence;
            response.batch_item_failures.push(failure);
            break;
        }
    }
    if options.metrics {
        counts.publish(&options.function);
        if permanent > 0 {
            println!("{}", permanent_emf(&options.function, permanent, now_ms()));
        }
    }
    response
}

/// The EMF line for the permanent failures a batch went past (`PermanentFailures`), apart from
/// `Failed` so an alarm can tell a record given up on from one being retried.
fn permanent_emf(function: &str, count: u64, timestamp_ms: u64) -> String {
    serde_json::json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": crate::metrics::NAMESPACE,
                "Dimensions": [["Function"]],
                "Metrics": [{"Name": "PermanentFailures", "Unit": "Count"}],
            }],
        },
        "Function": function,
        "PermanentFailures": count,
    })
    .to_string()
}
