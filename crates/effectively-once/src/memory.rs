//! An in-process store: for tests, and for single-process use where duplicates only come from
//! retries inside that process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::protocol::{self, Stored};
use crate::record::Record;
use crate::store::{Claim, Completion, Store, StoreError};

/// Records in a map behind a mutex, each step one of [`protocol`]'s pure
/// functions under the lock: the claim condition is [`Record::blocks_claim_at`], the same
/// predicate the DynamoDB store sends as its condition expression, and the store contract
/// suite holds both to the same behaviour.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    records: Mutex<HashMap<String, Stored>>,
    requests: AtomicU64,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Store calls served so far: what a remote store would bill as requests.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Every record held, expired or not, sorted by id.
    pub fn records(&self) -> Vec<Record> {
        let mut all: Vec<_> = self.lock().values().map(|stored| stored.record.clone()).collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// Runs one protocol step on the slot of `id` under the lock.
    fn step<T>(&self, id: &str, step: impl FnOnce(&mut Option<Stored>) -> T) -> T {
        self.requests.fetch_add(1, Ordering::SeqCst);
        // A panic while holding the lock cannot leave a half-written record: each step below
        // replaces the slot whole.
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let mut slot = records.remove(id);
        let out = step(&mut slot);
        if let Some(stored) = slot {
            records.insert(id.to_owned(), stored);
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Stored>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for InMemoryStore {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        Ok(self.step(&record.id, |slot| protocol::claim(slot, record, now_ms)))
    }

    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        self.step(id, |slot| protocol::complete(slot, owner, &completion))
    }

    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        self.step(id, |slot| protocol::release(slot, owner))
    }

    async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
        Ok(self.step(id, |slot| slot.as_ref().map(|stored| stored.record.clone())))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::{Config, ErrorKind, Idempotency, Key, Outcome, RunError, TokioClock};

    async fn make() -> InMemoryStore {
        InMemoryStore::new()
    }

    crate::store_contract_tests!(make);

    /// The lease and the dedup window under tokio's paused clock: no sleeping.
    #[tokio::test(start_paused = true)]
    async fn paused_tokio_clock_drives_lease_and_window() {
        let config = Config::default()
            .with_lease(Duration::from_secs(60))
            .with_dedup_window(Duration::from_secs(600))
            .with_clock(Arc::new(TokioClock::new()));
        let idem = Idempotency::new(make().await, config);
        let key = Key::new("t", "e1").unwrap();
        let attempt = match idem.begin::<_, u32>(&key, &json!(1)).await.unwrap() {
            crate::Begin::Claimed(a) => a,
            crate::Begin::Replayed(_) => panic!("fresh key replayed"),
        };
        drop(attempt); // dies without completing
        let err = idem.run(&key, &json!(1), || async { Ok::<_, ()>(1u32) }).await.unwrap_err();
        assert!(matches!(err, RunError::Idempotency(e) if e.kind() == ErrorKind::InProgress));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(2u32) }).await.unwrap(), Outcome::Fresh(2));
        tokio::time::advance(Duration::from_secs(599)).await;
        assert!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(3u32) }).await.unwrap().is_replay());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(4u32) }).await.unwrap(), Outcome::Fresh(4));
    }

    #[tokio::test]
    async fn first_delivery_costs_two_calls_and_a_duplicate_one() {
        let idem = Idempotency::new(make().await, Config::default());
        let key = Key::new("t", "e2").unwrap();
        idem.run(&key, &json!(1), || async { Ok::<_, ()>(1u32) }).await.unwrap();
        assert_eq!(idem.store().requests(), 2);
        idem.run(&key, &json!(1), || async { Ok::<_, ()>(1u32) }).await.unwrap();
        assert_eq!(idem.store().requests(), 3);
    }
}
