//! The crate's errors: [`Error`], what a keyed effect returns, which callers branch on by
//! variant and ask [`retry`](Error::retry) (the core's one classification, [`Retry`]);
//! [`CallerError`], the caller's own
//! error carried through it; and [`SendError`], an email provider's failure (re-exported from
//! [`email`](crate::email), where senders produce it).
//!
//! Each chains once ([`ErrorChain`](effectively_once::ErrorChain) formats the chain): [`Error`]
//! and [`CallerError`] are transparent, their `Display` and `source()` those of the error they
//! carry; [`SendError`] has no cause.

use std::fmt;

use effectively_once::{Retry, StoreError};
use effectively_once_redact::redact_emails;

/// Why an effect did not produce an outcome.
///
/// Transparent: its `Display` is the carried error's message and its `source()` that error's
/// cause, so a chain shows each message once.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The idempotency layer refused or failed (key reused, in progress elsewhere, ...) for the
    /// effect's once-only record (an email marker, say).
    Idempotency(effectively_once::Error),
    /// The effect's own write failed: throttled, could not be sent, or refused for this
    /// message's items (too many, too large, invalid).
    Store(StoreError),
    /// The email provider failed in a way that may pass on retry (its marker was released, unless
    /// the message says the marker is still held: its release failed too).
    Email(SendError),
    /// The caller's own error, with the caller's word on what a retry can do ([`Error::caller`]).
    Caller(CallerError),
}

impl Error {
    /// The caller's own `error` (a validation failure, a business rule, a client of its own),
    /// carried through this crate's error so a handler has one error type to return and to
    /// map to a record result; `retry` says what a later delivery of the same message can do
    /// about it ([`Retry::Never`]: the message itself is at fault, and is given up).
    ///
    /// ```
    /// use effectively_once::Retry;
    /// use effectively_once_effects::Error;
    ///
    /// let invalid = Error::caller("order_id: missing", Retry::Never);
    /// assert_eq!(invalid.retry(), Retry::Never);
    /// assert_eq!(invalid.to_string(), "order_id: missing");
    /// let busy = Error::caller(std::io::Error::other("inventory service unavailable"), Retry::Now);
    /// assert_eq!(busy.retry(), Retry::Now);
    /// ```
    pub fn caller(error: impl Into<Box<dyn std::error::Error + Send + Sync>>, retry: Retry) -> Self {
        Error::Caller(CallerError { error: error.into(), retry })
    }

    /// What a later delivery of the same message can do about it: the carried error's class.
    /// [`Retry::Never`] for a key reused or invalid, the effect's own write refused for good
    /// (its items too many, too large or invalid), a send refused for good, a caller's error it
    /// called so. A once-only record the store refuses or cannot read back (a marker that no
    /// longer deserialises, a request the store calls invalid) is [`Retry::AfterFix`]: that is
    /// the store's or the deployment's fault, not the message's.
    pub fn retry(&self) -> Retry {
        match self {
            Error::Idempotency(error) => error.retry(),
            Error::Store(error) => error.retry(),
            Error::Email(error) => error.retry(),
            Error::Caller(error) => error.retry(),
        }
    }

    fn inner(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Error::Idempotency(error) => error,
            Error::Store(error) => error,
            Error::Email(error) => error,
            Error::Caller(error) => error,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.inner(), f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner().source()
    }
}

impl From<effectively_once::Error> for Error {
    fn from(error: effectively_once::Error) -> Self {
        Error::Idempotency(error)
    }
}

impl From<StoreError> for Error {
    fn from(error: StoreError) -> Self {
        Error::Store(error)
    }
}

impl From<effectively_once::KeyError> for Error {
    fn from(error: effectively_once::KeyError) -> Self {
        Error::Idempotency(error.into())
    }
}

impl From<SendError> for Error {
    fn from(error: SendError) -> Self {
        Error::Email(error)
    }
}

impl From<CallerError> for Error {
    fn from(error: CallerError) -> Self {
        Error::Caller(error)
    }
}

/// The caller's own error inside an [`Error`], made by [`Error::caller`]. Transparent: its
/// `Display` and `source()` are the carried error's.
#[derive(Debug)]
pub struct CallerError {
    error: Box<dyn std::error::Error + Send + Sync>,
    retry: Retry,
}

impl CallerError {
    /// What the caller said a later delivery can do about it.
    pub fn retry(&self) -> Retry {
        self.retry
    }

    /// The caller's error, to inspect (`downcast_ref`).
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    /// The caller's error, given back.
    pub fn into_inner(self) -> Box<dyn std::error::Error + Send + Sync> {
        self.error
    }
}

impl fmt::Display for CallerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for CallerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// The one mapping of an effect's failure to a record's, for every function that runs effects
/// under a batch driver: the record fails in the error's own class ([`Error::retry`]):
///
/// - another attempt holds the key ([`ErrorKind::InProgress`](effectively_once::ErrorKind::InProgress)):
///   [`Retry::InProgressElsewhere`], and a later delivery replays its outcome;
/// - the message itself at fault (a caller's error it called so included): [`Retry::Never`],
///   given up;
/// - anything else is kept: throttling, an unreachable store or provider ([`Retry::Now`]), an
///   account the provider blocks, and a fault of the store or the deployment, which an
///   operator or a deploy fixes ([`Retry::AfterFix`]): given up, the SQS FIFO driver would go
///   on with the group past it and the stream driver past the record, for good.
///
/// The reason is the whole chain ([`ErrorChain`](effectively_once::ErrorChain)); no address
/// is in it (send errors are redacted when made).
#[cfg(feature = "lambda")]
impl From<Error> for effectively_once_lambda::RecordError {
    fn from(error: Error) -> Self {
        let reason = effectively_once::ErrorChain(&error).to_string();
        effectively_once_lambda::RecordError::new(error.retry(), reason)
    }
}

/// How a provider's failure bears on a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendErrorKind {
    /// The provider shed load; the message was not accepted. [`Retry::Now`].
    Throttled,
    /// The provider did not process the request (it gave up reading it, or a sender knows it
    /// was never reached): nothing was sent. [`Retry::Now`]. (SES's own 5xx answers are
    /// [`Ambiguous`](Self::Ambiguous): a server error says nothing of whether the message left.)
    Unavailable,
    /// The request may have been accepted: it timed out, its answer was lost, or the provider
    /// failed on its side (a 5xx). [`Retry::Now`]; under
    /// [`Policy::AtMostOnce`](crate::Policy::AtMostOnce) never resent.
    Ambiguous,
    /// The provider refused this message for good (rejected content or recipient, invalid
    /// input). [`Retry::Never`]: recorded, not retried.
    Rejected,
    /// The provider refused to send anything for this account or configuration: sending paused,
    /// account suspended, sender or mail-from domain not verified, configuration set or identity
    /// not found, sending quota spent, credentials or permissions refused. No verdict on this
    /// message: [`Retry::AfterFix`], it passes once an operator (or time) clears the condition,
    /// which is raised for them.
    Blocked,
}

impl SendErrorKind {
    /// What a later delivery of the message can do about it: each kind's one class.
    pub fn retry(self) -> Retry {
        match self {
            SendErrorKind::Throttled | SendErrorKind::Unavailable | SendErrorKind::Ambiguous => Retry::Now,
            SendErrorKind::Blocked => Retry::AfterFix,
            SendErrorKind::Rejected => Retry::Never,
        }
    }
}

/// An email provider's failure.
#[derive(Clone, PartialEq, Eq)]
pub struct SendError {
    /// How it bears on a retry.
    pub kind: SendErrorKind,
    /// What the provider said, with any email address in it redacted (providers echo the
    /// refused address: "Email address not verified alice@example.com").
    pub message: String,
}

impl SendError {
    /// A failure of the given kind. Addresses in `message` are redacted here, once, so neither
    /// a log line, an error passed up, nor a stored failure reason carries one.
    pub fn new(kind: SendErrorKind, message: impl Into<String>) -> Self {
        SendError { kind, message: redact_emails(&message.into()) }
    }

    /// What a later delivery of the message can do about it ([`SendErrorKind::retry`]).
    pub fn retry(&self) -> Retry {
        self.kind.retry()
    }
}

// Display and Debug redact again: the fields are public, so a `SendError { .. }` literal
// skips `new`.
impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "email {:?}: {}", self.kind, redact_emails(&self.message))
    }
}

impl fmt::Debug for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendError").field("kind", &self.kind).field("message", &redact_emails(&self.message)).finish()
    }
}

impl std::error::Error for SendError {}

#[cfg(test)]
mod tests {
    use effectively_once::{ErrorChain, StoreErrorKind};

    use super::*;

    /// The business write's own refusal for good (too large, a request the store calls invalid)
    /// gives the message up; a condition the caller's write held on, or the caller's misuse of
    /// the API, is the data's or the code's, never the message's: the message waits for the fix.
    #[test]
    fn only_a_write_refused_for_good_gives_the_message_up_among_store_errors() {
        let store = |kind| Error::Store(effectively_once::StoreError::new(kind, "write 1 refused"));
        assert_eq!(store(StoreErrorKind::TooLarge).retry(), Retry::Never);
        assert_eq!(store(StoreErrorKind::Other).retry(), Retry::Never);
        for kind in [StoreErrorKind::ConditionFailed, StoreErrorKind::Misuse, StoreErrorKind::Misconfigured] {
            assert_eq!(store(kind).retry(), Retry::AfterFix, "{kind:?}");
        }
        for kind in [StoreErrorKind::Unavailable, StoreErrorKind::Throttled, StoreErrorKind::Fenced] {
            assert_eq!(store(kind).retry(), Retry::Now, "{kind:?}");
        }
    }

    /// Every send kind's one class, pinned: only a refusal for good gives the message up.
    #[test]
    fn every_send_kind_has_one_retry_class() {
        let kinds = [
            (SendErrorKind::Throttled, Retry::Now),
            (SendErrorKind::Unavailable, Retry::Now),
            (SendErrorKind::Ambiguous, Retry::Now),
            (SendErrorKind::Blocked, Retry::AfterFix),
            (SendErrorKind::Rejected, Retry::Never),
        ];
        for (kind, class) in kinds {
            assert_eq!(Error::Email(SendError::new(kind, "no")).retry(), class, "{kind:?}");
        }
    }

    /// The messages of `err` and of each of its causes, outermost first.
    fn chain(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
        std::iter::successors(Some(err), |e| e.source()).map(ToString::to_string).collect()
    }

    /// No message in the chain repeats another's, and the formatted chain shows each once.
    #[test]
    fn every_error_chains_once() {
        let io = std::io::Error::other("connection reset by peer");
        let store = StoreError::new(StoreErrorKind::Unavailable, "DynamoDB TransactWriteItems failed").with_source(io);
        let errors = [
            Error::Store(
                StoreError::new(StoreErrorKind::Unavailable, "DynamoDB GetItem failed")
                    .with_source(std::io::Error::other("timed out")),
            ),
            Error::Idempotency(effectively_once::Error::from(store)),
            Error::from(effectively_once::Key::new("email", "").unwrap_err()),
            Error::Email(SendError::new(SendErrorKind::Throttled, "Maximum sending rate exceeded.")),
            Error::caller(std::io::Error::other("order_id: missing"), Retry::Never),
        ];
        for err in &errors {
            let messages = chain(err);
            for (i, outer) in messages.iter().enumerate() {
                for inner in &messages[i + 1..] {
                    assert!(!outer.contains(inner.as_str()), "{outer:?} repeats {inner:?}: {messages:?}");
                }
            }
            let formatted = ErrorChain(err).to_string();
            for message in &messages {
                assert_eq!(formatted.matches(message.as_str()).count(), 1, "{message:?} in {formatted:?}");
            }
        }
        assert_eq!(
            ErrorChain(&errors[1]).to_string(),
            "idempotency store failed: store Unavailable: DynamoDB TransactWriteItems failed: connection reset by peer"
        );
        assert_eq!(errors[1].to_string(), "idempotency store failed", "transparent: the carried error's own message");
    }

    #[cfg(feature = "lambda")]
    #[test]
    fn effect_errors_map_to_record_errors_in_one_place() {
        use effectively_once_lambda::RecordError;
        let retry = |e: Error| RecordError::from(e).retry;
        let fault = |kind| Error::Store(StoreError::new(kind, "refused"));
        assert_eq!(retry(fault(StoreErrorKind::Other)), Retry::Never, "the effect's own write refused");
        assert_eq!(retry(fault(StoreErrorKind::TooLarge)), Retry::Never);
        assert_eq!(retry(fault(StoreErrorKind::Throttled)), Retry::Now);
        assert_eq!(retry(fault(StoreErrorKind::Misconfigured)), Retry::AfterFix);
        // A once-only record the store refuses: the store's fault, not the message's.
        let marker = |kind| Error::Idempotency(effectively_once::Error::from(StoreError::new(kind, "refused")));
        assert_eq!(retry(marker(StoreErrorKind::Other)), Retry::AfterFix);
        assert_eq!(retry(marker(StoreErrorKind::Malformed)), Retry::AfterFix);
        assert_eq!(retry(Error::from(effectively_once::Key::new("email", "").unwrap_err())), Retry::Never);
        let invalid = RecordError::from(Error::caller("order_id: missing", Retry::Never));
        assert_eq!(invalid.retry, Retry::Never, "the caller's verdict on the message");
        assert_eq!(invalid.reason, "order_id: missing");
        let busy = RecordError::from(Error::caller(std::io::Error::other("inventory unavailable"), Retry::Now));
        assert_eq!(busy.retry, Retry::Now, "the caller said a retry may pass");
        for kind in [SendErrorKind::Throttled, SendErrorKind::Unavailable] {
            assert_eq!(retry(Error::Email(SendError::new(kind, "no"))), Retry::Now, "{kind:?}");
        }
        assert_eq!(retry(Error::Email(SendError::new(SendErrorKind::Blocked, "no"))), Retry::AfterFix);
        let chained = RecordError::from(marker(StoreErrorKind::Unavailable));
        assert_eq!(chained.reason, "idempotency store failed: store Unavailable: refused", "the whole chain");
    }
}
