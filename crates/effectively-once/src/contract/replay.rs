//! Duplicates over a store: a replay of the stored response, key reuse, the dedup window,
//! concurrent deliveries, and a response too large to keep; what a caller of `run` sees.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{counted, setup, unique, Counted};
use crate::{Config, ErrorKind, Idempotency, ManualClock, Outcome, RunError, Status, Store};

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
