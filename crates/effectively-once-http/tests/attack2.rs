//! Failing attack tests (second round): inputs where the layer runs two bodies under one key,
//! or answers one resource's request with another's stored answer.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{setup, Body};
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
