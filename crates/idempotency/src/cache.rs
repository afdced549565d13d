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
            Claim::Acquired { .. } => {
                self.lock().claimed.insert(record.id.clone(), record.clone());
            }
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
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::{Config, Idempotency, InMemoryStore, Key, ManualClock, Outcome};

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
