//! A local LRU cache in front of a store: a duplicate answered from memory costs no request.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;

use crate::record::{Record, Status};
use crate::store::{Claim, Completion, Store, StoreError};

/// Powertools' default bound.
pub const DEFAULT_CAPACITY: usize = 256;

/// A store with an in-process LRU of **completed** records in front of it. A claim for a key it
/// holds (and whose dedup window is open) is answered from memory with no request; anything else
/// goes to the store. In-progress records are never cached (another attempt's lease would look
/// live forever), and what is cached is the record as stored: the payload check runs on every
/// replay, so a cached record never answers another payload.
///
/// Each process has its own cache: a duplicate that lands on another Lambda sandbox still costs
/// its one request. Off by default; opt in with `CachedStore::new(store, capacity)`. Every
/// operation on it is O(1) (the `lru` crate), under one short lock.
#[derive(Debug)]
pub struct CachedStore<S> {
    inner: S,
    state: Mutex<Lru>,
}

#[derive(Debug)]
struct Lru {
    records: LruCache<String, Record>,
    /// Records claimed through this cache and not yet completed or released, kept so the
    /// completion can cache the completed record. An attempt whose future was dropped never
    /// comes back for its entry, so it is bounded: entries whose lease has ended go from the
    /// least recently claimed end (such an attempt can no longer complete), and it never holds
    /// more than `capacity` (the least recently claimed goes first). A missing entry only costs
    /// a cache miss.
    claimed: LruCache<String, Record>,
}

impl<S> CachedStore<S> {
    /// A cache of at most `capacity` completed records over `inner`.
    pub fn new(inner: S, capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        CachedStore {
            inner,
            // Sparse: memory grows with what is held, not with the bound.
            state: Mutex::new(Lru { records: LruCache::sparse(capacity), claimed: LruCache::sparse(capacity) }),
        }
    }

    /// The store behind the cache.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remember(&self, record: Record) {
        if record.status != Status::Completed {
            return;
        }
        // At capacity, `put` drops the least recently used record.
        self.lock().records.put(record.id.clone(), record);
    }

    fn hold(&self, record: &Record, now_ms: u64) {
        let mut lru = self.lock();
        // Ended leases leave from the oldest claims: O(1) for each one removed.
        while lru.claimed.peek_lru().is_some_and(|(_, r)| r.lease_expires_at_ms < now_ms) {
            lru.claimed.pop_lru();
        }
        // At capacity, `put` drops the least recently claimed attempt's entry.
        lru.claimed.put(record.id.clone(), record.clone());
    }
}

impl<S: Store> Store for CachedStore<S> {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        let cached = {
            let mut lru = self.lock();
            match lru.records.get(&record.id) {
                Some(record) if record.blocks_claim_at(now_ms) => Some(record.clone()),
                Some(_) => {
                    lru.records.pop(&record.id);
                    None
                }
                None => None,
            }
        };
        if let Some(record) = cached {
            return Ok(Claim::Exists(record));
        }
        let claim = self.inner.claim(record, now_ms).await?;
        match &claim {
            Claim::Exists(existing) => self.remember(existing.clone()),
            Claim::Acquired { .. } | Claim::AcquiredInRun { .. } | Claim::AcquiredOverUnreadable => {
                self.hold(record, now_ms)
            }
        }
        Ok(claim)
    }

    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        self.inner.complete(id, owner, completion.clone()).await?;
        let claimed = self.lock().claimed.pop(id);
        if let Some(mut record) = claimed.filter(|r| r.owner == owner) {
            record.status = Status::Completed;
            record.response = completion.response.map(str::to_owned);
            record.expiration_s = completion.expiration_s;
            self.remember(record);
        }
        Ok(())
    }

    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        {
            let mut lru = self.lock();
            lru.claimed.pop(id);
            lru.records.pop(id);
        }
        self.inner.release(id, owner).await
    }

    async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
        self.inner.get(id).await
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::{Config, Idempotency, InMemoryStore, Key, ManualClock, Outcome};

    fn in_flight<S>(store: &CachedStore<S>) -> usize {
        store.lock().claimed.len()
    }

    /// Attempts whose futures were dropped mid-handler (a cancelled task, a timed-out
    /// invocation) never complete or release: their entries must not stay forever.
    #[tokio::test]
    async fn attempts_whose_futures_were_dropped_do_not_stay_in_flight() {
        let clock = Arc::new(ManualClock::new());
        let idem = Idempotency::new(
            CachedStore::new(InMemoryStore::new(), 4),
            Config::default().with_lease(Duration::from_secs(60)).with_clock(clock.clone()),
        );
        for n in 0..20 {
            let key = Key::new("t", &format!("dropped-{n}")).unwrap();
            let payload = json!(n);
            let run = idem.run(&key, &payload, std::future::pending::<Result<u32, ()>>);
            let mut run = std::pin::pin!(run);
            // Claimed, then the handler waits: poll once, then drop the future.
            std::future::poll_fn(|cx| {
                assert!(run.as_mut().poll(cx).is_pending());
                std::task::Poll::Ready(())
            })
            .await;
        }
        assert_eq!(idem.store().inner().records().len(), 20, "twenty records in progress");
        assert_eq!(in_flight(idem.store()), 4, "bounded by the capacity, not by the dropped attempts");
        // Once their leases end, the next claim sweeps them all out.
        clock.advance(Duration::from_secs(61));
        let key = Key::new("t", "live").unwrap();
        assert_eq!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(3u32) }).await.unwrap(), Outcome::Fresh(3));
        assert_eq!(in_flight(idem.store()), 0);
        // The completion through the cache still caches the record: the duplicate costs nothing.
        let before = idem.store().inner().requests();
        assert_eq!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(4u32) }).await.unwrap(), Outcome::Replayed(3));
        assert_eq!(idem.store().inner().requests(), before);
    }

    #[tokio::test]
    async fn a_duplicate_answered_from_the_cache_costs_no_request() {
        let clock = Arc::new(ManualClock::new());
        let idem = Idempotency::new(
            CachedStore::new(InMemoryStore::new(), 2),
            Config::default().with_dedup_window(Duration::from_secs(60)).with_clock(clock.clone()),
        );
        let key = Key::new("t", "e1").unwrap();
        assert_eq!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(7) }).await.unwrap(), Outcome::Fresh(7));
        assert_eq!(idem.store().inner().requests(), 2);
        assert_eq!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(8) }).await.unwrap(), Outcome::Replayed(7));
        assert_eq!(idem.store().inner().requests(), 2, "zero requests for the duplicate");
        // The payload check still runs on a cached record.
        let reused = idem.run(&key, &json!(2), || async { Ok::<_, ()>(9) }).await.unwrap_err();
        assert!(matches!(reused, crate::RunError::Idempotency(e) if e.kind() == crate::ErrorKind::KeyReused));
        // Past the window the cache steps aside.
        clock.advance(Duration::from_secs(61));
        assert_eq!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(10) }).await.unwrap(), Outcome::Fresh(10));
    }

    #[tokio::test]
    async fn in_progress_records_are_never_cached_and_the_bound_holds() {
        let idem = Idempotency::new(CachedStore::new(InMemoryStore::new(), 2), Config::default());
        let key = Key::new("t", "busy").unwrap();
        let crate::Begin::Claimed(attempt) = idem.begin::<_, u32>(&key, &json!(1)).await.unwrap() else { panic!() };
        for _ in 0..2 {
            assert!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(1u32) }).await.is_err(), "in progress");
        }
        assert!(idem.store().is_empty(), "nothing cached while in progress");
        idem.complete(attempt, &5u32).await.unwrap();
        assert_eq!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(1u32) }).await.unwrap(), Outcome::Replayed(5));
        for k in ["a", "b", "c"] {
            idem.run(&Key::new("t", k).unwrap(), &json!(1), || async { Ok::<_, ()>(1u32) }).await.unwrap();
        }
        assert_eq!(idem.store().len(), 2);
    }

    /// Least recently used goes first: a record answered from the cache stays over one that was
    /// not asked for since.
    #[tokio::test]
    async fn the_least_recently_used_record_is_the_one_dropped() {
        let idem = Idempotency::new(CachedStore::new(InMemoryStore::new(), 2), Config::default());
        let key = |k: &str| Key::new("t", k).unwrap();
        for k in ["a", "b"] {
            idem.run(&key(k), &json!(1), || async { Ok::<_, ()>(1u32) }).await.unwrap();
        }
        // `a` is used again (from memory), then `c` comes in: `b` is dropped, not `a`.
        idem.run(&key("a"), &json!(1), || async { Ok::<_, ()>(2u32) }).await.unwrap();
        idem.run(&key("c"), &json!(1), || async { Ok::<_, ()>(1u32) }).await.unwrap();
        let before = idem.store().inner().requests();
        assert_eq!(idem.run(&key("a"), &json!(1), || async { Ok::<_, ()>(2u32) }).await.unwrap(), Outcome::Replayed(1));
        assert_eq!(idem.store().inner().requests(), before, "a is still cached");
        assert_eq!(idem.run(&key("b"), &json!(1), || async { Ok::<_, ()>(2u32) }).await.unwrap(), Outcome::Replayed(1));
        assert_eq!(idem.store().inner().requests(), before + 1, "b was dropped: one request");
        assert_eq!(idem.store().len(), 2);
    }
}
