//! A handler is bounded by its lease, as `Idempotency::run` bounds one: once the lease has
//! ended (and a retry may have taken the key over) it is cut off, never stored, and its
//! request is answered `503 lease_ended` with `Retry-After`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{post, setup, Body, LEASE};
use effectively_once_http::LEASE_ENDED;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::{service_fn, Layer, ServiceExt};

#[tokio::test]
async fn a_handler_that_outruns_its_lease_is_cut_off_and_never_runs_beside_a_retry() {
    let s = Arc::new(setup());
    let gate = Arc::new((tokio::sync::Notify::new(), tokio::sync::Notify::new()));
    // Effects done after the handler's wait: the first run's never happens.
    let effects = Arc::new(AtomicUsize::new(0));
    let runs = s.runs.clone();
    let service = s.layer.layer(service_fn({
        let (gate, effects) = (gate.clone(), effects.clone());
        move |_request: Request<Body>| {
            let (gate, runs, effects) = (gate.clone(), runs.clone(), effects.clone());
            async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                if run == 1 {
                    gate.0.notify_one();
                    gate.1.notified().await;
                }
                effects.fetch_add(1, Ordering::SeqCst);
                let mut response = Response::new(Body::from(format!(r#"{{"run": {run}}}"#)));
                *response.status_mut() = StatusCode::CREATED;
                Ok::<_, Infallible>(response)
            }
        }
    }));
    let first = tokio::spawn(service.clone().oneshot(post("slow-1", "{}", None)));
    gate.0.notified().await;
    s.clock.advance(LEASE + Duration::from_secs(1));
    let retry = service.clone().oneshot(post("slow-1", "{}", None)).await.unwrap();
    assert_eq!(retry.status(), 201, "the retry takes the key over");
    gate.1.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), 503, "cut off at its lease");
    assert_eq!(first.headers()["retry-after"], "1");
    let text = first.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(serde_json::from_slice::<Value>(&text).unwrap()["error"], LEASE_ENDED);
    assert_eq!(effects.load(Ordering::SeqCst), 1, "the cut-off run never did its effect beside the retry's");
    let replay = service.oneshot(post("slow-1", "{}", None)).await.unwrap();
    assert_eq!(replay.status(), 201);
    let text = replay.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(serde_json::from_slice::<Value>(&text).unwrap()["run"], 2, "the retry's answer is the one stored");
}
