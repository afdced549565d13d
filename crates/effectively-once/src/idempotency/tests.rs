//! Unit tests of the protocol driver: Lambda deadlines, release retries, and payload hashes
//! (re-serialised payloads, version 1 and unknown hash versions).

use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::record::Status;
use crate::store::{Completion, StoreErrorKind};
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
