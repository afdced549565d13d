//! A body whose first attempt's outcome is unknown keeps its key: another body is refused, and
//! the held body's retry takes the key over under the store's conditional write, runs once,
//! and its answer is stored and replayed.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{setup, LEASE};

const A: &str = r#"{"amount_cents": 100}"#;
const B: &str = r#"{"amount_cents": 999}"#;

#[tokio::test]
async fn a_held_body_retried_after_another_bodys_refusal_runs_once_and_then_replays() {
    let s = setup();
    assert_eq!(s.send("pay-1", A).await.0, 504, "first attempt held: outcome unknown");
    s.clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(s.send("pay-1", B).await.0, 422, "another body is refused");
    let waiting = s.send("pay-1", A).await;
    assert_eq!(waiting.0, 409, "the refused attempt holds the key until its lease ends: {waiting:?}");
    assert!(waiting.2.is_some(), "with Retry-After");
    assert_eq!(s.runs(), 1);
    s.clock.advance(LEASE + Duration::from_secs(1));
    let second = s.send("pay-1", A).await;
    assert_eq!(
        (second.0, second.1),
        (201, false),
        "A takes the key over and runs again: its first outcome was unknown"
    );
    assert_eq!(s.runs(), 2);
    let third = s.send("pay-1", A).await;
    assert_eq!(s.runs(), 2, "A was answered 201 already: its retry does not run the effect again");
    assert_eq!((third.0, third.1, &third.3), (201, true, &second.3), "the 201 replayed");
    assert_eq!(s.send("pay-1", B).await.0, 422, "B stays refused");
    assert_eq!(s.runs(), 2);
}

#[tokio::test]
async fn two_concurrent_retries_of_a_held_body_run_the_handler_once() {
    let s = Arc::new(setup());
    assert_eq!(s.send("pay-2", A).await.0, 504);
    s.clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(s.send("pay-2", B).await.0, 422);
    s.clock.advance(LEASE + Duration::from_secs(1));
    let (x, y) = tokio::join!(s.send("pay-2", A), s.send("pay-2", A));
    assert_eq!(s.runs(), 2, "one rerun of A, not two: got statuses {} and {}", x.0, y.0);
    let mut statuses = [x.0, y.0];
    statuses.sort();
    assert!(statuses == [201, 201] || statuses == [201, 409], "{statuses:?}");
}

#[tokio::test]
async fn the_refused_body_is_refused_again_after_the_refusals_lease() {
    let s = setup();
    assert_eq!(s.send("pay-3", A).await.0, 504);
    s.clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(s.send("pay-3", B).await.0, 422);
    s.clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(s.send("pay-3", B).await.0, 422, "the key is still A's");
    s.clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(s.send("pay-3", A).await.0, 201, "and A may still run");
    assert_eq!(s.runs(), 2);
}
