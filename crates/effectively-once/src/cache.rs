//! A local LRU cache in front of a store: a duplicate answered from memory costs no request.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;

use crate::record::{Record, Status};
use crate::store::{Claim, Completion, Store, StoreError};

/// Powertools' default bound.
pub const DEFAULT_CAPACITY: usize = 256;

/// An in-process LRU of **completed** records: the answers a process remembers, each answering a
/// later duplicate as its record would ([`Record::replay`]), with no request. In-progress records
/// are never held (another attempt's lease would look live forever), and what is held is the
/// record as stored, so the payload check runs on every replay. Every operation is O(1) (the
/// `lru` crate), under one short lock, so one cache can be shared (`Arc`) by a process's tasks.
///
/// [`CachedStore`] puts one in front of any [`Store`]; a caller that reads or commits records
/// by other means (a batch committed in one transaction) can keep its answers in one too.
pub struct RecordCache {
    records: Mutex<LruCache<String, Record>>,
}

impl RecordCache {
    /// A cache of at most `capacity` records (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        // Sparse: memory grows with what is held, not with the bound.
        RecordCache { records: Mutex::new(LruCache::sparse(capacity)) }
    }

    /// The record held for `id` if it still blocks a claim at `now_ms` (its dedup window is
    /// open), marked as used; a record past its window is dropped and `None` returned.
    pub fn get(&self, id: &str, now_ms: u64) -> Option<Record> {
        let mut records = self.lock();
        match records.get(id) {
            Some(record) if record.blocks_claim_at(now_ms) => Some(record.clone()),
            Some(_) => {
                records.pop(id);
                None
            }
            None => None,
        }
    }

    /// Whether a record is held for `id`, without marking it as used.
    pub fn contains(&self, id: &str) -> bool {
        self.lock().contains(id)
    }

    /// Holds `record` if it is completed (anything else is ignored); at capacity, the least
    /// recently used record goes.
    pub fn remember(&self, record: Record) {
        if record.status != Status::Completed {
            return;
        }
        self.lock().put(record.id.clone(), record);
    }

    /// Drops the record held for `id`, if any.
    pub fn forget(&self, id: &str) {
        self.lock().pop(id);
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, Record>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

// By hand: the records' responses are not for logs.
impl std::fmt::Debug for RecordCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecordCache({} records)", self.len())
    }
}

/// A store with an in-process LRU of completed records ([`RecordCache`]) in front of it. A claim
/// for a key it holds (and whose dedup window is open) is answered from memory with no request;
/// anything else goes to the store.
///
/// Each process has its own cache: a duplicate that lands on another Lambda sandbox still costs
/// its one request. Off by default; opt in with `CachedStore::new(store, capacity)`.
#[derive(Debug)]
pub struct CachedStore<S> {
    inner: S,
    records: RecordCache,
    /// Records claimed through this cache and not yet completed or released, kept so the
    /// completion can cache the completed record. An attempt whose future was dropped never
    /// comes back for its entry, so it is bounded: entries whose lease has ended go from the
    /// least recently claimed end (such an attempt can no longer complete), and it never holds
    /// more than `capacity` (the least recently claimed goes first). A missing entry only costs
    /// a cache miss.
    claimed: Mutex<LruCache<String, Record>>,
}

impl<S> CachedStore<S> {
    /// A cache of at most `capacity` completed records over `inner`.
    pub fn new(inner: S, capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        CachedStore {
            inner,
            records: RecordCache::new(capacity.get()),
            claimed: Mutex::new(LruCache::sparse(capacity)),
        }
    }

    /// The store behind the cache.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The completed records held.
    pub fn records(&self) -> &RecordCache {
        &self.records
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn claimed(&self) -> std::sync::MutexGuard<'_, LruCache<String, Record>> {
        self.claimed.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hold(&self, record: &Record, now_ms: u64) {
        let mut claimed = self.claimed();
        // Ended leases leave from the oldest claims: O(1) for each one removed.
        while claimed.peek_lru().is_some_and(|(_, r)| r.lease_expires_at_ms < now_ms) {
            claimed.pop_lru();
        }
        // At capacity, `put` drops the least recently claimed attempt's entry.
        claimed.put(record.id.clone(), record.clone());
    }
}

impl<S: Store> Store for CachedStore<S> {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        if let Some(record) = self.records.get(&record.id, now_ms) {
            return Ok(Claim::Exists(record));
        }
        let claim = self.inner.claim(record, now_ms).await?;
        match &claim {
            Claim::Exists(existing) => self.records.remember(existing.clone()),
            Claim::Acquired { .. } | Claim::AcquiredInRun { .. } | Claim::AcquiredOverUnreadable => {
                self.hold(record, now_ms)
            }
        }
        Ok(claim)
    }

    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        self.inner.complete(id, owner, completion.clone()).await?;
        let claimed = self.claimed().pop(id);
        if let Some(mut record) = claimed.filter(|r| r.owner == owner) {
            record.status = Status::Completed;
            record.response = completion.response.map(str::to_owned);
            record.expiration_s = completion.expiration_s;
            self.records.remember(record);
        }
        Ok(())
    }

    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        self.claimed().pop(id);
        self.records.forget(id);
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
        store.claimed().len()
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

    /// The cache alone: an in-progress record is not held, one past its dedup window is dropped
    /// when asked for, and `contains` does not count as a use.
    #[test]
    fn a_record_cache_holds_completed_records_within_their_window() {
        let cache = RecordCache::new(2);
        let mut busy = Record::completed("t#busy", "h", None, 100);
        busy.status = Status::InProgress;
        cache.remember(busy);
        assert!(cache.is_empty(), "in progress: not held");
        cache.remember(Record::completed("t#a", "h", None, 100));
        cache.remember(Record::completed("t#b", "h", None, 100));
        assert!(cache.get("t#a", 100_000).is_some(), "within its window");
        assert!(cache.contains("t#b"), "held");
        // `b` was only looked at, `a` used: `c` pushes `b` out.
        cache.remember(Record::completed("t#c", "h", None, 100));
        assert!(!cache.contains("t#b") && cache.contains("t#a"));
        assert_eq!(cache.get("t#a", 101_000), None, "past its window");
        assert!(!cache.contains("t#a"), "and dropped");
        cache.forget("t#c");
        assert!(cache.is_empty());
    }
}
