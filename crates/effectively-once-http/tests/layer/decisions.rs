//! The layer's decisions, over an in-memory store and a handler that counts its runs.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use effectively_once::{InMemoryStore, ManualClock};
use effectively_once_http::{Answer, IdempotencyKey, IdempotencyKeyLayer, OnAnswer};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::{service_fn, Layer, ServiceExt};

use crate::support::{layer, Body};

/// What the handler answers, by the request's body: `{"status": N}` answers N, `{"hold": true}`
/// answers 503 held; otherwise 201 with the body's run number.
#[derive(Default)]
struct Handler {
    runs: AtomicUsize,
    gate: Option<(Notify, Notify)>,
}

impl Handler {
    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some((entered, release)) = &self.gate {
            entered.notify_one();
            release.notified().await;
        }
        let key = request.extensions().get::<IdempotencyKey>().map(|key| key.scoped().to_owned());
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let fields: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let status = fields["status"].as_u64().map_or(StatusCode::CREATED, |s| StatusCode::from_u16(s as u16).unwrap());
        let mut response = Response::new(Body::from(format!(r#"{{"run": {run}, "key": {}}}"#, json!(key))));
        *response.status_mut() = status;
        response.headers_mut().insert("content-type", "application/json".parse().unwrap());
        response.headers_mut().insert("set-cookie", format!("run={run}").parse().unwrap());
        if fields["hold"] == true {
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            response.extensions_mut().insert(OnAnswer::Hold);
        }
        response
    }
}

struct Setup {
    handler: Arc<Handler>,
    clock: Arc<ManualClock>,
    layer: IdempotencyKeyLayer<InMemoryStore>,
}

fn setup(handler: Handler) -> Setup {
    let clock = Arc::new(ManualClock::new());
    Setup { handler: Arc::new(handler), clock: clock.clone(), layer: layer(clock) }
}

struct Reply {
    status: u16,
    replayed: bool,
    retry_after: Option<u64>,
    body: Value,
    cookie: Option<String>,
}

impl Setup {
    async fn send_with(&self, layer: &IdempotencyKeyLayer<InMemoryStore>, request: Request<Body>) -> Reply {
        let handler = self.handler.clone();
        let service = layer.layer(service_fn(move |request: Request<Body>| {
            let handler = handler.clone();
            async move { Ok::<_, Infallible>(handler.answer(request).await) }
        }));
        let response = service.oneshot(request).await.unwrap();
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        let (status, replayed) = (response.status().as_u16(), header("idempotent-replayed").is_some());
        let (retry_after, cookie) = (header("retry-after").map(|s| s.parse().unwrap()), header("set-cookie"));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply { status, replayed, retry_after, body: serde_json::from_slice(&body).unwrap_or(Value::Null), cookie }
    }

    async fn send(&self, key: Option<&str>, body: &str) -> Reply {
        self.send_with(&self.layer, post(key, body)).await
    }

    fn runs(&self) -> usize {
        self.handler.runs.load(Ordering::SeqCst)
    }
}

fn post(key: Option<&str>, body: &str) -> Request<Body> {
    let mut request = Request::post("/orders");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.body(Body::from(body.to_owned())).unwrap()
}

#[tokio::test]
async fn a_retry_with_the_same_body_is_the_stored_answer_and_the_handler_runs_once() {
    let s = setup(Handler::default());
    let first = s.send(Some("order-1"), r#"{"item": "a", "qty": 1}"#).await;
    assert_eq!((first.status, first.replayed, &first.body), (201, false, &json!({"run": 1, "key": "order-1"})));
    let again = s.send(Some("order-1"), r#"{ "qty": 1.0, "item": "a" }"#).await;
    assert_eq!((again.status, again.replayed, &again.body), (201, true, &first.body), "re-serialised: same body");
    assert_eq!(again.cookie, None, "only the headers chosen are stored");
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_422_and_runs_nothing() {
    let s = setup(Handler::default());
    assert_eq!(s.send(Some("order-2"), r#"{"qty": 1}"#).await.status, 201);
    let other = s.send(Some("order-2"), r#"{"qty": 2}"#).await;
    assert_eq!((other.status, other.body["error"].as_str()), (422, Some("idempotency_key_reused")));
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn a_retry_while_the_first_is_in_flight_is_409_with_retry_after() {
    let s = setup(Handler { gate: Some((Notify::new(), Notify::new())), ..Handler::default() });
    let s = Arc::new(s);
    let first = tokio::spawn({
        let s = s.clone();
        async move { s.send(Some("order-3"), "{}").await.status }
    });
    let (entered, release) = s.handler.gate.as_ref().unwrap();
    entered.notified().await;
    let busy = s.send(Some("order-3"), "{}").await;
    assert_eq!((busy.status, busy.body["error"].as_str()), (409, Some("request_in_progress")));
    assert_eq!(busy.retry_after, Some(30), "the seconds left of the first's lease");
    release.notify_one();
    assert_eq!(first.await.unwrap(), 201);
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn a_missing_or_invalid_key_is_400_and_runs_nothing() {
    let s = setup(Handler::default());
    let missing = s.send(None, "{}").await;
    assert_eq!((missing.status, missing.body["error"].as_str()), (400, Some("invalid_idempotency_key")));
    assert_eq!(missing.body["message"], "Idempotency-Key: the header is required");
    let invalid = s.send(Some("order 4"), "{}").await;
    assert!(invalid.body["message"].as_str().unwrap().starts_with("Idempotency-Key: has the character ' '"));
    assert_eq!(s.runs(), 0);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_before_it_is_read() {
    let s = setup(Handler::default());
    let layer = s.layer.clone().max_body_bytes(8);
    let declared = s.send_with(&layer, post(Some("order-5"), r#"{"qty": 100}"#)).await;
    assert_eq!((declared.status, declared.body["error"].as_str()), (413, Some("payload_too_large")));
    // A streamed body that says nothing of its length: cut off once over the limit, and the
    // chunks after it are never pulled.
    let pulled = Arc::new(AtomicUsize::new(0));
    let streamed = Request::post("/orders")
        .header("idempotency-key", "order-5")
        .body(Endless { pulled: Some(pulled.clone()) })
        .unwrap();
    let handler = s.handler.clone();
    let service = layer.layer(service_fn(move |_request: Request<Endless>| {
        let handler = handler.clone();
        async move {
            handler.runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(Response::new(Body::from("{}")))
        }
    }));
    let response = service.oneshot(streamed).await.unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(pulled.load(Ordering::SeqCst), 3, "read no further than the limit");
    assert_eq!(s.runs(), 0);
}

/// A body of endless 4-byte chunks with no length, counting the chunks pulled.
struct Endless {
    pulled: Option<Arc<AtomicUsize>>,
}

impl http_body::Body for Endless {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if let Some(pulled) = &self.pulled {
            pulled.fetch_add(1, Ordering::SeqCst);
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(b"xxxx")))))
    }
}

impl From<String> for Endless {
    fn from(_: String) -> Self {
        Endless { pulled: None }
    }
}

impl From<Vec<u8>> for Endless {
    fn from(_: Vec<u8>) -> Self {
        Endless { pulled: None }
    }
}

#[tokio::test]
async fn methods_not_keyed_pass_through_untouched() {
    let s = setup(Handler::default());
    let get = Request::builder().method(Method::GET).uri("/orders").body(Body::from("{}")).unwrap();
    assert_eq!(s.send_with(&s.layer, get).await.status, 201, "no key needed");
    let put = Request::builder().method(Method::PUT).uri("/orders").body(Body::from("{}")).unwrap();
    let keyed_put = s.layer.clone().methods([Method::PUT]);
    assert_eq!(s.send_with(&keyed_put, put).await.status, 400, "keyed on this route");
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn a_4xx_not_stored_frees_the_key_and_a_5xx_holds_it() {
    let s = setup(Handler::default());
    let refused = s.send(Some("order-6"), r#"{"status": 400}"#).await;
    assert_eq!((refused.status, refused.replayed), (400, false));
    assert!(!s.send(Some("order-6"), r#"{"status": 400}"#).await.replayed, "ran again");
    assert_eq!(s.send(Some("order-6"), r#"{"status": 200}"#).await.status, 200, "another body may take it");
    assert_eq!(s.runs(), 3);
    // A 5xx may come after the work: held as a crash is, until the lease ends.
    let failed = s.send(Some("order-5"), r#"{"status": 500}"#).await;
    assert_eq!((failed.status, failed.replayed), (500, false));
    assert_eq!(s.send(Some("order-5"), r#"{"status": 200}"#).await.status, 409, "no other body runs under it");
    assert_eq!(s.send(Some("order-5"), r#"{"status": 500}"#).await.status, 409, "its retry waits for the lease");
    s.clock.advance(Duration::from_secs(31));
    assert_eq!(s.send(Some("order-5"), r#"{"status": 500}"#).await.status, 500, "then takes the key over");
    assert_eq!(s.runs(), 5);
    // A route that stores only successes: a 404 runs again.
    let layer = s.layer.clone().store_status(|status| status.is_success());
    assert_eq!(s.send_with(&layer, post(Some("order-7"), r#"{"status": 404}"#)).await.status, 404);
    assert!(!s.send_with(&layer, post(Some("order-7"), r#"{"status": 404}"#)).await.replayed);
    assert_eq!(s.runs(), 7);
}

#[tokio::test]
async fn a_held_answer_keeps_the_key_until_its_lease_ends() {
    let s = setup(Handler::default());
    let held = s.send(Some("order-8"), r#"{"hold": true}"#).await;
    assert_eq!((held.status, held.retry_after), (503, Some(30)), "Retry-After: the lease's seconds");
    assert_eq!(s.send(Some("order-8"), r#"{"hold": true}"#).await.status, 409);
    assert_eq!(s.send(Some("order-8"), r#"{"qty": 9}"#).await.status, 409, "another body waits too");
    s.clock.advance(Duration::from_secs(31));
    assert_eq!(s.send(Some("order-8"), r#"{"qty": 9}"#).await.status, 422, "the key is the held body's");
    let other = s.send(Some("order-8"), r#"{"hold": false, "status": 200}"#).await.status;
    assert_eq!(other, 409, "the refused attempt keeps the key until its own lease ends");
    s.clock.advance(Duration::from_secs(31));
    assert_eq!(s.send(Some("order-8"), r#"{"hold": false, "status": 200}"#).await.status, 422);
    assert_eq!(s.runs(), 1);
}

#[tokio::test]
async fn each_callers_keys_live_apart_and_an_unknown_caller_is_refused() {
    let s = setup(Handler::default());
    let layer = s.layer.clone().scope(|parts: &http::request::Parts| match parts.headers.get("x-caller") {
        Some(caller) => Ok(Some(caller.to_str().unwrap().to_owned())),
        None => Err(Answer::error(StatusCode::FORBIDDEN, "forbidden", "unknown caller")),
    });
    let from = |caller: &str, body: &str| {
        let mut request = post(Some("order-9"), body);
        request.headers_mut().insert("x-caller", caller.parse().unwrap());
        request
    };
    let a = s.send_with(&layer, from("shop-a", r#"{"qty": 1}"#)).await;
    let b = s.send_with(&layer, from("shop-b", r#"{"qty": 2}"#)).await;
    assert_eq!((a.status, b.status), (201, 201), "one key, two callers, two records");
    assert_eq!((a.body["key"].as_str(), b.body["key"].as_str()), (Some("shop-a:order-9"), Some("shop-b:order-9")));
    assert!(s.send_with(&layer, from("shop-a", r#"{"qty": 1}"#)).await.replayed);
    assert_eq!(s.send_with(&layer, post(Some("order-9"), "{}")).await.status, 403);
    assert_eq!(s.runs(), 2);
}

#[tokio::test]
async fn a_fingerprint_refusal_is_answered_before_the_claim() {
    let s = setup(Handler::default());
    let layer =
        s.layer.clone().fingerprint(|_key: &IdempotencyKey, _parts: &mut http::request::Parts, body: &Bytes| {
            let value: Value = serde_json::from_slice(body)
                .map_err(|_| Answer::error(StatusCode::BAD_REQUEST, "invalid_body", "body: must be JSON"))?;
            // Only the quantity counts: a retry that changes a note is the same order.
            Ok(json!({ "qty": value["qty"] }))
        });
    assert_eq!(s.send_with(&layer, post(Some("order-10"), "not json")).await.status, 400);
    assert_eq!(s.send_with(&layer, post(Some("order-10"), r#"{"qty": 1, "note": "a"}"#)).await.status, 201);
    assert!(s.send_with(&layer, post(Some("order-10"), r#"{"qty": 1, "note": "b"}"#)).await.replayed);
    assert_eq!(s.runs(), 1, "the refused request claimed nothing, so the next one ran");
}
