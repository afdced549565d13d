//! The storage contract: any backend that can do a conditional write can hold records.

use std::fmt;
use std::future::Future;

use crate::record::Record;

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The record was written: the caller owns the key. `replaced` is the record it overwrote:
    /// one past its dedup window, or one in progress whose lease ended (its attempt died or
    /// timed out mid-effect, which an effect that must not repeat needs to know).
    Acquired {
        /// The overwritten record, if any.
        replaced: Option<Record>,
    },
    /// A record blocks the claim; here it is, as stored, for the caller to classify (replay,
    /// in progress, key reused, or the caller's own earlier write whose answer was lost).
    Exists(Record),
}

/// The update that completes a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion<'a> {
    /// The handler's response as JSON, or `None` when it was too large to keep.
    pub response: Option<&'a str>,
    /// End of the dedup window, counted from completion, in seconds since the Unix epoch.
    pub expiration_s: u64,
}

/// Where idempotency records live.
///
/// Every method is one atomic step; stores must pass the suite in `idempotency::contract`
/// (feature `contract`), which runs against [`InMemoryStore`](crate::InMemoryStore) and
/// `DynamoDbStore` alike.
pub trait Store: Send + Sync {
    /// Writes `record` (in progress) unless a record blocks it at `now_ms`: one exists whose
    /// dedup window has not ended and which is completed or in progress within its lease.
    /// On success, returns the record it overwrote, if any, read in the same atomic step.
    fn claim(&self, record: &Record, now_ms: u64) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Completes the record if `owner` still holds it. Completing twice with the same owner
    /// succeeds (a retried request); a different owner is refused with [`StoreErrorKind::Fenced`].
    fn complete(
        &self,
        id: &str,
        owner: &str,
        completion: Completion<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes the record if `owner` still holds it or it is already gone; a different owner is
    /// refused with [`StoreErrorKind::Fenced`].
    fn release(&self, id: &str, owner: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads the record, if any, expired or not.
    fn get(&self, id: &str) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn claim(&self, record: &Record, now_ms: u64) -> impl Future<Output = Result<Claim, StoreError>> + Send {
        (**self).claim(record, now_ms)
    }
    fn complete(
        &self,
        id: &str,
        owner: &str,
        completion: Completion<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).complete(id, owner, completion)
    }
    fn release(&self, id: &str, owner: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).release(id, owner)
    }
    fn get(&self, id: &str) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        (**self).get(id)
    }
}

/// Why a store call failed, as far as a caller needs to know to retry or give up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The backend shed load (throttling, capacity exceeded). Retryable.
    Throttled,
    /// The backend could not be reached or failed (timeout, connection, 5xx). Retryable.
    Unavailable,
    /// Another attempt owns the record now: this attempt's lease ended and it was taken over.
    /// Retryable: the next delivery finds the other attempt's record.
    Fenced,
    /// The item exceeds the backend's size limit. Permanent.
    TooLarge,
    /// A stored record could not be read back (missing or malformed attribute). Permanent.
    Malformed,
    /// Any other failure (bad request, missing table, access denied). Permanent.
    Other,
}

impl StoreErrorKind {
    /// Whether the same call may succeed later.
    pub fn is_retryable(self) -> bool {
        matches!(self, StoreErrorKind::Throttled | StoreErrorKind::Unavailable | StoreErrorKind::Fenced)
    }
}

/// A store failure.
#[derive(Debug)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl StoreError {
    /// A failure of the given kind.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        StoreError { kind, message: message.into(), source: None }
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Whether the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store {:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}
