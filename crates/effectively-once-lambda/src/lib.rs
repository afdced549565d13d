//! Batch drivers for Lambda triggers: each record is handled alone, and only records whose
//! effect is durable are acknowledged.
//!
//! - [`driver`]: what every trigger shares: the [`Handler`], [`BatchHandler`] and
//!   [`OrderedBatchHandler`] traits (a record and the invocation's `Context`), [`Options`], the
//!   per-record execution (deadline margin, panic isolation, spans, the outcome's log line),
//!   ordered groups, batch rounds and the ordered batch in one call.
//! - [`body`]: typed payloads: a [`BodyHandler`] gets the body decoded with serde into its own
//!   type through [`Typed`]; a payload that does not decode fails its record alone, permanently.
//! - [`sqs`]: partial batch failures (`batchItemFailures`), bounded concurrency, FIFO order per
//!   message group, same-key records in turn.
//! - [`streams`]: DynamoDB Streams in order, the checkpoint at the first record a later delivery
//!   may still make take effect; event names chosen in [`Options::event_names`].
//! - [`kinesis`]: Kinesis Data Streams, partition keys concurrently and in order within a key,
//!   the checkpoint as for streams.
//! - [`kafka`]: Amazon MSK and self-managed Kafka, partitions concurrently and in offset order,
//!   each failing partition resumed at its first record not durably done.
//! - [`park`]: on those three stream triggers, a record that fails permanently is parked in a
//!   destination (an SQS queue) before the position passes it, or holds the position.
//! - [`metrics`]: one CloudWatch Embedded Metric Format line per invocation (`ColdStart`, every
//!   outcome of a record ([`Handled`], [`Retry`]), and the handler's own metrics), in the namespace and under the `Function`
//!   dimension the environment names (`POWERTOOLS_METRICS_NAMESPACE`, `AWS_LAMBDA_FUNCTION_NAME`).
//! - Logs: every line of a batch is in an `invocation` span (`request_id`, `function_name`,
//!   `function_version`, `cold_start`); each SQS record's in a `record` span with its
//!   `message_id` and the X-Ray `xray_trace_id` of its `AWSTraceHeader`.
//! - [`panics`]: a record whose handler panics fails alone; the rest of the batch goes on.
//! - `testing` (feature `test-util`): an event builder per trigger, for a handler's tests.
//!
//! # Rust version and your Cargo.toml
//!
//! Rust 1.85 or newer. The drivers choose no runtime flavour: your `main` does (`tokio` with
//! `macros` and `rt` for `#[tokio::main(flavor = "current_thread")]`; `lambda_runtime` itself turns
//! on tokio's `rt-multi-thread`), and turns on `lambda_runtime`'s `tracing` feature for
//! `lambda_runtime::tracing::init_default_subscriber`. Your `main` needs no `#![recursion_limit]`:
//! the drivers box each invocation's future and each handler call's. See `docs/packaging.md` in
//! the repository.
// docs.rs (nightly, `--cfg docsrs`): each feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod body;
pub mod driver;
pub mod kafka;
pub mod kinesis;
pub mod metrics;
pub mod panics;
pub mod park;
pub mod sqs;
pub mod streams;
#[cfg(feature = "test-util")]
pub mod testing;

pub use body::{BodyBatchHandler, BodyHandler, Payload, Typed};
pub use driver::{BatchHandler, Handler, Options, OrderedBatch, OrderedBatchHandler};

/// The event types the drivers take and answer with, and the runtime's, re-exported so a
/// function needs no `aws_lambda_events` or `lambda_runtime` dependency of its own.
pub mod events {
    pub use aws_lambda_events::dynamodb::StreamViewType;
    pub use aws_lambda_events::encodings::{Base64Data, SecondTimestamp};
    pub use aws_lambda_events::event::dynamodb::{Event as DynamoDbEvent, EventRecord, StreamRecord};
    pub use aws_lambda_events::event::kafka::{KafkaEvent, KafkaRecord};
    pub use aws_lambda_events::event::kinesis::{
        KinesisEncryptionType, KinesisEvent, KinesisEventRecord, KinesisRecord,
    };
    pub use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
    pub use aws_lambda_events::event::streams::{
        DynamoDbBatchItemFailure, DynamoDbEventResponse, KinesisBatchItemFailure, KinesisEventResponse,
    };
    pub use lambda_runtime::{Context, LambdaEvent};
    /// A DynamoDB item as stream images carry it (`Keys`, `NewImage`, `OldImage`).
    pub use serde_dynamo::Item;
}

/// The error the drivers' `run` functions return: `lambda_runtime`'s.
pub use lambda_runtime::Error;

/// Every email address in free text redacted (`a***@example.com`): the drivers run it over panic
/// messages. Re-exported from the `effectively-once-redact` crate, which `effectively-once-effects` shares, so one scan serves both.
pub use effectively_once_redact::redact_emails;

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// What a handler did with a record it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// The effect was applied now.
    Applied,
    /// A duplicate: the effect had been applied (or decided) before; nothing done.
    Duplicate,
    /// A business rejection, recorded; not to be retried.
    Rejected,
    /// Not for this handler (say, a stream record that is not an insert).
    Skipped,
}

/// Whether a failed record may succeed when delivered again: the core's one classification,
/// which every library error gives ([`effectively_once::Error::retry`]). The drivers give a
/// record up only when [`Retry::Never`]: on SQS it goes to the dead-letter queue after the
/// queue's maximum receive count, on a stream it is parked ([`park`]), either way with its
/// reason logged. Every other class keeps it: delivered again, or the stream's checkpoint.
pub use effectively_once::Retry;

/// A record that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// Retry or give up.
    pub retry: Retry,
    /// Why, for the log. No personal data.
    pub reason: String,
}

impl RecordError {
    /// A failure of the given class.
    pub fn new(retry: Retry, reason: impl Into<String>) -> Self {
        RecordError { retry, reason: reason.into() }
    }

    /// A failure a later delivery may not see ([`Retry::Now`]).
    pub fn retryable(reason: impl Into<String>) -> Self {
        RecordError::new(Retry::Now, reason)
    }

    /// A failure no delivery will fix: the record itself is at fault ([`Retry::Never`]).
    pub fn permanent(reason: impl Into<String>) -> Self {
        RecordError::new(Retry::Never, reason)
    }

    /// Another attempt holds the record's key ([`Retry::InProgressElsewhere`]).
    pub fn in_progress_elsewhere(reason: impl Into<String>) -> Self {
        RecordError::new(Retry::InProgressElsewhere, reason)
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.retry, self.reason)
    }
}

impl std::error::Error for RecordError {}

/// An idempotency failure as a record's result, in the error's own class
/// ([`effectively_once::Error::retry`]), as the effects crate maps one
/// (`effectively_once_effects`' `From<Error> for RecordError`), so every consumer reports a
/// failure alike:
///
/// - another attempt holds the key: [`Retry::InProgressElsewhere`];
/// - the message itself at fault (the key reused with another payload, an invalid key, a
///   stored response too large to replay): [`Retry::Never`], to the DLQ (SQS) or parked and
///   passed (streams), logged with its reason;
/// - throttling, an unreachable store, a lease that ended: [`Retry::Now`];
/// - a fault of the store or the deployment that no retry fixes but a deploy does (DynamoDB's
///   `ValidationException` for a table of another key schema, a record that does not read
///   back), and a write whose own condition failed with nothing to answer otherwise
///   ([`ErrorKind::ConditionFailed`](effectively_once::ErrorKind::ConditionFailed)): stock or
///   funds may arrive, and the code, not the message, lacks the answer: [`Retry::AfterFix`].
///   Given up, a stream would be committed past the record and lose it; held, it is the
///   checkpoint until the condition passes or a deploy answers it (`Tx::otherwise`), or it
///   reaches the on-failure destination after the retries.
///
/// The reason is the error's chain, addresses redacted.
impl From<effectively_once::Error> for RecordError {
    fn from(error: effectively_once::Error) -> Self {
        let reason = redact_emails(&effectively_once::ErrorChain(&error).to_string());
        RecordError::new(error.retry(), reason)
    }
}

/// An invalid key: permanent (the message's business id breaks the key rules).
impl From<effectively_once::KeyError> for RecordError {
    fn from(error: effectively_once::KeyError) -> Self {
        RecordError::from(effectively_once::Error::from(error))
    }
}

/// [`Idempotency::run`](effectively_once::Idempotency::run)'s failure: the idempotency layer's
/// as above, the handler's through its own conversion.
impl<E: Into<RecordError>> From<effectively_once::RunError<E>> for RecordError {
    fn from(error: effectively_once::RunError<E>) -> Self {
        match error {
            effectively_once::RunError::Idempotency(error) => error.into(),
            effectively_once::RunError::Handler(error) => error.into(),
        }
    }
}

/// A handler's answer for one record.
pub type RecordResult = Result<Handled, RecordError>;

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use effectively_once::{Begin, Config, Idempotency, InMemoryStore, Key, RunError, StoreError, StoreErrorKind};

    use super::{RecordError, Retry};

    /// Each library error lands on the retry class its cause calls for.
    #[tokio::test]
    async fn library_errors_convert_into_record_results() {
        let idempotency = Idempotency::new(InMemoryStore::new(), Config::default());
        let key = Key::new("orders", "o-1").unwrap();
        let Ok(Begin::Claimed(_held)) = idempotency.begin::<_, u32>(&key, "a").await else { panic!("claimed") };
        let in_progress = idempotency.begin::<_, u32>(&key, "a").await.unwrap_err();
        assert_eq!(RecordError::from(in_progress).retry, Retry::InProgressElsewhere);
        let reused = idempotency.begin::<_, u32>(&key, "b").await.unwrap_err();
        assert_eq!(RecordError::from(reused).retry, Retry::Never);
        let invalid = Key::new("orders", "has a space").unwrap_err();
        assert_eq!(RecordError::from(invalid).retry, Retry::Never);
        let throttled = effectively_once::Error::from(StoreError::new(StoreErrorKind::Throttled, "slow down"));
        assert_eq!(RecordError::from(throttled).retry, Retry::Now);
        let misconfigured = effectively_once::Error::from(StoreError::new(StoreErrorKind::Misconfigured, "no table"));
        assert_eq!(RecordError::from(misconfigured).retry, Retry::Now);
        // A request the store refuses for good is the deployment's fault: held, not given up.
        let refused = effectively_once::Error::from(StoreError::new(StoreErrorKind::Other, "ValidationException"));
        assert_eq!(RecordError::from(refused).retry, Retry::AfterFix);
        let unreadable = effectively_once::Error::from(StoreError::new(StoreErrorKind::Malformed, "no status"));
        assert_eq!(RecordError::from(unreadable).retry, Retry::AfterFix);
        // A write whose condition failed with nothing to answer otherwise: stock may arrive.
        let condition = effectively_once::Error::from(StoreError::new(StoreErrorKind::ConditionFailed, "write 0"));
        assert_eq!(RecordError::from(condition).retry, Retry::AfterFix);
        let too_large = effectively_once::Error::from(StoreError::new(StoreErrorKind::TooLarge, "400 KB"));
        assert_eq!(RecordError::from(too_large).retry, Retry::Never);
        let handler: RunError<RecordError> = RunError::Handler(RecordError::permanent("bad order"));
        assert_eq!(RecordError::from(handler), RecordError::permanent("bad order"));
        let layer: RunError<RecordError> =
            RunError::Idempotency(effectively_once::Error::from(StoreError::new(StoreErrorKind::Unavailable, "down")));
        assert_eq!(RecordError::from(layer).retry, Retry::Now);
    }
}
