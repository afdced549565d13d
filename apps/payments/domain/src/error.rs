//! The payments errors: [`Error`], what a ledger post or a payment's parse returns, which
//! callers branch on by variant and ask [`retry`](Error::retry) (the core's one
//! classification, [`Retry`]).
//!
//! It chains once ([`ErrorChain`](effectively_once::ErrorChain) formats the chain): [`Error`]
//! is transparent, its `Display` and `source()` those of the error it carries;
//! [`InvalidPayment`] has no cause.

use std::fmt;

use effectively_once::{Retry, StoreError};

use crate::payment::InvalidPayment;

/// Why a payment did not produce an outcome.
///
/// Transparent: its `Display` is the carried error's message and its `source()` that error's
/// cause, so a chain shows each message once.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The message is not a valid payment event. Permanent.
    InvalidPayment(InvalidPayment),
    /// The idempotency layer refused or failed (key reused, in progress elsewhere, ...) for the
    /// payment's once-only record.
    Idempotency(effectively_once::Error),
    /// The ledger's own write failed: its transaction was throttled, could not be sent, or was
    /// refused for this message's items (too many, too large, invalid).
    Store(StoreError),
    /// The receipt's keyed email failed (`effectively_once_effects::send_once`).
    Receipt(effectively_once_effects::Error),
}

impl Error {
    /// What a later delivery of the same message can do about it: the carried error's class,
    /// as the payments functions report it and as a batch holds its account's later events back
    /// behind anything but [`Retry::Never`]. [`Retry::Never`] for an invalid payment event, a
    /// key reused or invalid, the ledger's own write refused for good (its items too many, too
    /// large or invalid), a receipt refused for good. A once-only record the store refuses or
    /// cannot read back is [`Retry::AfterFix`]: that is the store's or the deployment's fault,
    /// not the message's.
    pub fn retry(&self) -> Retry {
        match self {
            Error::InvalidPayment(_) => Retry::Never,
            // The idempotency layer's one answer, which `commit_batch` holds a group back on.
            Error::Idempotency(error) => error.retry(),
            Error::Store(error) => error.retry(),
            Error::Receipt(error) => error.retry(),
        }
    }

    fn inner(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Error::InvalidPayment(error) => error,
            Error::Idempotency(error) => error,
            Error::Store(error) => error,
            Error::Receipt(error) => error,
        }
    }

    /// The same failure as a keyed effect's, for the family's one record mapping: an invalid
    /// payment is the caller's error, [`Retry::Never`].
    #[cfg(feature = "lambda")]
    fn into_effect(self) -> effectively_once_effects::Error {
        match self {
            Error::InvalidPayment(error) => effectively_once_effects::Error::caller(error, Retry::Never),
            Error::Idempotency(error) => effectively_once_effects::Error::Idempotency(error),
            Error::Store(error) => effectively_once_effects::Error::Store(error),
            Error::Receipt(error) => error,
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

impl From<effectively_once_effects::Error> for Error {
    fn from(error: effectively_once_effects::Error) -> Self {
        Error::Receipt(error)
    }
}

/// The payments functions' mapping of a failure to a record's (the payments consumer and the
/// receipts relay): the family's one mapping (`From<effectively_once_effects::Error>`), the
/// record failing in the error's own class ([`Error::retry`]), an invalid payment
/// [`Retry::Never`]:
///
/// - another attempt holds the key ([`ErrorKind::InProgress`](effectively_once::ErrorKind::InProgress)):
///   [`Retry::InProgressElsewhere`], and a later delivery replays its outcome;
/// - the message itself at fault: [`Retry::Never`], given up;
/// - anything else is kept: throttling, an unreachable store or provider ([`Retry::Now`]), an
///   account the provider blocks, and a fault of the store or the deployment, which an
///   operator or a deploy fixes ([`Retry::AfterFix`]): given up, the SQS FIFO driver would go
///   on with the group past it and the stream driver past the receipt, for good.
///
/// The reason is the whole chain ([`ErrorChain`](effectively_once::ErrorChain)); no address
/// is in it (send errors are redacted when made).
#[cfg(feature = "lambda")]
impl From<Error> for effectively_once_lambda::RecordError {
    fn from(error: Error) -> Self {
        effectively_once_lambda::RecordError::from(error.into_effect())
    }
}

#[cfg(test)]
mod tests {
    use effectively_once::{ErrorChain, StoreErrorKind};
    use effectively_once_effects::{SendError, SendErrorKind};

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
        let invalid = InvalidPayment { field: Some("currency"), problem: "not ISO 4217".into() };
        assert_eq!(Error::from(invalid).retry(), Retry::Never);
    }

    /// Transparent like the effects' error it wraps: each message of the chain shows once.
    #[test]
    fn every_error_chains_once() {
        let io = std::io::Error::other("connection reset by peer");
        let store = StoreError::new(StoreErrorKind::Unavailable, "DynamoDB TransactWriteItems failed").with_source(io);
        let cases = [
            (
                Error::Idempotency(effectively_once::Error::from(store)),
                "idempotency store failed: store Unavailable: DynamoDB TransactWriteItems failed: connection reset by peer",
            ),
            (
                Error::Receipt(SendError::new(SendErrorKind::Throttled, "Maximum sending rate exceeded.").into()),
                "email Throttled: Maximum sending rate exceeded.",
            ),
            (
                Error::InvalidPayment(InvalidPayment { field: Some("amount_cents"), problem: "not an integer".into() }),
                "invalid payment event: amount_cents: not an integer",
            ),
        ];
        for (err, expected) in &cases {
            assert_eq!(ErrorChain(err).to_string(), *expected);
        }
        assert_eq!(cases[0].0.to_string(), "idempotency store failed", "transparent: the carried error's own message");
    }

    #[cfg(feature = "lambda")]
    #[test]
    fn payments_errors_map_to_record_errors_as_effect_errors_do() {
        use effectively_once_lambda::RecordError;
        let retry = |e: Error| RecordError::from(e).retry;
        let fault = |kind| Error::Store(StoreError::new(kind, "refused"));
        assert_eq!(retry(fault(StoreErrorKind::Other)), Retry::Never, "the ledger's own write refused");
        assert_eq!(retry(fault(StoreErrorKind::TooLarge)), Retry::Never);
        assert_eq!(retry(fault(StoreErrorKind::Throttled)), Retry::Now);
        assert_eq!(retry(fault(StoreErrorKind::Misconfigured)), Retry::AfterFix);
        // A once-only record the store refuses: the store's fault, not the message's.
        let record = |kind| Error::Idempotency(effectively_once::Error::from(StoreError::new(kind, "refused")));
        assert_eq!(retry(record(StoreErrorKind::Other)), Retry::AfterFix);
        assert_eq!(retry(record(StoreErrorKind::Malformed)), Retry::AfterFix);
        assert_eq!(retry(Error::from(effectively_once::Key::new("payments", "").unwrap_err())), Retry::Never);
        let invalid = InvalidPayment { field: Some("currency"), problem: "not ISO 4217".into() };
        let err = RecordError::from(Error::from(invalid));
        assert_eq!(err.retry, Retry::Never);
        assert_eq!(err.reason, "invalid payment event: currency: not ISO 4217");
        for kind in [SendErrorKind::Throttled, SendErrorKind::Unavailable] {
            assert_eq!(retry(Error::Receipt(SendError::new(kind, "no").into())), Retry::Now, "{kind:?}");
        }
        assert_eq!(retry(Error::Receipt(SendError::new(SendErrorKind::Blocked, "no").into())), Retry::AfterFix);
        assert_eq!(retry(Error::Receipt(SendError::new(SendErrorKind::Rejected, "no").into())), Retry::Never);
        let chained = RecordError::from(record(StoreErrorKind::Unavailable));
        assert_eq!(chained.reason, "idempotency store failed: store Unavailable: refused", "the whole chain");
    }
}
