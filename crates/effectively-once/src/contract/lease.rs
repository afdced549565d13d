//! Leases and deadlines: an attempt that dies or outruns its lease blocks the key until the
//! lease ends and is then taken over; a deadline shortens the lease.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{counted, setup, unique, Counted};
use crate::{Clock, Completion, ErrorKind, Outcome, RunError, Status, Store, StoreErrorKind};

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
