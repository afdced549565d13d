//! One record as the driver core sees it: what it needs of a trigger's record ([`Record`]), and
//! one record's execution (screened, not started near the deadline, the handler's panic caught)
//! with the outcome's log line. Every batch path (record by record, in rounds, in one call)
//! runs and logs a record through these.

use lambda_runtime::Context;
use serde::Serialize;
use tracing::Instrument;

#[cfg(doc)]
use super::invocation::log_counts;
use super::{Handler, Options};
#[cfg(doc)]
use crate::park;
use crate::park::Coordinates;
use crate::{now_ms, panics, redact_emails, RecordError, RecordResult, Retry};

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

/// Whether the invocation's deadline is within the margin: a record is not started then.
pub(super) fn too_late(context: &Context, options: &Options) -> bool {
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
pub(super) fn not_started<R: Record>(record: &R, earlier: &str) -> RecordResult {
    let reason = format!("not started: {earlier} before it in its group failed");
    record.span().in_scope(|| tracing::debug!(reason, "record not started"));
    Err(RecordError::retryable(reason))
}

/// One record: screened, not started near the deadline, or the handler's answer with its panic
/// caught; the outcome logged in the record's spans.
pub(super) async fn one<R: Record, H: Handler<R>>(
    handler: &H,
    record: &R,
    context: &Context,
    options: &Options,
) -> RecordResult {
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

/// A record's outcome logged in its span ([`log`]). A record done logs at debug only: when
/// debug is off, its span is not even made (a span's fields are formatted when it is made,
/// which per record cost more than the handler's own work in a batch).
pub(super) fn log_in<R: Record>(record: &R, result: &RecordResult) {
    if result.is_ok() && !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    record.span().in_scope(|| log::<R>(result));
}

/// The outcome's log line: done at debug (the batch's counts are at info, [`log_counts`]), a
/// permanent failure at error, one that may pass at warn, each saying what the trigger does
/// with it.
/// A reason is the handler's text, and may quote the record: its addresses are redacted.
pub(super) fn log<R: Record>(result: &RecordResult) {
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
