//! What the layer's tests share: a layer on a manual clock, and a handler whose first run
//! times out downstream (its outcome unknown) and whose later runs succeed.

#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use effectively_once::{Config, Idempotency, InMemoryStore, ManualClock};
use effectively_once_http::{IdempotencyKeyLayer, OnAnswer};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tower::{service_fn, Layer, ServiceExt};

pub type Body = Full<Bytes>;

/// The lease of every test's layer.
pub const LEASE: Duration = Duration::from_secs(30);

pub struct Setup {
    pub runs: Arc<AtomicUsize>,
    pub clock: Arc<ManualClock>,
    pub layer: IdempotencyKeyLayer<InMemoryStore>,
}

/// The layer every test puts in front of its handler: the route `orders`, an in-memory store,
/// the lease `LEASE` on `clock`.
pub fn layer(clock: Arc<ManualClock>) -> IdempotencyKeyLayer<InMemoryStore> {
    let config = Config::default().with_lease(LEASE).with_clock(clock);
    IdempotencyKeyLayer::new(Idempotency::new(InMemoryStore::new(), config), "orders")
}

pub fn setup() -> Setup {
    let clock = Arc::new(ManualClock::new());
    Setup { runs: Arc::new(AtomicUsize::new(0)), clock: clock.clone(), layer: layer(clock) }
}

/// An answer: status, whether replayed, `Retry-After`, JSON body.
pub type Got = (u16, bool, Option<String>, Value);

impl Setup {
    /// The handler's first run times out downstream (Hold: effect unknown); every later run
    /// succeeds with 201 and its run number (the effect, e.g. a charge, happens each run).
    pub async fn send_with(&self, layer: &IdempotencyKeyLayer<InMemoryStore>, request: Request<Body>) -> Got {
        let runs = self.runs.clone();
        let service = layer.layer(service_fn(move |_request: Request<Body>| {
            let runs = runs.clone();
            async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                let mut response = Response::new(Body::from(format!(r#"{{"run": {run}}}"#)));
                response.headers_mut().insert("content-type", "application/json".parse().unwrap());
                if run == 1 {
                    *response.status_mut() = StatusCode::GATEWAY_TIMEOUT;
                    response.extensions_mut().insert(OnAnswer::Hold);
                } else {
                    *response.status_mut() = StatusCode::CREATED;
                }
                Ok::<_, Infallible>(response)
            }
        }));
        let response = service.oneshot(request).await.unwrap();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, replayed, retry_after, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    pub async fn send(&self, key: &str, body: &str) -> Got {
        self.send_with(&self.layer, post(key, body, None)).await
    }

    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

pub fn post(key: &str, body: &str, caller: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/orders").header("idempotency-key", key);
    if let Some(caller) = caller {
        request = request.header("x-caller", caller);
    }
    request.body(Body::from(body.to_owned())).unwrap()
}
