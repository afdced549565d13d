//! Claim, run, complete: the protocol that makes a handler run once per key.

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
use crate::record::{Record, Status};
use crate::store::{Completion, Store, StoreErrorKind};

/// Tries of a completion whose answer did not come back (throttled, or unavailable: the write
/// may have landed). A retry that finds the record completed by its own owner succeeds, so
/// retrying is safe; giving up leaves the record in progress until its lease ends, and the
/// effect is run again by the takeover.
const COMPLETE_TRIES: u32 = 3;
/// Pause before the first retry of a completion; doubled for the next.
const COMPLETE_BACKOFF: Duration = Duration::from_millis(25);
/// Tries of a release whose answer did not come back, paced as a completion's
/// ([`COMPLETE_BACKOFF`]). A release left undone keeps the record in progress until its lease
/// ends, and the attempt that takes it over then cannot tell "failed, nothing done" from
/// "crashed mid-effect": an effect that must not repeat (an email at most once) gives up on it.
const RELEASE_TRIES: u32 = 3;
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
    /// Boxed: two records, on the rare takeover path only.
    replaced: Box<Replaced>,
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
        self.replaced.record()
    }

    /// What this attempt's claim replaced: nothing (a free key), a record (past its window, or
    /// in progress past its lease), or something unknown (an item that could not be read, or
    /// a store that could not say what a claim whose answer was lost had replaced). An effect
    /// that must not repeat takes [`Replaced::Unknown`] for the worst.
    pub fn what_it_replaced(&self) -> &Replaced {
        &self.replaced
    }

    /// Whether this attempt may have taken the key over from an attempt that died (or timed
    /// out) while in progress, whose effect may or may not have happened. True when the claim
    /// replaced such a record, and also when what it replaced is unknown
    /// ([`Replaced::is_takeover`]). Stores keep what a claim replaced with the record, so a
    /// claim whose answer was lost learns it on the retry; a store that cannot answers
    /// [`Replaced::Unknown`], and an effect that must not repeat assumes the worst.
    pub fn took_over(&self) -> bool {
        self.replaced.is_takeover()
    }
}

/// What a claim replaced: [`Attempt::what_it_replaced`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Replaced {
    /// The key was free.
    Nothing,
    /// This record, as it was stored: past its dedup window, or in progress past its lease.
    Record(Record),
    /// `replaced`, an attempt that died in progress after taking the key over itself; `first`
    /// began that run of takeovers ([`Claim::AcquiredInRun`](crate::Claim::AcquiredInRun)).
    Run {
        /// The record overwritten.
        replaced: Record,
        /// The record the run of takeovers began with.
        first: Record,
    },
    /// Not known: assume the worst (an attempt that died mid-effect, with another payload).
    Unknown,
}

impl Replaced {
    /// Whether the claim may have taken the key over from an attempt that died (or timed out)
    /// in progress, whose effect may or may not have happened: it replaced such a record, or
    /// what it replaced is unknown.
    pub fn is_takeover(&self) -> bool {
        match self {
            Replaced::Nothing => false,
            Replaced::Record(record) => record.status == Status::InProgress,
            Replaced::Run { .. } | Replaced::Unknown => true,
        }
    }

    /// The record overwritten, if known.
    pub fn record(&self) -> Option<&Record> {
        match self {
            Replaced::Record(record) | Replaced::Run { replaced: record, .. } => Some(record),
            Replaced::Nothing | Replaced::Unknown => None,
        }
    }

    /// The record that held the key before the attempts that died taking it over: the record
    /// overwritten, or, after a run of takeovers, the one the run began with. What the key was
    /// bound to is this record's.
    pub fn first(&self) -> Option<&Record> {
        match self {
            Replaced::Record(record) | Replaced::Run { first: record, .. } => Some(record),
            Replaced::Nothing | Replaced::Unknown => None,
        }
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

    /// Completes an attempt with its response, which duplicates will receive.
    ///
    /// Refused with [`ErrorKind::LeaseLost`] when the attempt's lease has ended (see
    /// [`run`](Self::run)): checked here before sending, and by the store's condition. A
    /// completion whose answer did not come back (throttled, unavailable) is sent again, up to
    /// three tries, before the record is left to its lease: a retry that finds the record
    /// already completed by this attempt succeeds.
    pub async fn complete<R: Serialize>(&self, attempt: Attempt, response: &R) -> Result<(), Error> {
        self.complete_fenced(attempt, response, Fence::OwnerAndLease).await
    }

    /// Completes an attempt whose effect has already happened, even after its lease ended,
    /// provided the attempt still holds its record in progress: the owner fence alone decides.
    ///
    /// Only for an effect that is over, with a result in hand, when it is recorded, and whose
    /// record nobody settles by its lease alone: keyed email (`effectively_once_effects::send_once`), completing
    /// a marker with the message id the provider returned. Why it is safe there: every claim
    /// writes its own owner token, so a record still in progress under this attempt's owner
    /// proves no other attempt took the key over (nor sent, nor recorded another outcome), and
    /// none can complete it after this write; readers that find an email marker past its lease
    /// claim it before acting on it, and that claim fences this completion. What refusing would
    /// cost: the send is not undone, and the marker is left to a later attempt, which records
    /// the email ambiguous (at most once) or sends a second copy (at least once).
    ///
    /// Not for [`run`](Self::run), whose handlers are cut off at their lease and whose records
    /// are settled by it (see [`Store::complete`]); use [`complete`](Self::complete) elsewhere.
    pub async fn complete_while_owned<R: Serialize>(&self, attempt: Attempt, response: &R) -> Result<(), Error> {
        self.complete_fenced(attempt, response, Fence::Owner).await
    }

    async fn complete_fenced<R: Serialize>(&self, attempt: Attempt, response: &R, fence: Fence) -> Result<(), Error> {
        let json = serde_json::to_string(response)
            .map_err(|e| Error::new(ErrorKind::Serialization, "response is not serialisable").with_source(e))?;
        let too_large = json.len() > self.config.max_response_bytes;
        let now_ms = self.config.now_ms();
        if fence == Fence::OwnerAndLease && now_ms > attempt.lease_expires_at_ms {
            return Err(outran_lease(&attempt, now_ms));
        }
        // Owner only: the store's lease condition is judged at the attempt's own lease end,
        // which the record carries unchanged while this attempt holds it, so only the owner and
        // in-progress conditions can refuse.
        let judged_at = |now_ms: u64| match fence {
            Fence::OwnerAndLease => now_ms,
            Fence::Owner => now_ms.min(attempt.lease_expires_at_ms),
        };
        // A response too large to keep still completes the record: the effect happened, and a
        // duplicate must not repeat it; it gets ResponseTooLarge instead of a replay.
        let mut completion = Completion {
            response: (!too_large).then_some(json.as_str()),
            expiration_s: self.expiration_s(now_ms),
            now_ms: judged_at(now_ms),
        };
        let mut tries = 1;
        loop {
            match self.store.complete(&attempt.id, &attempt.owner, completion.clone()).await {
                Ok(()) => break,
                Err(error)
                    if tries < COMPLETE_TRIES
                        && matches!(error.kind(), StoreErrorKind::Throttled | StoreErrorKind::Unavailable) =>
                {
                    tracing::warn!(key = %attempt.id, error = %ErrorChain(&error), tries, "completion unanswered; sending it again");
                    tokio::time::sleep(COMPLETE_BACKOFF * 2u32.pow(tries - 1)).await;
                    tries += 1;
                    // The retry is judged on the clock as it is now: if the first write did
                    // not land and the lease has ended meanwhile, the store refuses it.
                    completion.now_ms = judged_at(self.config.now_ms());
                }
                Err(error) => return Err(error.into()),
            }
        }
        if too_large {
            return Err(too_large_error(json.len(), self.config.max_response_bytes));
        }
        Ok(())
    }

    /// Releases an attempt: deletes its record so a retry runs the effect again.
    ///
    /// A release whose answer did not come back (throttled, or unavailable: the delete may have
    /// landed) is sent again, up to three tries, as a completion is. A retry that finds the
    /// record gone succeeds (the store's contract). A retry that finds it another attempt's
    /// (or completed) counts as done only while this attempt's lease lasts, by this attempt's
    /// clock: no claim takes a record over before its lease ends, so the other attempt claimed
    /// it after an earlier try had deleted it. Past the lease, that attempt may have taken it
    /// over from this one, unreleased, and judged it as a crash: refused with
    /// [`ErrorKind::LeaseLost`], as is a first try that finds the record not this attempt's.
    /// On any error the record may still be in progress until its lease ends.
    pub async fn release(&self, attempt: Attempt) -> Result<(), Error> {
        let mut tries = 1;
        loop {
            match self.store.release(&attempt.id, &attempt.owner).await {
                Ok(()) => return Ok(()),
                Err(error)
                    if tries < RELEASE_TRIES
                        && matches!(error.kind(), StoreErrorKind::Throttled | StoreErrorKind::Unavailable) =>
                {
                    tracing::warn!(key = %attempt.id, error = %ErrorChain(&error), tries, "release unanswered; sending it again");
                    tokio::time::sleep(COMPLETE_BACKOFF * 2u32.pow(tries - 1)).await;
                    tries += 1;
                }
                Err(error)
                    if tries > 1
                        && error.kind() == StoreErrorKind::Fenced
                        && self.config.now_ms() <= attempt.lease_expires_at_ms =>
                {
                    tracing::info!(key = %attempt.id, "an earlier release landed; the key has been claimed again since");
                    return Ok(());
                }
                Err(error) => return Err(error.into()),
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

/// What a completion is fenced by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fence {
    /// The owner, and the lease not ended: [`Idempotency::complete`].
    OwnerAndLease,
    /// The owner alone: [`Idempotency::complete_while_owned`].
    Owner,
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

fn too_large_error(len: usize, max: usize) -> Error {
    Error::new(ErrorKind::ResponseTooLarge, format!("response has {len} bytes of JSON, at most {max} are kept"))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::{Claim, Clock as _, InMemoryStore, ManualClock, StoreError};

    /// An emulator's `0` or `600000` (`cargo lambda watch`: the timeout, not an epoch time) is
    /// unknown, not passed; a real deadline, near or ten minutes away, is kept.
    #[test]
    fn lambda_deadlines_emulated_and_real() {
        let now = crate::SystemClock.now_ms();
        assert_eq!(epoch_deadline_ms(0), None);
        assert_eq!(epoch_deadline_ms(600_000), None);
        assert_eq!(epoch_deadline_ms(now + 600_000), Some(now + 600_000));
        assert_eq!(epoch_deadline_ms(now + 200), Some(now + 200));
    }

    #[tokio::test]
    async fn emulated_deadline_is_unknown_and_a_near_one_bounds_the_lease() {
        let clock = Arc::new(ManualClock::new());
        let now = clock.now_ms();
        let idem = Idempotency::new(InMemoryStore::new(), Config::default().with_clock(clock));
        for (name, deadline, lease_end) in [
            ("zero", 0, now + DEFAULT_LEASE_MS),
            ("watch", 600_000, now + DEFAULT_LEASE_MS),
            ("near", now + 200, now + 200),
        ] {
            let key = Key::new("deadline", name).unwrap();
            let Begin::Claimed(attempt) = idem.with_deadline(deadline).begin::<_, u64>(&key, &1).await.unwrap() else {
                panic!("expected a claim")
            };
            assert_eq!(attempt.lease_expires_at_ms(), lease_end, "{name}");
        }
        let key = Key::new("deadline", "passed").unwrap();
        let error = idem.with_deadline(now).begin::<_, u64>(&key, &1).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::DeadlineExceeded);
    }

    const DEFAULT_LEASE_MS: u64 = crate::DEFAULT_LEASE.as_millis() as u64;

    /// An in-memory store that fails the next `failing` releases before they land.
    #[derive(Default)]
    struct FlakyRelease {
        inner: InMemoryStore,
        failing: AtomicU32,
        releases: AtomicU32,
    }

    impl Store for FlakyRelease {
        async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
            self.inner.claim(record, now_ms).await
        }
        async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
            self.inner.complete(id, owner, completion).await
        }
        async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
            self.releases.fetch_add(1, Ordering::SeqCst);
            if self.failing.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                return Err(StoreError::new(StoreErrorKind::Throttled, "throughput exceeded"));
            }
            self.inner.release(id, owner).await
        }
        async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
            self.inner.get(id).await
        }
    }

    /// A failed handler's release that is throttled twice is sent again until it lands: the
    /// record is gone, and the retry runs the handler at once instead of after the lease (where
    /// it would be a takeover, `took_over`). A third failure is the last: the record is left.
    /// Paused time: the backoff sleeps pass at once.
    #[tokio::test(start_paused = true)]
    async fn a_throttled_release_is_sent_again() {
        for (failing, released) in [(2, true), (3, false)] {
            let store = FlakyRelease { failing: AtomicU32::new(failing), ..Default::default() };
            let clock = Arc::new(ManualClock::new());
            let idem = Idempotency::new(store, Config::default().with_clock(clock));
            let key = Key::new("job", "release").unwrap();
            let failed = idem.run(&key, &1, || async { Err::<u32, _>("handler failed") }).await;
            assert!(matches!(failed, Err(RunError::Handler("handler failed"))));
            assert_eq!(idem.store().releases.load(Ordering::SeqCst), 3, "{failing} failures");
            let record = idem.store().get(key.as_str()).await.unwrap();
            assert_eq!(record.is_none(), released, "{failing} failures: {record:?}");
            let retry = idem.run(&key, &1, || async { Ok::<u32, &str>(7) }).await;
            match released {
                true => assert_eq!(retry.unwrap(), Outcome::Fresh(7)),
                false => assert!(retry.is_err(), "in progress until its lease ends"),
            }
        }
    }

    /// A producer that re-serialises its payload (`1250` as `1250.0`, keys reordered) sends a
    /// duplicate, not another payload.
    #[tokio::test]
    async fn a_re_serialised_payload_is_a_duplicate() {
        let idem = Idempotency::new(InMemoryStore::new(), Config::default());
        let key = Key::new("payments", "pay_1").unwrap();
        let first: serde_json::Value = serde_json::from_str(r#"{"amount_cents": 1250, "currency": "USD"}"#).unwrap();
        let again: serde_json::Value = serde_json::from_str(r#"{"currency":"USD","amount_cents":1250.0}"#).unwrap();
        assert_eq!(idem.run(&key, &first, || async { Ok::<_, ()>(1u32) }).await.unwrap(), Outcome::Fresh(1));
        assert_eq!(idem.run(&key, &again, || async { Ok::<_, ()>(2u32) }).await.unwrap(), Outcome::Replayed(1));
        let other: serde_json::Value = serde_json::from_str(r#"{"currency":"USD","amount_cents":1251}"#).unwrap();
        let reused = idem.run(&key, &other, || async { Ok::<_, ()>(3u32) }).await.unwrap_err();
        assert!(matches!(reused, RunError::Idempotency(e) if e.kind() == ErrorKind::KeyReused));
    }

    /// A record written before the hash was versioned (bare version 1 hex) still answers its
    /// payload inside the dedup window, in progress or completed; another payload is key reuse.
    #[tokio::test]
    async fn a_record_with_a_version_1_hash_still_matches_its_payload() {
        let clock = Arc::new(ManualClock::new());
        let config = Config::default().with_clock(clock.clone());
        let idem = Idempotency::new(InMemoryStore::new(), config.clone());
        let payload = serde_json::json!({"amount_cents": 1250, "currency": "USD"});
        let hash = config.payload_hash(&payload).unwrap();
        let now_ms = clock.now_ms();
        for (id, status) in [("job#old-done", Status::Completed), ("job#old-busy", Status::InProgress)] {
            let record = Record {
                id: id.into(),
                status: Status::InProgress,
                lease_expires_at_ms: now_ms + 60_000,
                expiration_s: now_ms / 1000 + 3600,
                payload_hash: hash.v1().to_owned(),
                owner: "earlier-build".into(),
                response: None,
            };
            assert!(matches!(idem.store().claim(&record, now_ms).await.unwrap(), Claim::Acquired { .. }));
            if status == Status::Completed {
                let completion = Completion { response: Some("7"), expiration_s: record.expiration_s, now_ms };
                idem.store().complete(id, "earlier-build", completion).await.unwrap();
            }
        }
        let done = Key::new("job", "old-done").unwrap();
        assert_eq!(idem.run(&done, &payload, || async { Ok::<_, ()>(8u32) }).await.unwrap(), Outcome::Replayed(7));
        let busy = Key::new("job", "old-busy").unwrap();
        let in_progress = idem.run(&busy, &payload, || async { Ok::<_, ()>(8u32) }).await.unwrap_err();
        assert!(matches!(in_progress, RunError::Idempotency(e) if e.kind() == ErrorKind::InProgress));
        let other = serde_json::json!({"amount_cents": 1251, "currency": "USD"});
        let reused = idem.run(&done, &other, || async { Ok::<_, ()>(8u32) }).await.unwrap_err();
        assert!(matches!(reused, RunError::Idempotency(e) if e.kind() == ErrorKind::KeyReused));
    }

    /// A record a newer build hashed under a version this one does not know is not taken for
    /// another payload silently: the error says so.
    #[tokio::test]
    async fn an_unknown_hash_version_is_named_in_the_error() {
        let idem = Idempotency::new(InMemoryStore::new(), Config::default());
        let record = Record {
            id: "job#new".into(),
            status: Status::InProgress,
            lease_expires_at_ms: u64::MAX,
            expiration_s: u64::MAX,
            payload_hash: "v9:00".into(),
            owner: "newer-build".into(),
            response: None,
        };
        idem.store().claim(&record, 0).await.unwrap();
        let key = Key::new("job", "new").unwrap();
        let err = idem.run(&key, &1, || async { Ok::<_, ()>(1u32) }).await.unwrap_err();
        let RunError::Idempotency(e) = err else { panic!("{err:?}") };
        assert_eq!(e.kind(), ErrorKind::KeyReused);
        assert!(e.to_string().contains("\"v9\""), "{e}");
    }
}
