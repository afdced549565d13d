//! A key stays bound to what may have run under it: a 5xx the handler answered after its work
//! holds the key (no other body runs), the query is part of the resource a key is bound to,
//! and a handler is cut off before the dedup window frees its key when the window is shorter
//! than the lease.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::{setup, Body};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::{service_fn, Layer, ServiceExt};

/// Under axum a handler's error is a `500` response (its services are `Infallible`), never an
/// `Err`: the handler charged, then failed to answer. The default `store_status` releases the
/// key on a 5xx as if nothing was done, so another body then runs under the same key.
#[tokio::test]
async fn a_500_after_the_handler_did_its_work_keeps_the_key_for_its_body() {
    let s = setup();
    let charges = Arc::new(AtomicUsize::new(0));
    let service = s.layer.layer(service_fn({
        let charges = charges.clone();
        move |request: Request<Body>| {
            let charges = charges.clone();
            async move {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let charge = charges.fetch_add(1, Ordering::SeqCst) + 1;
                let mut response = Response::new(Body::from(format!(r#"{{"charge": {charge}}}"#)));
                if charge == 1 {
                    // The charge happened; writing the order afterwards failed.
                    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                } else {
                    *response.status_mut() = StatusCode::CREATED;
                }
                let _ = body;
                Ok::<_, Infallible>(response)
            }
        }
    }));
    let post = |body: &str| {
        Request::post("/orders").header("idempotency-key", "pay-500").body(Body::from(body.to_owned())).unwrap()
    };
    let first = service.clone().oneshot(post(r#"{"amount_cents": 100}"#)).await.unwrap();
    assert_eq!(first.status(), 500);
    let other = service.clone().oneshot(post(r#"{"amount_cents": 999}"#)).await.unwrap();
    assert_ne!(
        other.status(),
        201,
        "another body ran under the key after the first body's handler ran: {} charges",
        charges.load(Ordering::SeqCst)
    );
    assert_eq!(charges.load(Ordering::SeqCst), 1, "two bodies charged under one key");
}

/// The default fingerprint leaves the query out, so a resource named by its query
/// (`POST /refunds?order=1` then `?order=2`) gets the first resource's stored answer.
#[tokio::test]
async fn the_same_key_on_another_resource_named_by_its_query_is_not_the_first_resources_answer() {
    let s = setup();
    let runs = s.runs.clone();
    let service = s.layer.layer(service_fn(move |request: Request<Body>| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let query = request.uri().query().unwrap_or_default().to_owned();
            Ok::<_, Infallible>(Response::new(Body::from(format!(r#"{{"refunded": "{query}"}}"#))))
        }
    }));
    let refund = |uri: &str| {
        Request::post(uri).header("idempotency-key", "r-1").body(Body::from(r#"{"amount_cents": 100}"#)).unwrap()
    };
    let first = service.clone().oneshot(refund("/refunds?order=1")).await.unwrap();
    assert_eq!(first.status(), 200);
    let other = service.clone().oneshot(refund("/refunds?order=2")).await.unwrap();
    let replayed = other.headers().contains_key("idempotent-replayed");
    let body = other.into_body().collect().await.unwrap().to_bytes();
    assert!(!replayed, "order 2's refund was answered order 1's stored answer: {}", String::from_utf8_lossy(&body));
}

/// A dedup window shorter than the lease (a 10 s window on a 30 s lease; or the default 15 min
/// lease with a 5 min window) makes a record in progress claimable when its window ends, while
/// its lease, and its handler, still run: a retry takes the key over and runs the handler
/// beside the first attempt.
#[tokio::test(start_paused = true)]
async fn a_retry_never_runs_beside_an_attempt_within_its_lease_whatever_the_window() {
    use effectively_once::{Config, Idempotency, InMemoryStore, ManualClock};
    use effectively_once_http::IdempotencyKeyLayer;
    use std::time::Duration;

    let clock = Arc::new(ManualClock::new());
    let config = Config::default()
        .with_lease(Duration::from_secs(30))
        .with_dedup_window(Duration::from_secs(10))
        .with_clock(clock.clone());
    let layer = IdempotencyKeyLayer::new(Idempotency::new(InMemoryStore::new(), config), "orders");
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Notify::new());
    let service = layer.layer(service_fn({
        let (running, most, release) = (running.clone(), most.clone(), release.clone());
        move |_request: Request<Body>| {
            let (running, most, release) = (running.clone(), most.clone(), release.clone());
            async move {
                // Counts this run as running until it returns or is dropped (cut off).
                struct Running(Arc<AtomicUsize>);
                impl Drop for Running {
                    fn drop(&mut self) {
                        self.0.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                let _running = Running(running);
                most.fetch_max(now, Ordering::SeqCst);
                release.notified().await;
                Ok::<_, Infallible>(Response::new(Body::from(r#"{"ok": true}"#)))
            }
        }
    }));
    let post = || Request::post("/orders").header("idempotency-key", "w-1").body(Body::from(r#"{"a": 1}"#)).unwrap();
    let first = tokio::spawn(service.clone().oneshot(post()));
    while running.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // Past the window, well within the 30 s lease: the store's clock and the timers both move.
    clock.advance(Duration::from_secs(12));
    tokio::time::advance(Duration::from_secs(12)).await;
    let second = tokio::spawn(service.clone().oneshot(post()));
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let during = most.load(Ordering::SeqCst);
    release.notify_waiters();
    release.notify_waiters();
    let (first, second) = (first.await.unwrap().unwrap(), second.await.unwrap().unwrap());
    assert_eq!(
        during,
        1,
        "the handler ran {during} times at once for one key and body, within the first's lease (statuses {} and {})",
        first.status(),
        second.status()
    );
}
