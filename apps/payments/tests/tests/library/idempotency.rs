//! The idempotency layer over DynamoDB, with a real side effect in a second table: each test
//! asserts what the table holds, not only what a call returned.

use std::time::Duration;

use effectively_once::{ErrorKind, Key, Outcome, RunError, Status, Store};
use end_to_end::Harness;
use serde_json::json;

fn payment(event_id: &str, amount_cents: i64) -> serde_json::Value {
    json!({"event_id": event_id, "account_id": "acct_42", "amount_cents": amount_cents, "currency": "USD"})
}

fn idempotency_kind<E: std::fmt::Debug>(r: Result<Outcome<u64>, RunError<E>>) -> ErrorKind {
    match r {
        Err(RunError::Idempotency(e)) => e.kind(),
        other => panic!("expected an idempotency error, got {other:?}"),
    }
}

#[tokio::test]
async fn two_deliveries_apply_the_effect_once_and_replay_the_response() {
    let h = Harness::new().await;
    let key = Key::new("payments", "pay_0001").unwrap();
    let event = payment("pay_0001", 1250);
    let first = h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_0001").await) }).await.unwrap();
    let second = h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_0001").await) }).await.unwrap();
    assert_eq!(first, Outcome::Fresh(1));
    assert_eq!(second, Outcome::Replayed(1));
    assert_eq!(h.applied("pay_0001").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_deliveries_apply_the_effect_once() {
    let h = std::sync::Arc::new(Harness::new().await);
    let key = Key::new("payments", "pay_concurrent").unwrap();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (h, key) = (h.clone(), key.clone());
            tokio::spawn(async move {
                let event = payment("pay_concurrent", 100);
                h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_concurrent").await) }).await
            })
        })
        .collect();
    let (mut fresh, mut replayed, mut in_progress) = (0, 0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(Outcome::Fresh(1)) => fresh += 1,
            Ok(Outcome::Replayed(1)) => replayed += 1,
            Err(RunError::Idempotency(e)) if e.kind() == ErrorKind::InProgress => in_progress += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(fresh, 1);
    assert_eq!(replayed + in_progress, 49);
    assert_eq!(h.applied("pay_concurrent").await, 1);
}

#[tokio::test]
async fn retryable_handler_error_releases_the_record_and_the_retry_applies() {
    let h = Harness::new().await;
    let key = Key::new("payments", "pay_retry").unwrap();
    let event = payment("pay_retry", 5);
    let failed = h.idem.run(&key, &event, || async { Err::<u64, _>("downstream throttled") }).await;
    assert!(matches!(failed, Err(RunError::Handler("downstream throttled"))));
    assert_eq!(h.idem.store().get(key.as_str()).await.unwrap(), None);
    assert_eq!(h.applied("pay_retry").await, 0);
    let retried = h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_retry").await) }).await.unwrap();
    assert_eq!(retried, Outcome::Fresh(1));
    assert_eq!(h.applied("pay_retry").await, 1);
}

#[tokio::test]
async fn an_attempt_that_dies_mid_handler_blocks_until_its_lease_ends() {
    let h = Harness::new().await;
    let key = Key::new("payments", "pay_crash").unwrap();
    let event = payment("pay_crash", 7);
    // The attempt claims, then dies inside the handler: its future is dropped mid-flight.
    let dying = h.idem.run(&key, &event, || async {
        std::future::pending::<()>().await;
        Ok::<u64, ()>(0)
    });
    assert!(tokio::time::timeout(Duration::from_millis(300), dying).await.is_err());
    let record = h.idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(record.status, Status::InProgress);

    let refused = h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_crash").await) }).await;
    assert_eq!(idempotency_kind(refused), ErrorKind::InProgress);
    assert_eq!(h.applied("pay_crash").await, 0);

    h.clock.advance(Duration::from_secs(31));
    let taken = h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_crash").await) }).await.unwrap();
    assert_eq!(taken, Outcome::Fresh(1));
    assert_eq!(h.applied("pay_crash").await, 1);
}

/// A handler that outruns its lease (30 s here; the clock moves while it runs) while a second
/// delivery arrives: today the second takes the key over and both apply the effect. Now the
/// first is cut off at its next `.await`, before its effect, and is not reported fresh; the
/// second applies the effect once, and a third delivery replays it.
#[tokio::test]
async fn a_handler_that_outruns_its_lease_is_cut_off_before_a_takeover_applies_twice() {
    let h = Harness::new().await;
    let key = Key::new("payments", "pay_slow").unwrap();
    let event = payment("pay_slow", 9);
    let (stalled_tx, stalled_rx) = tokio::sync::oneshot::channel();
    let (resume_tx, resume_rx) = tokio::sync::oneshot::channel::<()>();
    let slow = h.idem.run(&key, &event, || async {
        h.clock.advance(Duration::from_secs(31));
        stalled_tx.send(()).unwrap();
        resume_rx.await.unwrap();
        Ok::<_, ()>(h.apply("pay_slow").await)
    });
    let second = async {
        stalled_rx.await.unwrap();
        let taken = h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_slow").await) }).await;
        // The slow one may be gone already: cut off while it waited, its lease having ended.
        let _ = resume_tx.send(());
        taken
    };
    let (slow, second) = tokio::join!(slow, second);
    assert_eq!(second.unwrap(), Outcome::Fresh(1), "the second delivery took the key over");
    assert_eq!(idempotency_kind(slow), ErrorKind::LeaseLost, "the slow one is cut off, not fresh");
    assert_eq!(h.applied("pay_slow").await, 1, "the effect once");
    let replay = h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_slow").await) }).await.unwrap();
    assert_eq!(replay, Outcome::Replayed(1));
    assert_eq!(h.applied("pay_slow").await, 1);
}

#[tokio::test]
async fn same_key_with_a_different_payload_is_permanent_and_does_not_run() {
    let h = Harness::new().await;
    let key = Key::new("payments", "pay_reuse").unwrap();
    h.idem.run(&key, &payment("pay_reuse", 100), || async { Ok::<_, ()>(h.apply("pay_reuse").await) }).await.unwrap();
    let reused =
        h.idem.run(&key, &payment("pay_reuse", 999), || async { Ok::<_, ()>(h.apply("pay_reuse").await) }).await;
    let kind = idempotency_kind(reused);
    assert_eq!(kind, ErrorKind::KeyReused);
    assert_eq!(kind.retry(), effectively_once::Retry::Never);
    assert_eq!(h.applied("pay_reuse").await, 1);
}

#[tokio::test]
async fn a_record_past_its_dedup_window_is_claimable_again() {
    let h = Harness::new().await;
    let key = Key::new("payments", "pay_window").unwrap();
    let event = payment("pay_window", 1);
    let run = || h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_window").await) });
    assert_eq!(run().await.unwrap(), Outcome::Fresh(1));
    h.clock.advance(Duration::from_secs(3599));
    assert_eq!(run().await.unwrap(), Outcome::Replayed(1));
    h.clock.advance(Duration::from_secs(2));
    assert_eq!(run().await.unwrap(), Outcome::Fresh(2));
    assert_eq!(h.applied("pay_window").await, 2);
}

#[tokio::test]
async fn a_first_delivery_costs_two_requests_and_a_duplicate_one() {
    let h = Harness::new().await;
    let key = Key::new("payments", "pay_cost").unwrap();
    let event = payment("pay_cost", 1);
    h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_cost").await) }).await.unwrap();
    let first = h.requests.by_operation();
    assert_eq!(h.requests.total(), 2, "first delivery: {first:?}");
    assert_eq!(first.get("PutItem"), Some(&1));
    assert_eq!(first.get("UpdateItem"), Some(&1));
    h.requests.reset();
    let replay = h.idem.run(&key, &event, || async { Ok::<_, ()>(h.apply("pay_cost").await) }).await.unwrap();
    assert!(replay.is_replay());
    assert_eq!(h.requests.total(), 1, "duplicate: {:?}", h.requests.by_operation());
    assert_eq!(h.requests.by_operation().get("PutItem"), Some(&1));
    println!("requests per first delivery: 2 ({first:?}); per duplicate: 1 (PutItem)");
}
