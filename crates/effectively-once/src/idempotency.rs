//! Claim, run, complete: the protocol that makes a handler run once per key.
//!
//! This file holds [`Idempotency`], its claim and its run; `attempt` holds the types of the
//! two-phase API, `complete` the last step (complete or release) with its retries.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::config::Config;
use crate::error::{Error, ErrorChain, ErrorKind, RunError};
use crate::key::Key;
use crate::protocol::{self, Judged};
use crate::record::Record;
use crate::store::Store;

mod attempt;
mod complete;
#[cfg(test)]
mod tests;

pub use self::attempt::{Attempt, Begin, Replaced};

/// The longest the lease timer sleeps before checking the clock again (keeps `Instant`
/// arithmetic in range whatever the lease).
const MAX_TIMER: Duration = Duration::from_secs(3600);

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
            Outcome::Fresh(value) | Outcome::Replayed(value) => value,
        }
    }

    /// The response, fresh or replayed.
    pub fn response(&self) -> &R {
        match self {
            Outcome::Fresh(value) | Outcome::Replayed(value) => value,
        }
    }

    /// Whether this call was a duplicate.
    pub fn is_replay(&self) -> bool {
        matches!(self, Outcome::Replayed(_))
    }
}

/// 2001-09-09 in milliseconds since the Unix epoch: no real invocation deadline is earlier.
pub const PLAUSIBLE_DEADLINE_MS: u64 = 1_000_000_000_000;

/// A Lambda context's deadline (`Context::deadline`, milliseconds since the Unix epoch), or
/// `None` when the value is no epoch time: `0` (`Context::default()` in tests, some emulators)
/// or a duration (`cargo lambda watch` sends its timeout, `600000`). Read as "unknown", not as
/// "already passed" (every record would be refused) nor as "no limit" (without a deadline the
/// configured lease bounds an attempt). [`Idempotency::with_deadline`] reads its argument this
/// way, and so do the `effectively-once-lambda` drivers (they read the context's deadline through it).
pub fn epoch_deadline_ms(deadline_ms: u64) -> Option<u64> {
    (deadline_ms >= PLAUSIBLE_DEADLINE_MS).then_some(deadline_ms)
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
            tracing::warn!(
                "idempotency is DISABLED (IDEMPOTENCY_DISABLED): run() and its layer run the handler on every \
                 delivery; begin/complete, and the ledger and email effects, keep their conditions"
            );
        }
        Idempotency { store: Arc::new(store), config: Arc::new(config), deadline_ms: None }
    }

    /// The same, bounded by an invocation's deadline in milliseconds since the Unix epoch (a
    /// Lambda `Context::deadline`): leases end no later than it, so a timed-out invocation's
    /// key is free when the retry comes. A deadline already passed refuses to start rather
    /// than taking a lease that cannot fence anything.
    ///
    /// A value that is no epoch time at all is read as "no deadline known", as the Lambda
    /// drivers read it ([`epoch_deadline_ms`]): `0` (`Context::default()` in tests) or a
    /// duration (`cargo lambda watch` sends `600000`). The configured lease then bounds the
    /// attempt; such a value does not refuse every record.
    ///
    /// Takes the context's `u64` or a batch driver's `Option<u64>` (`None`: unknown) alike.
    pub fn with_deadline(&self, deadline_ms: impl Into<Option<u64>>) -> Self {
        Idempotency { deadline_ms: deadline_ms.into().and_then(epoch_deadline_ms), ..self.clone() }
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
    ///
    /// # What a handler may assume: it runs within its lease, and no longer
    ///
    /// The claim gives the attempt a lease ([`Config::with_lease`](crate::Config::with_lease), ended
    /// sooner by [`with_deadline`](Self::with_deadline)).
    ///
    /// - While the lease lasts, no other attempt runs the handler for this key: other
    ///   deliveries meet the record in progress and are refused with
    ///   [`ErrorKind::InProgress`]. Attempts compare their own clocks with the stored lease, so
    ///   leave a margin for clock skew.
    /// - When the lease ends, the handler is cut off: its future is dropped at its next
    ///   `.await` (the configured clock is read each time it is polled, and a timer wakes it
    ///   at the lease end), exactly as if the process had crashed there. The record stays in
    ///   progress, and the next delivery takes the key over ([`Attempt::took_over`]) and runs
    ///   the handler again. So every side effect must survive being cut off anywhere, as it
    ///   must survive a crash: key it, or write it in one transaction with its record (commit
    ///   once, in `effectively-once-dynamodb`: no lease there, nothing to outrun).
    /// - A handler that returns after its lease ended (it blocked the thread past it) has its
    ///   result refused: the record is not completed, and `run` returns
    ///   [`ErrorKind::LeaseLost`] (retryable), never [`Outcome::Fresh`].
    /// - So [`Outcome::Fresh`] means: the handler ran to its end, and its record was
    ///   completed, within its lease, with no other attempt running it meanwhile.
    ///
    /// Set the lease well above the slowest run you expect; in Lambda the invocation's deadline
    /// sets it. The timer is tokio's: run on a runtime with time enabled (`#[tokio::main]` and
    /// the Lambda runtime have it).
    ///
    /// Why bound the handler rather than renew the lease while it runs (a heartbeat)? In Lambda
    /// the deadline caps the lease and cannot be extended, so renewal buys nothing there; a
    /// heartbeat costs a write per interval on top of the two requests of a first delivery;
    /// and it cannot speak for a process that is paused (a frozen sandbox, a stalled host, a
    /// network partition), which resumes after its lease all the same, so the check at
    /// completion would still be needed. Bounding keeps one rule, which the store enforces in
    /// its completion condition: after `lease_expires_at` an attempt is dead, and it never
    /// comes back to complete, so a record seen in progress past its lease is settled until a
    /// new claim. The price: a handler that finishes just after its lease, even with no other
    /// delivery waiting, is run again by the next delivery, as after a crash.
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
        let lease_end_ms = attempt.lease_expires_at_ms;
        let Some(result) = self.within_lease(lease_end_ms, handler()).await else {
            // Left in progress, as a crash leaves it: its lease has ended, so the next delivery
            // takes it over at once and learns (`took_over`) that this attempt may have done
            // part of its work.
            tracing::warn!(key = %key, lease_end_ms, "handler outran its lease: cut off, not completed");
            return Err(outran_lease(&attempt, self.config.now_ms()).into());
        };
        match result {
            Ok(response) => {
                self.complete(attempt, &response).await?;
                Ok(Outcome::Fresh(response))
            }
            Err(error) => {
                if let Err(release) = self.release(attempt).await {
                    // The record stays in progress until its lease ends; the retry waits that
                    // long, which is slower but never runs the handler twice at once.
                    tracing::warn!(key = %key, error = %ErrorChain(&release), "could not release after handler failure");
                }
                Err(RunError::Handler(error))
            }
        }
    }

    /// Polls `handler` until it finishes or the lease ends at `lease_end_ms`, whichever comes
    /// first; `None` when the lease ended first (the handler is dropped, never polled again).
    ///
    /// [`run`](Self::run) bounds its handler with it; a caller of [`begin`](Self::begin) bounds
    /// its own work the same way, with [`Attempt::lease_expires_at_ms`], so that no work goes on
    /// once another delivery may take the key over. The configured clock decides, read before
    /// every poll, so a clock that moves by other means than tokio's (a test's manual clock)
    /// bounds the handler too; the timer only wakes a handler that waits on something slower
    /// than its lease.
    pub async fn within_lease<T>(&self, lease_end_ms: u64, handler: impl Future<Output = T>) -> Option<T> {
        let clock = &self.config.clock;
        let until_end = |now_ms: u64| Duration::from_millis(lease_end_ms.saturating_sub(now_ms) + 1).min(MAX_TIMER);
        let mut handler = std::pin::pin!(handler);
        let mut timer = std::pin::pin!(tokio::time::sleep(until_end(clock.now_ms())));
        std::future::poll_fn(|cx| {
            if clock.now_ms() > lease_end_ms {
                return Poll::Ready(None);
            }
            if let Poll::Ready(out) = handler.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            while timer.as_mut().poll(cx).is_ready() {
                let now_ms = clock.now_ms();
                if now_ms > lease_end_ms {
                    return Poll::Ready(None);
                }
                // Woken early by the configured clock's measure: sleep the rest.
                timer.as_mut().reset(tokio::time::Instant::now() + until_end(now_ms));
            }
            Poll::Pending
        })
        .await
    }

    /// Claims `key` for `payload`: the first half of [`run`](Self::run), for effects that must
    /// record something of their own at completion (an email's provider message id, say).
    /// It claims whatever [`Config::with_disabled`](crate::Config::with_disabled) says: an effect built on
    /// it keeps its once-only condition.
    pub async fn begin<P, R>(&self, key: &Key, payload: &P) -> Result<Begin<R>, Error>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let hash = self.config.payload_hash(payload)?;
        let now_ms = self.config.now_ms();
        let lease_expires_at_ms = self.lease_end(now_ms)?;
        let owner = uuid::Uuid::new_v4().to_string();
        let record =
            Record::in_progress(key.as_str(), hash.as_str(), owner, lease_expires_at_ms, self.expiration_s(now_ms));
        match protocol::judge(self.store.claim(&record, now_ms).await?, &record) {
            Judged::Claimed(replaced) => {
                if replaced == Replaced::Unknown {
                    tracing::warn!(key = %key, "what the claim replaced is unknown; assuming a takeover");
                }
                Ok(Begin::Claimed(self.attempt(record, replaced)))
            }
            Judged::Blocked(existing) => {
                let response = existing.replay(&hash)?;
                if let Some(hook) = &self.config.replay_hook {
                    (hook.0)(&existing);
                }
                Ok(Begin::Replayed(response))
            }
        }
    }

    fn attempt(&self, record: Record, replaced: Replaced) -> Attempt {
        Attempt {
            id: record.id,
            owner: record.owner,
            lease_expires_at_ms: record.lease_expires_at_ms,
            replaced: Box::new(replaced),
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
}

fn outran_lease(attempt: &Attempt, now_ms: u64) -> Error {
    Error::new(
        ErrorKind::LeaseLost,
        format!(
            "{}: the lease ended at {} ms, before the handler's result could be recorded (now {now_ms} ms); not completed",
            attempt.id, attempt.lease_expires_at_ms
        ),
    )
}
