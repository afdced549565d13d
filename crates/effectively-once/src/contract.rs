//! The store contract: behaviour every [`Store`] must have, as test cases any store runs.
//!
//! ```text
//! async fn make_store() -> MyStore { MyStore::connect().await }
//! effectively_once::store_contract_tests!(make_store);
//! ```
//!
//! Each case uses its own keys, so cases may share one backend and run in parallel. Time moves
//! through a [`ManualClock`], never by sleeping, so the suite runs as well against a store over
//! the network as in memory.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::{
    Claim, Clock, Completion, Config, ErrorKind, Idempotency, Key, ManualClock, Outcome, Record, RunError, Status,
    Store, StoreErrorKind,
};

/// Expands to one `#[tokio::test]` per contract case, each calling `$make().await` for a store.
#[macro_export]
macro_rules! store_contract_tests {
    ($make:path) => {
        $crate::store_contract_tests!(@cases $make;
            claim_acquires_then_reports_the_existing_record,
            get_returns_every_field,
            duplicate_replays_the_stored_response,
            lost_claim_answer_retried_counts_as_claimed,
            a_lost_claim_answer_still_tells_what_it_replaced,
            a_run_of_takeovers_is_answered_with_its_first_record,
            handler_error_releases_and_a_retry_runs,
            dropped_attempt_blocks_until_its_lease_ends,
            stale_owner_is_fenced,
            complete_and_release_are_idempotent_for_the_owner,
            different_payload_is_key_reused,
            record_past_its_dedup_window_is_claimable,
            concurrent_deliveries_run_the_handler_once,
            deadline_bounds_the_lease,
            response_too_large_completes_without_it,
            release_deletes_only_an_in_progress_record_of_its_owner,
            completion_after_the_lease_is_refused,
            a_handler_that_outruns_its_lease_is_not_completed,
            a_lost_completion_answer_is_retried,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::contract::$case($make().await).await;
            }
        )*
    };
}

fn unique(name: &str) -> Key {
    Key::new("contract", &format!("{name}-{}", uuid::Uuid::new_v4())).unwrap()
}

fn setup<S: Store>(store: S) -> (Idempotency<S>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let config = Config::default()
        .with_lease(Duration::from_secs(30))
        .with_dedup_window(Duration::from_secs(3600))
        .with_clock(clock.clone());
    (Idempotency::new(store, config), clock)
}

fn in_progress(key: &Key, owner: &str, now_ms: u64, lease_ms: u64) -> Record {
    Record {
        id: key.as_str().to_owned(),
        status: Status::InProgress,
        lease_expires_at_ms: now_ms + lease_ms,
        expiration_s: now_ms / 1000 + 3600,
        payload_hash: "hash".into(),
        owner: owner.into(),
        response: None,
    }
}

type Counted = Arc<AtomicUsize>;

/// A handler that counts its runs and answers `answer`.
async fn counted(runs: Counted, answer: u64) -> Result<u64, std::io::Error> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(answer)
}

/// A first claim acquires; a second, by another owner, reports the first as stored.
pub async fn claim_acquires_then_reports_the_existing_record<S: Store>(store: S) {
    let key = unique("claim");
    let now = 1_800_000_000_000;
    let first = in_progress(&key, "a", now, 30_000);
    assert_eq!(store.claim(&first, now).await.unwrap(), Claim::Acquired { replaced: None });
    let second = in_progress(&key, "b", now, 30_000);
    assert_eq!(store.claim(&second, now + 1).await.unwrap(), Claim::Exists(first));
}

/// `get` reads back what `claim` and `complete` wrote.
pub async fn get_returns_every_field<S: Store>(store: S) {
    let key = unique("get");
    let now = 1_800_000_000_000;
    assert_eq!(store.get(key.as_str()).await.unwrap(), None);
    let record = in_progress(&key, "a", now, 30_000);
    store.claim(&record, now).await.unwrap();
    assert_eq!(store.get(key.as_str()).await.unwrap().as_ref(), Some(&record));
    let completion = Completion { response: Some(r#"{"ok":true}"#), expiration_s: now / 1000 + 7200, now_ms: now };
    store.complete(key.as_str(), "a", completion).await.unwrap();
    let done = store.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(done.status, Status::Completed);
    assert_eq!(done.response.as_deref(), Some(r#"{"ok":true}"#));
    assert_eq!(done.expiration_s, now / 1000 + 7200);
    assert_eq!(done.owner, "a");
    assert_eq!(done.payload_hash, "hash");
}

/// The classic: two deliveries, one run, the second gets the first's response.
pub async fn duplicate_replays_the_stored_response<S: Store>(store: S) {
    let (idem, _) = setup(store);
    let key = unique("classic");
    let payload = json!({"event_id": key.business_key(), "amount_cents": 1250});
    let runs = Counted::default();
    let first = idem.run(&key, &payload, || counted(runs.clone(), 1250)).await.unwrap();
    let second = idem.run(&key, &payload, || counted(runs.clone(), 9999)).await.unwrap();
    assert_eq!(first, Outcome::Fresh(1250));
    assert_eq!(second, Outcome::Replayed(1250));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.response.as_deref(), Some("1250"));
}

/// A claim whose answer was lost and which was sent again meets its own record: claimed, not
/// "in progress elsewhere", and on a free key it replaced nothing.
pub async fn lost_claim_answer_retried_counts_as_claimed<S: Store>(store: S) {
    let (idem, _) = setup(ClaimTwice(store));
    let key = unique("retried-claim");
    let runs = Counted::default();
    let crate::Begin::Claimed(attempt) = idem.begin::<_, u64>(&key, &json!({"n": 1})).await.unwrap() else {
        panic!("a retried claim that meets its own record is a claim")
    };
    assert_eq!(attempt.replaced(), None, "the key was free");
    assert!(!attempt.took_over(), "the retry learns its first write replaced nothing");
    idem.release(attempt).await.unwrap();
    let outcome = idem.run(&key, &json!({"n": 1}), || counted(runs.clone(), 7)).await.unwrap();
    assert_eq!(outcome, Outcome::Fresh(7));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = idem.store().0.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Completed);
}

/// A claim whose answer was lost, after another attempt died in progress, learns on its retry
/// what its first write replaced: the dead attempt's record, its body's hash included. Without
/// it the takeover is hidden (the payments API would send a second body under one key).
pub async fn a_lost_claim_answer_still_tells_what_it_replaced<S: Store>(store: S) {
    let (idem, clock) = setup(ClaimTwice(store));
    let key = unique("retried-takeover");
    let crate::Begin::Claimed(dead) = idem.begin::<_, u64>(&key, &json!({"body": "x"})).await.unwrap() else {
        panic!("claimed")
    };
    let dead_record = idem.store().get(key.as_str()).await.unwrap().unwrap();
    clock.advance(Duration::from_millis(dead.lease_expires_at_ms() - clock.now_ms() + 1));
    drop(dead);
    let crate::Begin::Claimed(takeover) = idem.begin::<_, u64>(&key, &json!({"body": "y"})).await.unwrap() else {
        panic!("a claim past the lease takes the key over")
    };
    assert_eq!(takeover.replaced(), Some(&dead_record), "what the first write replaced, as stored");
    assert!(takeover.took_over());
    // The retry did not overwrite its own record: the record is the takeover's, in progress.
    let record = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.status), (takeover.owner(), Status::InProgress));
    idem.complete(takeover, &1u64).await.unwrap();
    let done = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!((done.status, done.response.as_deref()), (Status::Completed, Some("1")));
}

/// Attempts that each take the key over and die make a run of takeovers: a claim that ends it
/// is answered with the record it replaced and the one the run began with, first sent and
/// resent alike; a completion ends the run.
pub async fn a_run_of_takeovers_is_answered_with_its_first_record<S: Store>(store: S) {
    let store = ClaimTwice(store);
    let key = unique("run");
    let now = 1_800_000_000_000;
    let x = Record { payload_hash: "x".into(), ..in_progress(&key, "a", now, 1_000) };
    assert_eq!(store.claim(&x, now).await.unwrap(), Claim::Acquired { replaced: None });
    let y = Record { payload_hash: "y".into(), ..in_progress(&key, "b", now + 2_000, 1_000) };
    assert_eq!(store.claim(&y, now + 2_000).await.unwrap(), Claim::Acquired { replaced: Some(x.clone()) });
    let z = in_progress(&key, "c", now + 4_000, 1_000);
    let run = Claim::AcquiredInRun { replaced: y.clone(), first: x.clone() };
    assert_eq!(store.claim(&z, now + 4_000).await.unwrap(), run, "b died after taking a's over");
    let w = in_progress(&key, "d", now + 6_000, 1_000);
    let run = Claim::AcquiredInRun { replaced: z.clone(), first: x };
    assert_eq!(store.claim(&w, now + 6_000).await.unwrap(), run, "the run still began with a");
    let completion = Completion { response: Some("1"), expiration_s: 0, now_ms: now + 6_000 };
    store.complete(&w.id, "d", completion).await.unwrap();
    let done = store.get(&w.id).await.unwrap().unwrap();
    let v = in_progress(&key, "e", now + 8_000, 1_000);
    assert_eq!(store.claim(&v, now + 8_000).await.unwrap(), Claim::Acquired { replaced: Some(done) });
}

/// A store whose every claim is sent twice, as an SDK does when the first answer is lost.
struct ClaimTwice<S>(S);

impl<S: Store> Store for ClaimTwice<S> {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, crate::StoreError> {
        let _lost = self.0.claim(record, now_ms).await?;
        self.0.claim(record, now_ms).await
    }
    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), crate::StoreError> {
        self.0.complete(id, owner, completion).await
    }
    async fn release(&self, id: &str, owner: &str) -> Result<(), crate::StoreError> {
        self.0.release(id, owner).await
    }
    async fn get(&self, id: &str) -> Result<Option<Record>, crate::StoreError> {
        self.0.get(id).await
    }
}

/// A failing handler releases its record; the retry runs the handler.
pub async fn handler_error_releases_and_a_retry_runs<S: Store>(store: S) {
    let (idem, _) = setup(store);
    let key = unique("release");
    let payload = json!({"n": 1});
    let runs = Counted::default();
    let failed = idem
        .run(&key, &payload, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<u64, _>(std::io::Error::other("throttled downstream"))
        })
        .await;
    assert!(matches!(failed, Err(RunError::Handler(_))));
    assert_eq!(idem.store().get(key.as_str()).await.unwrap(), None, "record released");
    let retried = idem.run(&key, &payload, || counted(runs.clone(), 5)).await.unwrap();
    assert_eq!(retried, Outcome::Fresh(5));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// An attempt that dies mid-handler (its future dropped) leaves the record in progress: a new
/// attempt within the lease is refused as retryable; after the lease it takes over, and the
/// dead attempt can no longer complete.
pub async fn dropped_attempt_blocks_until_its_lease_ends<S: Store + 'static>(store: S) {
    let (idem, clock) = setup(Arc::new(store));
    let key = unique("crash");
    let payload = json!({"n": 1});
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let dying = tokio::spawn({
        let (idem, key, payload) = (idem.clone(), key.clone(), payload.clone());
        async move {
            idem.run(&key, &payload, || async move {
                started_tx.send(()).unwrap();
                std::future::pending::<Result<u64, std::io::Error>>().await
            })
            .await
        }
    });
    started_rx.await.unwrap();
    dying.abort();
    assert!(dying.await.unwrap_err().is_cancelled());
    let dead = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(dead.status, Status::InProgress);

    let runs = Counted::default();
    let refused = idem.run(&key, &payload, || counted(runs.clone(), 1)).await.unwrap_err();
    let RunError::Idempotency(refused) = refused else { panic!("expected an idempotency error") };
    assert_eq!(refused.kind(), ErrorKind::InProgress);
    assert_eq!(refused.retry(), crate::Retry::InProgressElsewhere);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    clock.advance(Duration::from_secs(31));
    let crate::Begin::Claimed(attempt) = idem.begin::<_, u64>(&key, &payload).await.unwrap() else {
        panic!("expected a takeover")
    };
    assert!(attempt.took_over(), "the claim reports the dead attempt it replaced");
    assert_eq!(attempt.replaced().map(|r| r.owner.as_str()), Some(dead.owner.as_str()));
    idem.release(attempt).await.unwrap();
    let taken = idem.run(&key, &payload, || counted(runs.clone(), 2)).await.unwrap();
    assert_eq!(taken, Outcome::Fresh(2));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let completion = Completion { response: Some("3"), expiration_s: u64::MAX / 2, now_ms: clock.now_ms() };
    let err = idem.store().complete(key.as_str(), &dead.owner, completion).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Fenced);
    assert_eq!(idem.store().get(key.as_str()).await.unwrap().unwrap().response.as_deref(), Some("2"));
}

/// Once another attempt has taken a key over, the old owner can neither complete nor release.
pub async fn stale_owner_is_fenced<S: Store>(store: S) {
    let key = unique("fence");
    let now = 1_800_000_000_000;
    store.claim(&in_progress(&key, "old", now, 1_000), now).await.unwrap();
    let later = now + 2_000;
    let old = store.get(key.as_str()).await.unwrap();
    let taken = store.claim(&in_progress(&key, "new", later, 1_000), later).await.unwrap();
    assert_eq!(taken, Claim::Acquired { replaced: old });
    let completion = Completion { response: Some("1"), expiration_s: later / 1000 + 60, now_ms: later };
    assert_eq!(
        store.complete(key.as_str(), "old", completion.clone()).await.unwrap_err().kind(),
        StoreErrorKind::Fenced
    );
    assert_eq!(store.release(key.as_str(), "old").await.unwrap_err().kind(), StoreErrorKind::Fenced);
    let record = store.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.status), ("new", Status::InProgress));
    store.complete(key.as_str(), "new", completion).await.unwrap();
    assert_eq!(store.get(key.as_str()).await.unwrap().unwrap().status, Status::Completed);
}

/// Retried complete and release requests (their first answer lost) succeed.
pub async fn complete_and_release_are_idempotent_for_the_owner<S: Store>(store: S) {
    let key = unique("retry");
    let now = 1_800_000_000_000;
    store.claim(&in_progress(&key, "a", now, 30_000), now).await.unwrap();
    let completion = Completion { response: Some("1"), expiration_s: now / 1000 + 60, now_ms: now };
    store.complete(key.as_str(), "a", completion.clone()).await.unwrap();
    store.complete(key.as_str(), "a", completion).await.unwrap();
    let other = unique("retry-release");
    store.claim(&in_progress(&other, "a", now, 30_000), now).await.unwrap();
    store.release(other.as_str(), "a").await.unwrap();
    store.release(other.as_str(), "a").await.unwrap();
    assert_eq!(store.get(other.as_str()).await.unwrap(), None);
    assert_eq!(store.get(key.as_str()).await.unwrap().unwrap().status, Status::Completed);
}

/// The same key with another payload is a permanent error, and the handler does not run.
pub async fn different_payload_is_key_reused<S: Store>(store: S) {
    let (idem, _) = setup(store);
    let key = unique("reuse");
    let runs = Counted::default();
    idem.run(&key, &json!({"amount_cents": 100}), || counted(runs.clone(), 1)).await.unwrap();
    let err = idem.run(&key, &json!({"amount_cents": 200}), || counted(runs.clone(), 2)).await.unwrap_err();
    let RunError::Idempotency(err) = err else { panic!("expected an idempotency error") };
    assert_eq!(err.kind(), ErrorKind::KeyReused);
    assert_eq!(err.retry(), crate::Retry::Never);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// After the dedup window the key is new again.
pub async fn record_past_its_dedup_window_is_claimable<S: Store>(store: S) {
    let (idem, clock) = setup(store);
    let key = unique("window");
    let payload = json!({"n": 1});
    let runs = Counted::default();
    idem.run(&key, &payload, || counted(runs.clone(), 1)).await.unwrap();
    clock.advance(Duration::from_secs(3599));
    assert!(idem.run(&key, &payload, || counted(runs.clone(), 2)).await.unwrap().is_replay());
    clock.advance(Duration::from_secs(2));
    assert_eq!(idem.run(&key, &payload, || counted(runs.clone(), 3)).await.unwrap(), Outcome::Fresh(3));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// 50 concurrent deliveries of one key: the handler body runs once; the rest are replays or
/// refused as in progress.
pub async fn concurrent_deliveries_run_the_handler_once<S: Store + 'static>(store: S) {
    let (idem, _) = setup(Arc::new(store));
    let key = unique("concurrent");
    let runs = Counted::default();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (idem, key, runs) = (idem.clone(), key.clone(), runs.clone());
            tokio::spawn(async move {
                idem.run(&key, &json!({"n": 1}), || async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    // Hold the key a while so other deliveries meet it in progress.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok::<_, std::io::Error>(42u64)
                })
                .await
            })
        })
        .collect();
    let (mut fresh, mut replayed, mut in_progress) = (0, 0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(Outcome::Fresh(42)) => fresh += 1,
            Ok(Outcome::Replayed(42)) => replayed += 1,
            Err(RunError::Idempotency(e)) if e.kind() == ErrorKind::InProgress => in_progress += 1,
            other => panic!("unexpected result {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!((fresh, replayed + in_progress), (1, 49));
}

/// A deadline shortens the lease; a deadline already passed refuses to start; an emulator's
/// value that is no epoch time (`0`, `cargo lambda watch`'s `600000`) is unknown: the lease bounds.
pub async fn deadline_bounds_the_lease<S: Store>(store: S) {
    let (idem, clock) = setup(store);
    let now = clock.now_ms();
    let key = unique("deadline");
    let bounded = idem.with_deadline(now + 5_000);
    let crate::Begin::Claimed(attempt) = bounded.begin::<_, u64>(&key, &json!({})).await.unwrap() else {
        panic!("expected a claim")
    };
    assert_eq!(attempt.lease_expires_at_ms(), now + 5_000);
    assert_eq!(idem.store().get(key.as_str()).await.unwrap().unwrap().lease_expires_at_ms, now + 5_000);
    bounded.complete(attempt, &1u64).await.unwrap();
    for deadline in [now, now - 1] {
        let err = idem.with_deadline(deadline).begin::<_, u64>(&unique("late"), &json!({})).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DeadlineExceeded);
    }
    for emulated in [0, 600_000] {
        let unknown = idem.with_deadline(emulated);
        let crate::Begin::Claimed(attempt) = unknown.begin::<_, u64>(&unique("emulated"), &json!({})).await.unwrap()
        else {
            panic!("expected a claim")
        };
        assert_eq!(attempt.lease_expires_at_ms(), now + 30_000);
        unknown.complete(attempt, &1u64).await.unwrap();
    }
}

/// A response over the limit completes the record without it: the effect is not repeated.
pub async fn response_too_large_completes_without_it<S: Store>(store: S) {
    let clock = Arc::new(ManualClock::new());
    let idem = Idempotency::new(store, Config::default().with_max_response_bytes(10).with_clock(clock));
    let key = unique("large");
    let runs = Counted::default();
    let big = || async {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok::<_, std::io::Error>("x".repeat(100))
    };
    for _ in 0..2 {
        let err = idem.run(&key, &json!({}), big).await.unwrap_err();
        let RunError::Idempotency(err) = err else { panic!("expected an idempotency error") };
        assert_eq!(err.kind(), ErrorKind::ResponseTooLarge);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!((record.status, record.response), (Status::Completed, None));
}

/// A release deletes only an in-progress record of its owner: a completed record stays, even
/// against its owner (deleting it would make the next delivery run the effect again), and
/// another owner's record stays.
pub async fn release_deletes_only_an_in_progress_record_of_its_owner<S: Store>(store: S) {
    let now = 1_800_000_000_000;
    let done = unique("release-completed");
    store.claim(&in_progress(&done, "a", now, 30_000), now).await.unwrap();
    let completion = Completion { response: Some("1"), expiration_s: now / 1000 + 60, now_ms: now };
    store.complete(done.as_str(), "a", completion).await.unwrap();
    for owner in ["a", "b"] {
        let err = store.release(done.as_str(), owner).await.unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Fenced, "release of a completed record by {owner}");
    }
    let kept = store.get(done.as_str()).await.unwrap().expect("the completed record is kept");
    assert_eq!((kept.status, kept.response.as_deref(), kept.owner.as_str()), (Status::Completed, Some("1"), "a"));

    let live = unique("release-other");
    let record = in_progress(&live, "a", now, 30_000);
    store.claim(&record, now).await.unwrap();
    assert_eq!(store.release(live.as_str(), "b").await.unwrap_err().kind(), StoreErrorKind::Fenced);
    assert_eq!(store.get(live.as_str()).await.unwrap(), Some(record), "another owner's release changes nothing");
    store.release(live.as_str(), "a").await.unwrap();
    assert_eq!(store.get(live.as_str()).await.unwrap(), None, "its owner's release deletes it");
}

/// The store refuses a completion once the lease has ended, even with no takeover yet, and a
/// retried completion that finds its own write landed succeeds, the record unchanged.
pub async fn completion_after_the_lease_is_refused<S: Store>(store: S) {
    let key = unique("late-completion");
    let now = 1_800_000_000_000;
    let record = in_progress(&key, "a", now, 1_000);
    store.claim(&record, now).await.unwrap();
    let late = Completion { response: Some("1"), expiration_s: now / 1000 + 60, now_ms: now + 1_001 };
    assert_eq!(store.complete(key.as_str(), "a", late).await.unwrap_err().kind(), StoreErrorKind::Fenced);
    assert_eq!(store.get(key.as_str()).await.unwrap(), Some(record), "not completed");

    // Up to the lease's last millisecond the owner completes.
    let on_time = Completion { response: Some("1"), expiration_s: now / 1000 + 60, now_ms: now + 1_000 };
    store.complete(key.as_str(), "a", on_time).await.unwrap();
    // Its retry, after the lease, finds its own completed record: success, nothing rewritten.
    let retried = Completion { response: Some("2"), expiration_s: now / 1000 + 999, now_ms: now + 5_000 };
    store.complete(key.as_str(), "a", retried.clone()).await.unwrap();
    let done = store.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.response.as_deref(), done.expiration_s),
        (Status::Completed, Some("1"), now / 1000 + 60)
    );
    // Another owner is refused.
    assert_eq!(store.complete(key.as_str(), "b", retried).await.unwrap_err().kind(), StoreErrorKind::Fenced);
}

/// A handler that outruns its lease (the clock moves on while it runs): cut off at its next
/// `.await` before its effect; when it returns past the lease without yielding, its result is
/// refused. Neither is reported fresh, and the next delivery takes the key over.
pub async fn a_handler_that_outruns_its_lease_is_not_completed<S: Store>(store: S) {
    let (idem, clock) = setup(store);
    let key = unique("outrun");
    let payload = json!({"n": 1});
    let effects = Counted::default();
    let lease_lost = |r: Result<Outcome<u64>, RunError<std::io::Error>>| match r {
        Err(RunError::Idempotency(e)) => e.kind() == ErrorKind::LeaseLost && e.retry() == crate::Retry::Now,
        _ => false,
    };

    let cut_off = idem
        .run(&key, &payload, || async {
            clock.advance(Duration::from_secs(31));
            tokio::task::yield_now().await;
            effects.fetch_add(1, Ordering::SeqCst);
            Ok(1)
        })
        .await;
    assert!(lease_lost(cut_off), "cut off at the lease end");
    assert_eq!(effects.load(Ordering::SeqCst), 0, "nothing ran after the lease ended");
    let first = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(first.status, Status::InProgress);

    let refused = idem
        .run(&key, &payload, || async {
            effects.fetch_add(1, Ordering::SeqCst);
            clock.advance(Duration::from_secs(31));
            Ok(2)
        })
        .await;
    assert!(lease_lost(refused), "a result past the lease is refused");
    assert_eq!(effects.load(Ordering::SeqCst), 1);
    let second = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(second.status, Status::InProgress, "not completed");
    assert_ne!(second.owner, first.owner, "the second delivery took the key over");

    let crate::Begin::Claimed(attempt) = idem.begin::<_, u64>(&key, &payload).await.unwrap() else {
        panic!("the lease has ended: the next delivery takes over")
    };
    assert!(attempt.took_over(), "and learns that an attempt may have done part of its work");
    idem.complete(attempt, &3u64).await.unwrap();
    assert_eq!(idem.run(&key, &payload, || counted(effects.clone(), 4)).await.unwrap(), Outcome::Replayed(3));
    assert_eq!(effects.load(Ordering::SeqCst), 1);
}

/// A completion whose answer is lost is sent again before the record is left to its lease:
/// whether the first write landed (the retry finds its own completed record) or not.
pub async fn a_lost_completion_answer_is_retried<S: Store>(store: S) {
    let (idem, _) = setup(LoseCompletionAnswers::new(store));
    for landed in [true, false] {
        let key = unique(if landed { "lost-answer-landed" } else { "lost-answer-not-landed" });
        let runs = Counted::default();
        idem.store().lost.store(1, Ordering::SeqCst);
        idem.store().land.store(landed, Ordering::SeqCst);
        idem.store().sent.store(0, Ordering::SeqCst);
        let outcome = idem.run(&key, &json!({"n": 1}), || counted(runs.clone(), 7)).await.unwrap();
        assert_eq!(outcome, Outcome::Fresh(7), "landed: {landed}");
        assert_eq!(idem.store().sent.load(Ordering::SeqCst), 2, "one retry");
        let record = idem.store().store.get(key.as_str()).await.unwrap().unwrap();
        assert_eq!((record.status, record.response.as_deref()), (Status::Completed, Some("7")));
        assert_eq!(idem.run(&key, &json!({"n": 1}), || counted(runs.clone(), 8)).await.unwrap(), Outcome::Replayed(7));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

/// A store that loses the answers of the next `lost` completions, each after its write landed
/// (`land`) or before, counting the completions `sent`. The schedules suite uses it too.
pub(crate) struct LoseCompletionAnswers<S> {
    pub(crate) store: S,
    pub(crate) lost: AtomicUsize,
    pub(crate) land: AtomicBool,
    pub(crate) sent: AtomicUsize,
}

impl<S> LoseCompletionAnswers<S> {
    /// `store`, losing no answer until told to.
    pub(crate) fn new(store: S) -> Self {
        LoseCompletionAnswers {
            store,
            lost: AtomicUsize::new(0),
            land: AtomicBool::new(false),
            sent: AtomicUsize::new(0),
        }
    }
}

impl<S: Store> Store for LoseCompletionAnswers<S> {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, crate::StoreError> {
        self.store.claim(record, now_ms).await
    }
    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), crate::StoreError> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let lost = self.lost.load(Ordering::SeqCst);
        if lost == 0 {
            return self.store.complete(id, owner, completion).await;
        }
        self.lost.store(lost - 1, Ordering::SeqCst);
        if self.land.load(Ordering::SeqCst) {
            self.store.complete(id, owner, completion).await?;
        }
        Err(crate::StoreError::new(StoreErrorKind::Unavailable, "connection reset: answer lost"))
    }
    async fn release(&self, id: &str, owner: &str) -> Result<(), crate::StoreError> {
        self.store.release(id, owner).await
    }
    async fn get(&self, id: &str) -> Result<Option<Record>, crate::StoreError> {
        self.store.get(id).await
    }
}
