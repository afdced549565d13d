//! A local LRU cache in front of a store: a duplicate answered from memory costs no request.

use std::collections::HashMap;
use std::sync::Mutex;

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
/// its one request. Off by default; opt in with `CachedStore::new(store, capacity)`.
#[derive(Debug)]
pub struct CachedStore<S> {
    inner: S,
    capacity: usize,
    state: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    records: HashMap<String, (Record, u64)>,
    /// Records claimed through this cache and not yet completed or released, kept so the
    /// completion can cache the completed record. An attempt whose future was dropped never
    /// comes back for its entry, so the map is bounded: entries whose lease has ended go (such
    /// an attempt can no longer complete), and it never holds more than `capacity`. A missing
    /// entry only costs a cache miss.
    claimed: HashMap<String, Record>,
    tick: u64,
}

impl<S> CachedStore<S> {
    /// A cache of at most `capacity` completed records over `inner`.
    pub fn new(inner: S, capacity: usize) -> Self {
        CachedStore { inner, capacity: capacity.max(1), state: Mutex::default() }
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
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        lru.records.insert(record.id.clone(), (record, tick));
        if lru.records.len() > self.capacity {
            if let Some(oldest) = lru.records.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| k.clone()) {
                lru.records.remove(&oldest);
            }
        }
    }

    fn hold(&self, record: &Record, now_ms: u64) {
        let mut lru = self.lock();
        lru.claimed.retain(|_, r| r.lease_expires_at_ms >= now_ms);
        if lru.claimed.len() >= self.capacity && !lru.claimed.contains_key(&record.id) {
            // Live attempts beyond the bound: the one whose lease ends first loses its entry.
            if let Some(first) = lru.claimed.iter().min_by_key(|(_, r)| r.lease_expires_at_ms).map(|(k, _)| k.clone()) {
                lru.claimed.remove(&first);
            }
        }
        lru.claimed.insert(record.id.clone(), record.clone());
    }
}

impl<S: Store> Store for CachedStore<S> {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        let cached = {
            let mut lru = self.lock();
            lru.tick += 1;
            let tick = lru.tick;
            match lru.records.get_mut(&record.id) {
                Some((r, t)) if r.blocks_claim_at(now_ms) => {
                    *t = tick;
                    Some(r.clone())
                }
                Some(_) => {
                    lru.records.remove(&record.id);
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
            Claim::Acquired { .. } | Claim::AcquiredOverUnreadable => self.hold(record, now_ms),
        }
        Ok(claim)
    }

    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        self.inner.complete(id, owner, completion.clone()).await?;
        let claimed = self.lock().claimed.remove(id);
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
            lru.claimed.remove(id);
            lru.records.remove(id);
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
            Config::default().lease(Duration::from_secs(60)).clock(clock.clone()),
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
            Config::default().dedup_window(Duration::from_secs(60)).clock(clock.clone()),
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
}
