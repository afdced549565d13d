//! Claim, run, complete: the protocol that makes a handler run once per key.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::config::Config;
use crate::error::{Error, ErrorKind, RunError};
use crate::key::Key;
use crate::record::{Record, Status};
use crate::store::{Claim, Completion, Store};

/// What an idempotent call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<R> {
    /// The handler ran in this call.
    Fresh(R),
    /// A duplicate: the handler did not run; this is the response stored by the call that did.
    Replayed(R),
}

impl<R> Outcome<R> {
    /// The response, fresh or replayed.
    pub fn into_inner(self) -> R {
        match self {
            Outcome::Fresh(r) | Outcome::Replayed(r) => r,
        }
    }

    /// The response, fresh or replayed.
    pub fn response(&self) -> &R {
        match self {
            Outcome::Fresh(r) | Outcome::Replayed(r) => r,
        }
    }

    /// Whether this call was a duplicate.
    pub fn is_replay(&self) -> bool {
        matches!(self, Outcome::Replayed(_))
    }
}

/// The result of [`Idempotency::begin`].
#[derive(Debug)]
pub enum Begin<R> {
    /// This attempt owns the key: run the effect, then complete or release.
    Claimed(Attempt),
    /// A duplicate: the stored response.
    Replayed(R),
}

/// An attempt that owns a key until it completes, releases, or its lease ends.
///
/// Dropping it without completing leaves the record in progress until the lease ends, which is
/// what a crash does: no other attempt runs the effect before then.
#[derive(Debug)]
#[must_use = "an attempt holds its key until completed or released"]
pub struct Attempt {
    id: String,
    owner: String,
    lease_expires_at_ms: u64,
    replaced: Option<Record>,
    replaced_unknown: bool,
}

impl Attempt {
    /// The record id this attempt owns.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// This attempt's owner token.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// When this attempt's lease ends, in milliseconds since the Unix epoch.
    pub fn lease_expires_at_ms(&self) -> u64 {
        self.lease_expires_at_ms
    }

    /// The record this attempt's claim overwrote: past its dedup window, or in progress with
    /// its lease ended.
    pub fn replaced(&self) -> Option<&Record> {
        self.replaced.as_ref()
    }

    /// Whether this attempt may have taken the key over from an attempt that died (or timed
    /// out) while in progress, whose effect may or may not have happened. True when the claim
    /// replaced such a record, and also when the claim's answer was lost and its retry met the
    /// claim's own record: what that first write replaced is then unknown, and an effect that
    /// must not repeat has to assume the worst (found by the chaos scenario: a lost claim answer
    /// after a takeover hid the takeover and a receipt went out twice).
    pub fn took_over(&self) -> bool {
        self.replaced_unknown || self.replaced.as_ref().is_some_and(|r| r.status == Status::InProgress)
    }
}

/// Runs handlers once per key over a [`Store`].
///
/// Cheap to clone: clones share the store and the config.
#[derive(Debug)]
pub struct Idempotency<S> {
    store: Arc<S>,
    config: Arc<Config>,
    deadline_ms: Option<u64>,
}

impl<S> Clone for Idempotency<S> {
    fn clone(&self) -> Self {
        Idempotency { store: self.store.clone(), config: self.config.clone(), deadline_ms: self.deadline_ms }
    }
}

impl<S: Store> Idempotency<S> {
    /// Wraps a store.
    pub fn new(store: S, config: Config) -> Self {
        if config.disabled {
            tracing::warn!("idempotency is DISABLED (IDEMPOTENCY_DISABLED): every delivery runs its handler");
        }
        Idempotency { store: Arc::new(store), config: Arc::new(config), deadline_ms: None }
    }

    /// The same, bounded by an invocation's deadline in milliseconds since the Unix epoch (a
    /// Lambda `Context::deadline`): leases end no later than it, so a timed-out invocation's
    /// key is free when the retry comes. A deadline already passed, including `0`, refuses to
    /// start rather than taking a lease that cannot fence anything.
    pub fn with_deadline(&self, deadline_ms: u64) -> Self {
        Idempotency { deadline_ms: Some(deadline_ms), ..self.clone() }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs `handler` once per `key`: a duplicate (same key, same payload, within the dedup
    /// window) returns the first call's response without running it.
    ///
    /// If the handler fails, the record is released and the error returned as
    /// [`RunError::Handler`], so a retry runs it again. A business rejection that must answer
    /// duplicates the same way belongs in the `Ok` response.
    pub async fn run<P, R, E, F, Fut>(&self, key: &Key, payload: &P, handler: F) -> Result<Outcome<R>, RunError<E>>
    where
        P: Serialize + ?Sized,
        R: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        if self.config.disabled {
            return handler().await.map(Outcome::Fresh).map_err(RunError::Handler);
        }
        let attempt = match self.begin::<P, R>(key, payload).await? {
            Begin::Replayed(response) => return Ok(Outcome::Replayed(response)),
            Begin::Claimed(attempt) => attempt,
        };
        match handler().await {
            Ok(response) => {
                self.complete(attempt, &response).await?;
                Ok(Outcome::Fresh(response))
            }
            Err(e) => {
                if let Err(release) = self.release(attempt).await {
                    // The record stays in progress until its lease ends; the retry waits that
                    // long, which is slower but never runs the handler twice at once.
                    tracing::warn!(key = %key, error = %release, "could not release after handler failure");
                }
                Err(RunError::Handler(e))
            }
        }
    }

    /// Claims `key` for `payload`: the first half of [`run`](Self::run), for effects that must
    /// record something of their own at completion (an email's provider message id, say).
    pub async fn begin<P, R>(&self, key: &Key, payload: &P) -> Result<Begin<R>, Error>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let payload_hash = self.config.payload_hash(payload)?;
        let now_ms = self.config.now_ms();
        let lease_expires_at_ms = self.lease_end(now_ms)?;
        let record = Record {
            id: key.as_str().to_owned(),
            status: Status::InProgress,
            lease_expires_at_ms,
            expiration_s: self.expiration_s(now_ms),
            payload_hash,
            owner: uuid::Uuid::new_v4().to_string(),
            response: None,
        };
        match self.store.claim(&record, now_ms).await? {
            Claim::Acquired { replaced } => Ok(Begin::Claimed(self.attempt(record, replaced))),
            Claim::Exists(existing) => self.classify(record, existing),
        }
    }

    /// Completes an attempt with its response, which duplicates will receive.
    pub async fn complete<R: Serialize>(&self, attempt: Attempt, response: &R) -> Result<(), Error> {
        let json = serde_json::to_string(response)
            .map_err(|e| Error::new(ErrorKind::Serialization, "response is not serialisable").with_source(e))?;
        let too_large = json.len() > self.config.max_response_bytes;
        let expiration_s = self.expiration_s(self.config.now_ms());
        // A response too large to keep still completes the record: the effect happened, and a
        // duplicate must not repeat it; it gets ResponseTooLarge instead of a replay.
        let completion = Completion { response: (!too_large).then_some(json.as_str()), expiration_s };
        self.store.complete(&attempt.id, &attempt.owner, completion).await?;
        if too_large {
            return Err(too_large_error(json.len(), self.config.max_response_bytes));
        }
        Ok(())
    }

    /// Releases an attempt: deletes its record so a retry runs the effect again.
    pub async fn release(&self, attempt: Attempt) -> Result<(), Error> {
        self.store.release(&attempt.id, &attempt.owner).await?;
        Ok(())
    }

    fn attempt(&self, record: Record, replaced: Option<Record>) -> Attempt {
        Attempt {
            id: record.id,
            owner: record.owner,
            lease_expires_at_ms: record.lease_expires_at_ms,
            replaced,
            replaced_unknown: false,
        }
    }

    fn lease_end(&self, now_ms: u64) -> Result<u64, Error> {
        let lease_end = now_ms.saturating_add(self.config.lease.as_millis() as u64);
        match self.deadline_ms {
            None => Ok(lease_end),
            Some(deadline) if deadline <= now_ms => Err(Error::new(
                ErrorKind::DeadlineExceeded,
                format!("the invocation deadline ({deadline} ms) has passed"),
            )),
            Some(deadline) => Ok(lease_end.min(deadline)),
        }
    }

    fn expiration_s(&self, now_ms: u64) -> u64 {
        (now_ms / 1000).saturating_add(self.config.dedup_window.as_secs())
    }

    /// Tells apart what a failed claim found, from the record alone (no second read).
    fn classify<R: DeserializeOwned>(&self, mine: Record, existing: Record) -> Result<Begin<R>, Error> {
        if existing.owner == mine.owner && existing.status == Status::InProgress {
            // Our own write landed and its answer was lost; the retried write met it. What that
            // write replaced went with the lost answer.
            let mut attempt = self.attempt(existing, None);
            attempt.replaced_unknown = true;
            return Ok(Begin::Claimed(attempt));
        }
        let response = existing.replay(&mine.payload_hash)?;
        if let Some(hook) = &self.config.replay_hook {
            (hook.0)(&existing);
        }
        Ok(Begin::Replayed(response))
    }
}

fn too_large_error(len: usize, max: usize) -> Error {
    Error::new(ErrorKind::ResponseTooLarge, format!("response has {len} bytes of JSON, at most {max} are kept"))
}

impl Record {
    /// What a record that blocked a claim means for a payload hashing to `payload_hash`: the
    /// stored response of a completed record (a replay), or why there is none: key reused with
    /// another payload (permanent), in progress elsewhere (retryable), response not kept.
    pub fn replay<R: DeserializeOwned>(&self, payload_hash: &str) -> Result<R, Error> {
        if self.payload_hash != payload_hash {
            return Err(Error::new(
                ErrorKind::KeyReused,
                format!("key {} was used before with a different payload", self.id),
            ));
        }
        match (&self.status, &self.response) {
            (Status::InProgress, _) => Err(Error::new(
                ErrorKind::InProgress,
                format!("key {} is in progress elsewhere until {} ms", self.id, self.lease_expires_at_ms),
            )),
            (Status::Completed, Some(json)) => serde_json::from_str(json).map_err(|e| {
                Error::new(ErrorKind::Serialization, format!("stored response of {} does not deserialise", self.id))
                    .with_source(e)
            }),
            (Status::Completed, None) => Err(Error::new(
                ErrorKind::ResponseTooLarge,
                format!("key {} completed, but its response was too large to keep", self.id),
            )),
        }
    }
}
