//! Errors a caller can classify without string matching: [`Error::is_retryable`] answers
//! "retry or give up?", [`Error::kind`] says why.

use std::fmt;

use crate::key::KeyError;
use crate::store::{StoreError, StoreErrorKind};

/// Why an idempotent call did not produce an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Another attempt holds the key and its lease has not ended. Retryable.
    InProgress,
    /// The store shed load. Retryable.
    Throttled,
    /// The store could not be reached or failed. Retryable.
    StoreUnavailable,
    /// This attempt's lease ended before it could complete or release: the handler outran the
    /// lease (its result is not recorded), or another attempt took the key over. Retryable: the
    /// next delivery takes the key over, or meets the other attempt's record.
    LeaseLost,
    /// The invocation's deadline had passed before the call began. Retryable.
    DeadlineExceeded,
    /// The key was used before with a different payload. Permanent.
    KeyReused,
    /// The key is invalid. Permanent.
    InvalidKey,
    /// The handler's response is larger than the store may keep. The record is completed without
    /// it, so the effect is not repeated; duplicates get this error too. Permanent.
    ResponseTooLarge,
    /// A payload or response could not be serialised, or a stored response no longer
    /// deserialises into the handler's type. Permanent.
    Serialization,
    /// The store failed in a way retrying will not fix (malformed record, bad request). Permanent.
    Store,
}

impl ErrorKind {
    /// Whether a later delivery of the same message may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::InProgress
                | ErrorKind::Throttled
                | ErrorKind::StoreUnavailable
                | ErrorKind::LeaseLost
                | ErrorKind::DeadlineExceeded
        )
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

    /// Why the call failed.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether a later delivery of the same message may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<KeyError> for Error {
    fn from(e: KeyError) -> Self {
        Error::new(ErrorKind::InvalidKey, "invalid idempotency key").with_source(e)
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        let kind = match e.kind() {
            StoreErrorKind::Throttled => ErrorKind::Throttled,
            // A misconfigured store is unavailable to this deployment until an operator acts.
            StoreErrorKind::Unavailable | StoreErrorKind::Misconfigured => ErrorKind::StoreUnavailable,
            StoreErrorKind::Fenced => ErrorKind::LeaseLost,
            StoreErrorKind::TooLarge => ErrorKind::ResponseTooLarge,
            StoreErrorKind::Malformed | StoreErrorKind::Other => ErrorKind::Store,
        };
        Error::new(kind, "idempotency store failed").with_source(e)
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
    fn from(e: Error) -> Self {
        RunError::Idempotency(e)
    }
}

impl<E: fmt::Display> fmt::Display for RunError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Idempotency(e) => write!(f, "idempotency: {e}"),
            RunError::Handler(e) => write!(f, "handler: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RunError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Idempotency(e) => Some(e),
            RunError::Handler(e) => Some(e),
        }
    }
}
