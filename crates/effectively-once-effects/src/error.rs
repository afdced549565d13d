//! The effectively-once-effects crate's error: callers branch on the variant, and ask `is_retryable`.

use std::fmt;

use effectively_once::StoreError;

use crate::email::SendError;
use crate::payment::InvalidPayment;

/// Why an effect did not produce an outcome.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The message is not a valid payment event. Permanent.
    InvalidPayment(InvalidPayment),
    /// The idempotency layer refused or failed (key reused, in progress elsewhere, ...).
    Idempotency(effectively_once::Error),
    /// The store failed (throttled, unavailable, transaction limits, ...).
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
            Error::Idempotency(e) => e.is_retryable(),
            Error::Store(e) => e.is_retryable(),
            Error::Email(e) => e.is_retryable(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidPayment(e) => e.fmt(f),
            Error::Idempotency(e) => write!(f, "idempotency: {e}"),
            Error::Store(e) => e.fmt(f),
            Error::Email(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidPayment(e) => Some(e),
            Error::Idempotency(e) => Some(e),
            Error::Store(e) => Some(e),
            Error::Email(e) => Some(e),
        }
    }
}

impl From<InvalidPayment> for Error {
    fn from(e: InvalidPayment) -> Self {
        Error::InvalidPayment(e)
    }
}

impl From<effectively_once::Error> for Error {
    fn from(e: effectively_once::Error) -> Self {
        Error::Idempotency(e)
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Store(e)
    }
}

impl From<effectively_once::KeyError> for Error {
    fn from(e: effectively_once::KeyError) -> Self {
        Error::Idempotency(e.into())
    }
}
