//! Attack tests (branch attack24): each pins a behaviour the layer promises and does not keep.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use effectively_once::{Config, Idempotency, InMemoryStore, ManualClock};
use effectively_once_http::{Disposition, IdempotencyLayer};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tower::{service_fn, Layer, ServiceExt};

type Body = Full<Bytes>;

struct Setup {
    runs: Arc<AtomicUsize>,
    clock: Arc<ManualClock>,
    layer: IdempotencyLayer<InMemoryStore>,
}

fn setup() -> Setup {
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_lease(Duration::from_secs(30)).with_clock(clock.clone());
    let layer = IdempotencyLayer::new(Idempotency::new(InMemoryStore::new(), config), "orders");
    Setup { runs: Arc::new(AtomicUsize::new(0)), clock, layer }
}

impl Setup {
    /// The handler's first run times out downstream (Hold: effect unknown); every later run
    /// succeeds with 201 and its run number (the effect, e.g. a charge, happens each run).
    async fn send_with(&self, layer: &IdempotencyLayer<InMemoryStore>, request: Request<Body>) -> (u16, bool, Value) {
        let runs = self.runs.clone();
        let service = layer.layer(service_fn(move |_request: Request<Body>| {
            let runs = runs.clone();
            async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                let mut response = Response::new(Body::from(format!(r#"{{"run": {run}}}"#)));
                response.headers_mut().insert("content-type", "application/json".parse().unwrap());
                if run == 1 {
                    *response.status_mut() = StatusCode::GATEWAY_TIMEOUT;
                    response.extensions_mut().insert(Disposition::Hold);
                } else {
                    *response.status_mut() = StatusCode::CREATED;
                }
                Ok::<_, Infallible>(response)
            }
        }));
        let response = service.oneshot(request).await.unwrap();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, replayed, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    async fn send(&self, key: &str, body: &str) -> (u16, bool, Value) {
        self.send_with(&self.layer, post(key, body, None)).await
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

fn post(key: &str, body: &str, caller: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/orders").header("idempotency-key", key);
    if let Some(caller) = caller {
        request = request.header("x-caller", caller);
    }
    request.body(Body::from(body.to_owned())).unwrap()
}

/// Body A's first attempt is held (outcome unknown); after its lease body B takes the key and
/// is refused with `held_for: A`. A's retry then runs again (by design: its first outcome was
/// unknown) and succeeds, but its answer is never stored and no claim guards the run: every
/// later retry of A runs the handler once more. Once A has been answered 201, a retry must be
/// that 201 replayed, not a third run of the effect.
#[tokio::test]
async fn a_retry_after_a_run_again_success_replays_instead_of_running_a_third_time() {
    let s = setup();
    let a = r#"{"amount_cents": 100}"#;
    assert_eq!(s.send("pay-1", a).await.0, 504, "first attempt held: outcome unknown");
    s.clock.advance(Duration::from_secs(31));
    assert_eq!(s.send("pay-1", r#"{"amount_cents": 999}"#).await.0, 422, "another body is refused");
    let second = s.send("pay-1", a).await;
    assert_eq!(second.0, 201, "A runs again: its first outcome was unknown");
    assert_eq!(s.runs(), 2);
    let third = s.send("pay-1", a).await;
    assert_eq!(s.runs(), 2, "A was answered 201 already: its retry must not run the effect again");
    assert_eq!((third.0, third.1, &third.2), (201, true, &second.2), "the 201 replayed");
}

/// Two concurrent retries of A after the refusal: both run, with no claim between them.
#[tokio::test]
async fn two_concurrent_retries_of_a_held_body_run_the_handler_once() {
    let s = Arc::new(setup());
    let a = r#"{"amount_cents": 100}"#;
    assert_eq!(s.send("pay-2", a).await.0, 504);
    s.clock.advance(Duration::from_secs(31));
    assert_eq!(s.send("pay-2", r#"{"amount_cents": 999}"#).await.0, 422);
    let (x, y) = tokio::join!(s.send("pay-2", a), s.send("pay-2", a));
    assert_eq!(s.runs(), 2, "one rerun of A, not two: got statuses {} and {}", x.0, y.0);
}

/// A caller whose scope is spelled like another caller's hashed scope (`h-` and 32 hex digits)
/// shares that caller's keys: it is answered the other caller's stored answer.
#[tokio::test]
async fn a_caller_named_like_a_hashed_scope_does_not_share_its_keys() {
    let s = setup();
    let layer = s.layer.clone().scope(|parts: &http::request::Parts| {
        Ok(parts.headers.get("x-caller").map(|caller| caller.to_str().unwrap().to_owned()))
    });
    let victim = "arn:aws:iam::123456789012:role/shop";
    let squatter = effectively_once_http::hashed(victim);
    let body = r#"{"amount_cents": 100}"#;
    // First run of this handler holds; make the victim's run a stored 201.
    s.send("warmup", "{}").await;
    let victims = s.send_with(&layer, post("pay-3", body, Some(victim))).await;
    assert_eq!(victims.0, 201);
    let squatters = s.send_with(&layer, post("pay-3", body, Some(&squatter))).await;
    assert!(!squatters.1, "caller {squatter} was replayed caller {victim}'s answer {:?}", squatters.2);
}

/// A Scope may answer `Ok(None)` for some requests ("keys shared on purpose"); such a request
/// whose key is spelled `{scope}:{key}` reads a scoped caller's record.
#[tokio::test]
async fn an_unscoped_request_cannot_read_a_scoped_callers_key() {
    let s = setup();
    let layer = s.layer.clone().scope(|parts: &http::request::Parts| {
        Ok(parts.headers.get("x-caller").map(|caller| caller.to_str().unwrap().to_owned()))
    });
    let body = r#"{"amount_cents": 100}"#;
    s.send("warmup", "{}").await;
    assert_eq!(s.send_with(&layer, post("pay-4", body, Some("shop-a"))).await.0, 201);
    let unscoped = s.send_with(&layer, post("shop-a:pay-4", body, None)).await;
    assert!(!unscoped.1, "an unscoped request was replayed shop-a's answer {:?}", unscoped.2);
}

/// A handler's answer of many chunks (a streamed download on a POST, say): the layer reads it
/// whole into memory before it stores it, with no bound, though an answer over the store's
/// `max_response_bytes` (380 000 by default) is never stored anyway.
#[tokio::test]
async fn a_streamed_answer_is_not_buffered_past_the_largest_answer_stored() {
    let s = setup();
    let pulled = Arc::new(AtomicUsize::new(0));
    let service = s.layer.layer(service_fn({
        let pulled = pulled.clone();
        move |_request: Request<Chunks>| {
            let pulled = pulled.clone();
            async move {
                let mut response = Response::new(Chunks { left: 64, pulled: Some(pulled) });
                *response.status_mut() = StatusCode::CREATED;
                Ok::<_, Infallible>(response)
            }
        }
    }));
    let request = Request::post("/downloads").header("idempotency-key", "dl-1").body(Chunks::from(String::new()));
    let response = service.oneshot(request.unwrap()).await.unwrap();
    assert_eq!(response.status(), 201);
    let read = pulled.load(Ordering::SeqCst);
    assert!(
        read <= effectively_once::DEFAULT_MAX_RESPONSE_BYTES + CHUNK,
        "the layer buffered {read} bytes of the answer before the client got a byte"
    );
}

const CHUNK: usize = 1 << 20;

/// `left` chunks of 1 MiB, counting the bytes pulled.
struct Chunks {
    left: usize,
    pulled: Option<Arc<AtomicUsize>>,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        self.left -= 1;
        if let Some(pulled) = &self.pulled {
            pulled.fetch_add(CHUNK, Ordering::SeqCst);
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(vec![b'x'; CHUNK])))))
    }
}

impl From<String> for Chunks {
    fn from(s: String) -> Self {
        Chunks { left: usize::from(!s.is_empty()), pulled: None }
    }
}

impl From<Vec<u8>> for Chunks {
    fn from(v: Vec<u8>) -> Self {
        Chunks { left: usize::from(!v.is_empty()), pulled: None }
    }
}

/// A handler still running when its lease ends is not cut off (as `Idempotency::run` cuts
/// one off), and a retry of the same body then takes the key over and runs it alongside: two
/// runs of one body at once, both answered 201, one of them never stored.
#[tokio::test]
async fn a_handler_that_outruns_its_lease_never_runs_beside_a_retry() {
    let s = Arc::new(setup());
    let gate = Arc::new((tokio::sync::Notify::new(), tokio::sync::Notify::new()));
    let runs = s.runs.clone();
    let service = s.layer.layer(service_fn({
        let gate = gate.clone();
        move |_request: Request<Body>| {
            let (gate, runs) = (gate.clone(), runs.clone());
            async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                if run == 1 {
                    gate.0.notify_one();
                    gate.1.notified().await;
                }
                let mut response = Response::new(Body::from(format!(r#"{{"run": {run}}}"#)));
                *response.status_mut() = StatusCode::CREATED;
                Ok::<_, Infallible>(response)
            }
        }
    }));
    let first = tokio::spawn(service.clone().oneshot(post("slow-1", "{}", None)));
    gate.0.notified().await;
    s.clock.advance(Duration::from_secs(31));
    let retry = service.clone().oneshot(post("slow-1", "{}", None)).await.unwrap();
    gate.1.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(
        s.runs(),
        1,
        "the body ran twice at once: first answered {}, the retry {}",
        first.status(),
        retry.status()
    );
}

/// One layer over a route with a path parameter (`PATCH /orders/{id}`), its default keyed
/// methods POST and PATCH: the fingerprint is the body alone, so the same key and body sent to
/// another order (or with another method) is answered the first order's stored answer, and the
/// second order is never updated.
#[tokio::test]
async fn the_same_key_on_another_resource_is_not_the_first_resources_answer() {
    let s = setup();
    let runs = s.runs.clone();
    let service = s.layer.layer(service_fn(move |request: Request<Body>| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let path = request.uri().path().to_owned();
            Ok::<_, Infallible>(Response::new(Body::from(format!(r#"{{"updated": "{path}"}}"#))))
        }
    }));
    let patch = |path: &str| {
        Request::patch(path).header("idempotency-key", "k-1").body(Body::from(r#"{"status": "shipped"}"#)).unwrap()
    };
    let first = service.clone().oneshot(patch("/orders/1")).await.unwrap();
    assert_eq!(first.status(), 200);
    let other = service.clone().oneshot(patch("/orders/2")).await.unwrap();
    let replayed = other.headers().contains_key("idempotent-replayed");
    let body = other.into_body().collect().await.unwrap().to_bytes();
    assert!(!replayed, "PATCH /orders/2 was answered /orders/1's answer: {}", String::from_utf8_lossy(&body));
}

/// Two different JSON bodies, a big integer and the string its exact form is tagged as in the
/// payload hash, are one payload: the second is answered the first's stored answer, where
/// another body under the same key must be `422`.
#[tokio::test]
async fn a_big_integer_body_and_its_tagged_string_body_are_two_bodies() {
    let s = setup();
    s.send("warmup", "{}").await;
    let first = s.send("big-1", r#"{"amount": 9007199254740993}"#).await;
    assert_eq!(first.0, 201);
    let other = s.send("big-1", r#"{"amount": "\u0000int:9007199254740993"}"#).await;
    assert_eq!((other.0, other.1), (422, false), "another body was answered {:?} as a replay", other.2);
}
