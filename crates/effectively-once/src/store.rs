//! The storage contract: any backend that can do a conditional write can hold records.

use std::fmt;
use std::future::Future;

use crate::error::Retry;
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
    /// The record was written over `replaced`, an attempt that died in progress after taking
    /// the key over itself (a run of takeovers, each attempt dying before it finished). `first`
    /// is the record that run began with: the one the first of those attempts replaced,
    /// completed before the run or in progress. What the key was bound to before the run is
    /// `first`'s; an effect that must not repeat checks `replaced` (whose attempt may have done
    /// its effect) as well. A claim that ends no such run answers [`Claim::Acquired`].
    AcquiredInRun {
        /// The overwritten record.
        replaced: Record,
        /// The record the run of takeovers began with.
        first: Record,
    },
    /// The record was written, but the item it overwrote could not be read back (a malformed
    /// item). The caller owns the key all the same: reporting an error here would leave an
    /// attempt that holds the record believing it failed, its key blocked until the lease
    /// ends. What it overwrote is unknown, so the caller must assume the worst: a takeover
    /// from an attempt that died mid-effect.
    AcquiredOverUnreadable,
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
    /// The completing attempt's clock, in milliseconds since the Unix epoch: a record whose
    /// lease ended before it is not completed (see [`Store::complete`]).
    pub now_ms: u64,
}

/// Where idempotency records live.
///
/// Every method is one atomic step; stores must pass the suite in `effectively_once::contract`
/// (feature `contract`), which runs against [`InMemoryStore`](crate::InMemoryStore) and
/// `DynamoDbStore` alike.
pub trait Store: Send + Sync {
    /// Writes `record` (in progress) unless a record blocks it at `now_ms`: one exists whose
    /// dedup window has not ended and which is completed or in progress within its lease.
    /// On success, returns the record it overwrote, if any, read in the same atomic step.
    fn claim(&self, record: &Record, now_ms: u64) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Completes the record if `owner` holds it in progress and its lease has not ended at
    /// `completion.now_ms` (`lease_expires_at_ms >= now_ms`). A lease that ended is refused
    /// even when no other attempt took the key over yet. Owner fencing alone would keep the
    /// record consistent, but then a record seen in progress past its lease could still turn
    /// completed at any moment; with this rule it is settled: only a new claim changes it, so
    /// a reader that finds it so (an audit, an effect flagging its outcome as ambiguous) may
    /// treat its attempt as dead without racing it.
    ///
    /// A record already completed by the same owner succeeds, unchanged: a retried request
    /// whose first answer was lost finds its own write landed. Anything else (another owner,
    /// no record, the lease ended) is refused with [`StoreErrorKind::Fenced`].
    fn complete(
        &self,
        id: &str,
        owner: &str,
        completion: Completion<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes the record if `owner` holds it in progress, or succeeds if it is already gone (a
    /// retried release). A completed record is never released, its owner's included: deleting
    /// it would make the next delivery run the effect again. That, and a record of another
    /// owner, are refused with [`StoreErrorKind::Fenced`] and left as they are.
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

/// Why a store call failed, as far as a caller needs to know to retry or give up
/// ([`StoreErrorKind::retry`]).
///
/// Each kind's class is that of the caller's own write or read failing so (a ledger entry, an
/// email marker's row). A once-only record's failure reaches the caller as an
/// [`Error`](crate::Error) instead, whose [`ErrorKind`](crate::ErrorKind) has its own class: a
/// record the store refuses or cannot read back is the store's or the deployment's fault there
/// ([`ErrorKind::Store`](crate::ErrorKind::Store), [`Retry::AfterFix`]), not the message's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The backend shed load (throttling, capacity exceeded). [`Retry::Now`].
    Throttled,
    /// The backend could not be reached or failed (timeout, connection, 5xx). [`Retry::Now`].
    Unavailable,
    /// This attempt no longer holds the record in progress: its lease ended (and another
    /// attempt may have taken it over), or the record is another's, or completed.
    /// [`Retry::Now`]: the next delivery finds the record as it now stands.
    Fenced,
    /// The item exceeds the backend's size limit. [`Retry::Never`].
    TooLarge,
    /// A stored record could not be read back (missing or malformed attribute).
    /// [`Retry::Never`].
    Malformed,
    /// The backend or this deployment is set up wrong in a way an operator fixes: a missing
    /// table, access denied, unknown credentials, a table the caller was configured without, a
    /// full item collection (a partition key at its 10 GB under a local secondary index).
    /// [`Retry::AfterFix`]: it is no verdict on the message, so the message waits for the fix
    /// (in its queue, stream or DLQ) instead of being given up on, and a FIFO group keeps its
    /// order. A once-only record's store set up so is
    /// [`ErrorKind::StoreUnavailable`](crate::ErrorKind::StoreUnavailable) to its caller.
    Misconfigured,
    /// Any other failure (a bad request). [`Retry::Never`].
    Other,
    /// A write's own condition failed and nothing said what that means: no answer was given
    /// for it (`effectively_once_dynamodb::Tx::otherwise`). The message names the write and its
    /// table. [`Retry::AfterFix`]: the same write fails the same way while the data stands, yet
    /// the message is not at fault (stock may arrive, a deploy may answer the condition), so
    /// the batch drivers hold the message rather than give it up.
    ConditionFailed,
    /// The caller used the store's API in a way it refuses: a programmer error, named in the
    /// message ([`ErrorKind::Misuse`](crate::ErrorKind::Misuse)). [`Retry::AfterFix`].
    Misuse,
}

impl StoreErrorKind {
    /// What a later delivery of the message whose write or read failed so can do about it:
    /// each kind's one class.
    pub fn retry(self) -> Retry {
        match self {
            StoreErrorKind::Throttled | StoreErrorKind::Unavailable | StoreErrorKind::Fenced => Retry::Now,
            StoreErrorKind::Misconfigured | StoreErrorKind::ConditionFailed | StoreErrorKind::Misuse => Retry::AfterFix,
            StoreErrorKind::TooLarge | StoreErrorKind::Malformed | StoreErrorKind::Other => Retry::Never,
        }
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

    /// What a later delivery of the message can do about this failure of the caller's own
    /// write or read ([`StoreErrorKind::retry`]): [`Retry::Never`] for the write refused for
    /// good (too large, a request the store calls invalid). A once-only record the store
    /// refuses is classed by [`Error::retry`](crate::Error::retry) instead.
    pub fn retry(&self) -> Retry {
        self.kind.retry()
    }

    /// Its message and source, for an [`Error`](crate::Error) that takes them over.
    pub(crate) fn into_parts(self) -> (String, Option<Box<dyn std::error::Error + Send + Sync>>) {
        (self.message, self.source)
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
