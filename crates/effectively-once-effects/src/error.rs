//! The crate's errors: [`Error`], what an effect returns, which callers branch on by variant
//! and ask [`is_retryable`](Error::is_retryable); and [`SendError`], an email provider's failure
//! (re-exported from [`email`](crate::email), where senders produce it).
//!
//! Each chains once ([`ErrorChain`](effectively_once::ErrorChain) formats the chain): [`Error`]
//! is transparent, its `Display` and `source()` those of the error it carries; [`SendError`] and
//! [`InvalidPayment`] have no cause.

use std::fmt;

use effectively_once::{ErrorKind, StoreError};
use effectively_once_redact::redact_emails;

use crate::payment::InvalidPayment;

/// Why an effect did not produce an outcome.
///
/// Transparent: its `Display` is the carried error's message and its `source()` that error's
/// cause, so a chain shows each message once.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The message is not a valid payment event. Permanent.
    InvalidPayment(InvalidPayment),
    /// The idempotency layer refused or failed (key reused, in progress elsewhere, ...): the
    /// once-only record, a payment's or an email marker.
    Idempotency(effectively_once::Error),
    /// The effect's own write failed: the ledger's transaction was throttled, could not be sent,
    /// or was refused for this message's items (too many, too large, invalid).
    Store(StoreError),
    /// The email provider failed in a way that may pass on retry (its marker was released, unless
    /// the message says the marker is still held: its release failed too).
    Email(SendError),
}

impl Error {
    /// Whether a later delivery of the same message may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::InvalidPayment(_) => false,
            Error::Idempotency(error) => error.is_retryable(),
            Error::Store(error) => error.is_retryable(),
            Error::Email(error) => error.is_retryable(),
        }
    }

    /// Whether this is a verdict on the message itself, which no later delivery, moment,
    /// operator or deploy changes: an invalid payment event, a key reused or invalid, the
    /// effect's own write refused for good (its items too many, too large or invalid), a send
    /// refused for good. A once-only record the store refuses or cannot read back (a marker
    /// that no longer deserialises, a request the store calls invalid) is not: that is the
    /// store's or the deployment's fault, not the message's.
    pub fn is_verdict_on_the_message(&self) -> bool {
        match self {
            Error::InvalidPayment(_) => true,
            // A stored response too large to replay stays too large: every duplicate meets it.
            Error::Idempotency(error) => {
                matches!(error.kind(), ErrorKind::KeyReused | ErrorKind::InvalidKey | ErrorKind::ResponseTooLarge)
            }
            Error::Store(error) => !error.is_retryable(),
            Error::Email(error) => !error.is_retryable(),
        }
    }

    fn inner(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Error::InvalidPayment(error) => error,
            Error::Idempotency(error) => error,
            Error::Store(error) => error,
            Error::Email(error) => error,
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

impl From<InvalidPayment> for Error {
    fn from(error: InvalidPayment) -> Self {
        Error::InvalidPayment(error)
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

/// The one mapping of an effect's failure to a record's, for every function that runs effects
/// under a batch driver (the payments consumer and the receipts relay):
///
/// - another attempt holds the key ([`ErrorKind::InProgress`]): in progress elsewhere, and a
///   later delivery replays its outcome;
/// - a verdict on the message itself ([`Error::is_verdict_on_the_message`]): permanent;
/// - anything else: retryable. Throttling, an unreachable store or provider, an account the
///   provider blocks, and a fault of the store or the deployment, which a moment, an operator
///   or a deploy fixes: reported permanent, the SQS FIFO driver would go on with the group
///   past it and the stream driver past the receipt, for good.
///
/// The reason is the whole chain ([`ErrorChain`](effectively_once::ErrorChain)); no address
/// is in it (send errors are redacted when made).
#[cfg(feature = "lambda")]
impl From<Error> for effectively_once_lambda::RecordError {
    fn from(error: Error) -> Self {
        use effectively_once_lambda::RecordError;
        let reason = effectively_once::ErrorChain(&error).to_string();
        match &error {
            Error::Idempotency(cause) if cause.kind() == ErrorKind::InProgress => {
                RecordError::in_progress_elsewhere(reason)
            }
            _ if error.is_verdict_on_the_message() => RecordError::permanent(reason),
            _ => RecordError::retryable(reason),
        }
    }
}

/// How a provider's failure bears on a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendErrorKind {
    /// The provider shed load; the message was not accepted. Retryable.
    Throttled,
    /// The provider did not process the request (it gave up reading it, or a sender knows it
    /// was never reached): nothing was sent. Retryable. (SES's own 5xx answers are
    /// [`Ambiguous`](Self::Ambiguous): a server error says nothing of whether the message left.)
    Unavailable,
    /// The request may have been accepted: it timed out, its answer was lost, or the provider
    /// failed on its side (a 5xx). Under [`Policy::AtMostOnce`](crate::Policy::AtMostOnce) never resent.
    Ambiguous,
    /// The provider refused this message for good (rejected content or recipient, invalid
    /// input). Permanent: recorded, not retried.
    Rejected,
    /// The provider refused to send anything for this account or configuration: sending paused,
    /// account suspended, sender or mail-from domain not verified, configuration set or identity
    /// not found, sending quota spent, credentials or permissions refused. No verdict on this
    /// message: retryable, once an operator (or time) clears the condition, which is raised
    /// for them.
    Blocked,
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

    /// Whether a retry may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind != SendErrorKind::Rejected
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
            Error::InvalidPayment(InvalidPayment { field: Some("amount_cents"), problem: "not an integer".into() }),
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
        use effectively_once_lambda::{RecordError, Retry};
        let retry = |e: Error| RecordError::from(e).retry;
        let fault = |kind| Error::Store(StoreError::new(kind, "refused"));
        assert_eq!(retry(fault(StoreErrorKind::Other)), Retry::Permanent, "the effect's own write refused");
        assert_eq!(retry(fault(StoreErrorKind::TooLarge)), Retry::Permanent);
        assert_eq!(retry(fault(StoreErrorKind::Throttled)), Retry::Retryable);
        assert_eq!(retry(fault(StoreErrorKind::Misconfigured)), Retry::Retryable);
        // A once-only record the store refuses: the store's fault, not the message's.
        let marker = |kind| Error::Idempotency(effectively_once::Error::from(StoreError::new(kind, "refused")));
        assert_eq!(retry(marker(StoreErrorKind::Other)), Retry::Retryable);
        assert_eq!(retry(marker(StoreErrorKind::Malformed)), Retry::Retryable);
        assert_eq!(retry(Error::from(effectively_once::Key::new("email", "").unwrap_err())), Retry::Permanent);
        let invalid = InvalidPayment { field: Some("currency"), problem: "not ISO 4217".into() };
        let err = RecordError::from(Error::from(invalid));
        assert_eq!(err.retry, Retry::Permanent);
        assert_eq!(err.reason, "invalid payment event: currency: not ISO 4217");
        for kind in [SendErrorKind::Blocked, SendErrorKind::Throttled, SendErrorKind::Unavailable] {
            assert_eq!(retry(Error::Email(SendError::new(kind, "no"))), Retry::Retryable, "{kind:?}");
        }
        let chained = RecordError::from(marker(StoreErrorKind::Unavailable));
        assert_eq!(chained.reason, "idempotency store failed: store Unavailable: refused", "the whole chain");
    }
}
