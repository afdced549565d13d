//! Errors a caller can classify without string matching: [`Error::retry`] answers "retry or
//! give up?" with the one classification every error of the workspace uses, [`Retry`];
//! [`Error::kind`] says why.
//!
//! Every error here chains once, as the AWS SDK's do: a wrapper's `Display` is its own message,
//! and its cause comes from `source()`, never both; an enum that only carries one of several
//! errors ([`RunError`]) is transparent, its `Display` and `source()` the carried error's. A log
//! line that should show the causes formats the chain: [`ErrorChain`].

use std::fmt;

use crate::key::KeyError;
use crate::store::{StoreError, StoreErrorKind};

/// What a later delivery of the same message can do about a failure: the one answer to "retry
/// or give up?" that every error here ([`ErrorKind`], [`StoreErrorKind`], and the errors of the
/// crates built on these) gives, and what a batch driver does with a failed record.
///
/// Only [`Retry::Never`] gives a message up; the other three keep it (an SQS message is
/// delivered again, a stream's checkpoint stays at it, a batch holds the later members of its
/// group back behind it), and differ in what makes a later delivery pass.
///
/// ```
/// use effectively_once::{ErrorKind, Retry};
///
/// assert_eq!(ErrorKind::Throttled.retry(), Retry::Now);
/// assert_eq!(ErrorKind::KeyReused.retry(), Retry::Never);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Retry {
    /// Deliver the message again: a later delivery may pass with nothing changed (throttling, an
    /// unreachable store, a lease that ended, a deadline that came first).
    Now,
    /// Another attempt holds the message's key: deliver it again once that attempt has answered
    /// or its lease has ended; the later delivery replays its outcome, or takes the key over.
    InProgressElsewhere,
    /// No delivery passes until something outside the message changes: the code, the
    /// configuration, or the data a write's condition reads (a condition the code gives no
    /// answer, a misuse of the API, a store set up wrong, a record that does not read back). The
    /// message is not at fault: keep it, delivered again (SQS, until the
    /// queue's maximum receive count sends it to the dead-letter queue) or as the stream's
    /// checkpoint (until the mapping's retries send it to its on-failure destination), so a fix
    /// makes it pass and nothing behind it in its group overtakes it.
    AfterFix,
    /// The message itself is at fault, and no delivery, moment, operator or deploy changes that
    /// (the key reused with another payload, an invalid key, a response too large to replay, a
    /// body that does not decode): give it up, to the dead-letter queue (SQS) or parked and
    /// passed (streams), with its reason logged.
    Never,
}

/// Why an idempotent call did not produce an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Another attempt holds the key and its lease has not ended. [`Retry::InProgressElsewhere`].
    InProgress,
    /// The store shed load. [`Retry::Now`].
    Throttled,
    /// The store could not be reached or failed, or is set up wrong for this deployment
    /// ([`StoreErrorKind::Misconfigured`]). [`Retry::Now`].
    StoreUnavailable,
    /// This attempt's lease ended before it could complete or release: the handler outran the
    /// lease (its result is not recorded), or another attempt took the key over. [`Retry::Now`]:
    /// the next delivery takes the key over, or meets the other attempt's record.
    LeaseLost,
    /// The invocation's deadline had passed before the call began. [`Retry::Now`].
    DeadlineExceeded,
    /// The key was used before with a different payload. [`Retry::Never`].
    KeyReused,
    /// The key is invalid. [`Retry::Never`].
    InvalidKey,
    /// The handler's response is larger than the store may keep. The record is completed without
    /// it, so the effect is not repeated; duplicates get this error too. [`Retry::Never`].
    ResponseTooLarge,
    /// A payload or response could not be serialised, or a stored response no longer
    /// deserialises into the handler's type. [`Retry::AfterFix`]: the code, not the message,
    /// changes it.
    Serialization,
    /// The store failed in a way retrying will not fix (malformed record, bad request).
    /// [`Retry::AfterFix`]: a store that refuses a record, or cannot read one back, is the
    /// store's or the deployment's fault, not the message's.
    Store,
    /// A write's own condition failed (a business condition: stock, funds, an item that must
    /// not exist) and the code said nothing about what that means, so no answer was recorded
    /// and nothing was written. The message names the write and its table. [`Retry::AfterFix`]:
    /// every delivery fails the same way until the code gives the condition an answer
    /// (`effectively_once_dynamodb::Tx::otherwise`) or the data changes (stock arrives); the
    /// message is not at fault.
    ConditionFailed,
    /// The code used the API in a way it refuses (a programmer error: a record carried by a
    /// write that is no put, a carrier keyed by something other than the business key, a
    /// fallback write that does not build). [`Retry::AfterFix`]: a deploy fixes the code, so the
    /// batch drivers hold the message rather than give it up.
    Misuse,
}

impl ErrorKind {
    /// What a later delivery of the same message can do about it: each kind's one class.
    pub fn retry(self) -> Retry {
        match self {
            ErrorKind::InProgress => Retry::InProgressElsewhere,
            ErrorKind::Throttled | ErrorKind::StoreUnavailable | ErrorKind::LeaseLost | ErrorKind::DeadlineExceeded => {
                Retry::Now
            }
            ErrorKind::Serialization | ErrorKind::Store | ErrorKind::ConditionFailed | ErrorKind::Misuse => {
                Retry::AfterFix
            }
            ErrorKind::KeyReused | ErrorKind::InvalidKey | ErrorKind::ResponseTooLarge => Retry::Never,
        }
    }
}

/// An idempotency failure.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), source: None }
    }

    pub(crate) fn with_source(mut self, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The key was used before with another payload ([`ErrorKind::KeyReused`]): `id` is the
    /// record's id, `{prefix}#{business key}`.
    pub fn key_reused(id: &str) -> Self {
        Error::key_reused_because(id, "")
    }

    /// [`Error::key_reused`], its message ending with `why`.
    pub(crate) fn key_reused_because(id: &str, why: &str) -> Self {
        Error::new(ErrorKind::KeyReused, format!("key {id} was used before with a different payload{why}"))
    }

    /// Another attempt holds the key ([`ErrorKind::InProgress`]), until its lease ends at
    /// `lease_expires_at_ms` when that is known.
    pub fn in_progress(id: &str, lease_expires_at_ms: Option<u64>) -> Self {
        let message = match lease_expires_at_ms {
            Some(until) => format!("key {id} is in progress elsewhere until {until} ms"),
            None => format!("key {id} is in progress elsewhere"),
        };
        Error::new(ErrorKind::InProgress, message)
    }

    /// Why the call failed.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What a later delivery of the same message can do about it ([`ErrorKind::retry`]): unless
    /// [`Retry::Never`], the message is delivered again, and a batch's later members of its
    /// group wait behind it.
    pub fn retry(&self) -> Retry {
        self.kind.retry()
    }
}

/// Its own message only; the cause is [`source`](std::error::Error::source)'s.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<KeyError> for Error {
    fn from(error: KeyError) -> Self {
        Error::new(ErrorKind::InvalidKey, "invalid idempotency key").with_source(error)
    }
}

impl From<StoreError> for Error {
    fn from(error: StoreError) -> Self {
        let kind = match error.kind() {
            StoreErrorKind::Throttled => ErrorKind::Throttled,
            // A misconfigured store is unavailable to this deployment until an operator acts.
            StoreErrorKind::Unavailable | StoreErrorKind::Misconfigured => ErrorKind::StoreUnavailable,
            StoreErrorKind::Fenced => ErrorKind::LeaseLost,
            StoreErrorKind::TooLarge => ErrorKind::ResponseTooLarge,
            StoreErrorKind::Malformed | StoreErrorKind::Other => ErrorKind::Store,
            StoreErrorKind::ConditionFailed | StoreErrorKind::Misuse => {
                // The store did not fail: the caller's write was refused, or the caller's code
                // misused the API. Its message (the write, its table, the misuse) is this
                // error's own, not a cause behind "store failed".
                let kind = match error.kind() {
                    StoreErrorKind::Misuse => ErrorKind::Misuse,
                    _ => ErrorKind::ConditionFailed,
                };
                let (message, source) = error.into_parts();
                return Error { kind, message, source };
            }
        };
        Error::new(kind, "idempotency store failed").with_source(error)
    }
}

/// The result of [`Idempotency::run`](crate::Idempotency::run) when it does not succeed: the
/// idempotency layer failed, or the handler did (and its record was released, so a retry runs
/// it again).
#[derive(Debug)]
pub enum RunError<E> {
    /// The idempotency layer failed; the handler did not run, or its outcome could not be kept.
    Idempotency(Error),
    /// The handler returned this error.
    Handler(E),
}

impl<E> From<Error> for RunError<E> {
    fn from(error: Error) -> Self {
        RunError::Idempotency(error)
    }
}

/// Transparent: the carried error's message (and, through `source()`, its causes).
impl<E: fmt::Display> fmt::Display for RunError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Idempotency(error) => error.fmt(f),
            RunError::Handler(error) => error.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RunError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Idempotency(error) => error.source(),
            RunError::Handler(error) => error.source(),
        }
    }
}

/// An error and its causes (its [`source`](std::error::Error::source) chain), `: `-separated:
/// what a log line or a failure reason shows, since no `Display` here repeats its cause.
///
/// A cause whose message is the one before it again is left out: the AWS SDK's operation
/// errors print their variant and return it as their source too.
///
/// ```
/// use effectively_once::{ErrorChain, StoreError, StoreErrorKind};
///
/// let cause = std::io::Error::other("connection reset");
/// let err = StoreError::new(StoreErrorKind::Unavailable, "GetItem failed").with_source(cause);
/// assert_eq!(ErrorChain(&err).to_string(), "store Unavailable: GetItem failed: connection reset");
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut previous = self.0.to_string();
        f.write_str(&previous)?;
        let mut next = self.0.source();
        while let Some(cause) = next {
            let message = cause.to_string();
            if message != previous {
                write!(f, ": {message}")?;
            }
            previous = message;
            next = cause.source();
        }
        Ok(())
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages of `err` and of each of its causes, outermost first.
    fn messages(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
        std::iter::successors(Some(err), |e| e.source()).map(ToString::to_string).collect()
    }

    /// Asserts that no message in `err`'s chain repeats another's: each level says its own part.
    fn assert_chains_once(err: &(dyn std::error::Error + 'static)) {
        let messages = messages(err);
        for (i, outer) in messages.iter().enumerate() {
            for inner in &messages[i + 1..] {
                assert!(!outer.contains(inner.as_str()), "{outer:?} repeats its cause {inner:?}: {messages:?}");
            }
        }
    }

    #[test]
    fn each_message_appears_once_in_a_chain() {
        let io = std::io::Error::other("connection reset by peer");
        let store = StoreError::new(StoreErrorKind::Unavailable, "DynamoDB GetItem failed").with_source(io);
        let err = Error::from(store);
        assert_chains_once(&err);
        let chain = ErrorChain(&err).to_string();
        assert_eq!(
            chain,
            "idempotency store failed: store Unavailable: DynamoDB GetItem failed: connection reset by peer"
        );
        for part in ["idempotency store failed", "DynamoDB GetItem failed", "connection reset by peer"] {
            assert_eq!(chain.matches(part).count(), 1, "{chain}");
        }

        let key = Error::from(crate::Key::new("", "x").unwrap_err());
        assert_chains_once(&key);
        assert_eq!(messages(&key).len(), 2, "the key error is the cause: {:?}", messages(&key));

        let run: RunError<std::io::Error> = RunError::Idempotency(err);
        assert_chains_once(&run);
        assert_eq!(ErrorChain(&run).to_string(), chain, "transparent");
        let handler: RunError<std::io::Error> = RunError::Handler(std::io::Error::other("handler said no"));
        assert_eq!(ErrorChain(&handler).to_string(), "handler said no");
    }

    /// A refused write is reported as that, in its own words, not as a store failure; it waits
    /// for a fix, and is no verdict on the message (the code, not the message, lacks an answer).
    #[test]
    fn a_failed_condition_is_its_own_kind_and_message() {
        let store = StoreError::new(StoreErrorKind::ConditionFailed, "write 1 (an Update of table accounts) refused");
        assert_eq!(store.retry(), Retry::AfterFix);
        let err = Error::from(store);
        assert_eq!(err.kind(), ErrorKind::ConditionFailed);
        assert_eq!(ErrorChain(&err).to_string(), "write 1 (an Update of table accounts) refused");
        assert_eq!(err.retry(), Retry::AfterFix);
        let cause =
            StoreError::new(StoreErrorKind::ConditionFailed, "refused").with_source(std::io::Error::other("why"));
        assert_eq!(ErrorChain(&Error::from(cause)).to_string(), "refused: why");
    }

    /// Every kind's one class, pinned: what the drivers, the ledger and the relay do with a
    /// failure follows from it. A store error keeps its class as the caller's own write's; as a
    /// once-only record's, it takes the class of the kind it becomes.
    #[test]
    fn every_kind_has_one_retry_class() {
        use Retry::*;
        let kinds = [
            (ErrorKind::InProgress, InProgressElsewhere),
            (ErrorKind::Throttled, Now),
            (ErrorKind::StoreUnavailable, Now),
            (ErrorKind::LeaseLost, Now),
            (ErrorKind::DeadlineExceeded, Now),
            (ErrorKind::KeyReused, Never),
            (ErrorKind::InvalidKey, Never),
            (ErrorKind::ResponseTooLarge, Never),
            (ErrorKind::Serialization, AfterFix),
            (ErrorKind::Store, AfterFix),
            (ErrorKind::ConditionFailed, AfterFix),
            (ErrorKind::Misuse, AfterFix),
        ];
        for (kind, class) in kinds {
            assert_eq!(kind.retry(), class, "{kind:?}");
            assert_eq!(Error::new(kind, "x").retry(), class, "{kind:?}");
        }
        // (store kind, its class, the kind it becomes for a once-only record, that kind's class)
        let store_kinds = [
            (StoreErrorKind::Throttled, Now, ErrorKind::Throttled, Now),
            (StoreErrorKind::Unavailable, Now, ErrorKind::StoreUnavailable, Now),
            (StoreErrorKind::Fenced, Now, ErrorKind::LeaseLost, Now),
            (StoreErrorKind::Misconfigured, AfterFix, ErrorKind::StoreUnavailable, Now),
            (StoreErrorKind::ConditionFailed, AfterFix, ErrorKind::ConditionFailed, AfterFix),
            (StoreErrorKind::Misuse, AfterFix, ErrorKind::Misuse, AfterFix),
            (StoreErrorKind::TooLarge, Never, ErrorKind::ResponseTooLarge, Never),
            (StoreErrorKind::Malformed, Never, ErrorKind::Store, AfterFix),
            (StoreErrorKind::Other, Never, ErrorKind::Store, AfterFix),
        ];
        for (store_kind, class, kind, record_class) in store_kinds {
            let store = StoreError::new(store_kind, "x");
            assert_eq!((store_kind.retry(), store.retry()), (class, class), "{store_kind:?}");
            let err = Error::from(store);
            assert_eq!((err.kind(), err.retry()), (kind, record_class), "{store_kind:?}");
        }
    }

    #[test]
    fn a_cause_that_repeats_the_message_before_it_is_shown_once() {
        #[derive(Debug)]
        struct Same(std::io::Error);
        impl fmt::Display for Same {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
        impl std::error::Error for Same {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let err =
            StoreError::new(StoreErrorKind::Other, "PutItem failed").with_source(Same(std::io::Error::other("x")));
        assert_eq!(ErrorChain(&err).to_string(), "store Other: PutItem failed: x");
    }
}
