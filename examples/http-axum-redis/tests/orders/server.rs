//! The orders service started on a loopback port, over the local Valkey/Redis (`REDIS_URL`,
//! else the local one `effectively_once_redis::testing::url` starts), driven by a real HTTP client (hyper's).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use effectively_once::{Begin, Config, Idempotency, Key};
use effectively_once_http::{request_payload, Answer};
use effectively_once_redis::testing::url as test_url;
use effectively_once_redis::RedisStore;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// A running service with a namespace of its own in Redis; stopped when dropped.
struct Server {
    addr: SocketAddr,
    namespace: String,
    _stop: oneshot::Sender<()>,
}

async fn start() -> Server {
    let namespace = format!("http-example-{}", uuid::Uuid::new_v4());
    let url = test_url();
    let store = RedisStore::connect(&url, &namespace)
        .await
        .unwrap_or_else(|e| panic!("Redis at {url}: {e} (make local-redis-up)"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let app = http_axum_redis::app(store, Arc::default());
    tokio::spawn(http_axum_redis::serve(listener, app, async {
        let _ = stopped.await;
    }));
    Server { addr, namespace, _stop: stop }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    replayed: Option<String>,
    retry_after: Option<String>,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

impl Server {
    async fn request(&self, method: &str, path: &str, key: Option<&str>, body: &str) -> Reply {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut request = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("content-type", "application/json");
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let response = client.request(request.body(Full::from(body.to_owned())).unwrap()).await.unwrap();
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        let (status, replayed, retry_after) =
            (response.status().as_u16(), header("idempotent-replayed"), header("retry-after"));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply { status, replayed, retry_after, body }
    }

    async fn order(&self, key: Option<&str>, body: &str) -> Reply {
        self.request("POST", "/orders", key, body).await
    }

    /// How many orders the handler created.
    async fn created(&self) -> u64 {
        self.request("GET", "/orders/count", None, "").await.json()["created"].as_u64().unwrap()
    }
}

const ORDER: &str = r#"{"item": "tea", "quantity": 2}"#;

#[tokio::test]
async fn a_retry_is_replayed_with_the_first_answer_and_the_order_is_created_once() {
    let server = start().await;
    let first = server.order(Some("order-1"), ORDER).await;
    assert_eq!((first.status, first.replayed.as_deref()), (201, None), "{first:?}");
    assert_eq!(first.json(), json!({"order": 1, "item": "tea", "quantity": 2, "key": "order-1"}));
    // Re-serialised by the client: other key order, 2.0 for 2.
    let again = server.order(Some("order-1"), r#"{ "quantity": 2.0, "item": "tea" }"#).await;
    assert_eq!((again.status, again.replayed.as_deref()), (201, Some("true")), "{again:?}");
    assert_eq!(again.body, first.body, "the first answer, byte for byte");
    assert_eq!(server.created().await, 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_422() {
    let server = start().await;
    assert_eq!(server.order(Some("order-2"), ORDER).await.status, 201);
    let other = server.order(Some("order-2"), r#"{"item": "tea", "quantity": 3}"#).await;
    assert_eq!((other.status, other.json()["error"].as_str()), (422, Some("idempotency_key_reused")), "{other:?}");
    assert_eq!(server.created().await, 1);
}

/// Another instance of the service holds the key (its request is in flight): this one answers
/// `409` with `Retry-After`, and creates nothing.
#[tokio::test]
async fn a_request_while_the_first_is_in_flight_is_409_with_retry_after() {
    let server = start().await;
    let other_instance = RedisStore::connect(&test_url(), &server.namespace).await.unwrap();
    let idempotency = Idempotency::new(other_instance, Config::default());
    let key = Key::new("orders", "order-3").unwrap();
    let Ok(Begin::Claimed(_in_flight)) =
        idempotency.begin::<_, Answer>(&key, &request_payload(&hyper::Method::POST, "/orders", ORDER.as_bytes())).await
    else {
        panic!("claimed by the other instance")
    };
    let busy = server.order(Some("order-3"), ORDER).await;
    assert_eq!((busy.status, busy.json()["error"].as_str()), (409, Some("request_in_progress")), "{busy:?}");
    let retry_after: u64 = busy.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=900).contains(&retry_after), "the seconds left of the other's lease: {retry_after}");
    assert_eq!(server.created().await, 0);
}

#[tokio::test]
async fn a_missing_or_invalid_key_is_400() {
    let server = start().await;
    let missing = server.order(None, ORDER).await;
    assert_eq!((missing.status, missing.json()["error"].as_str()), (400, Some("invalid_idempotency_key")));
    assert_eq!(missing.json()["message"], "Idempotency-Key: the header is required");
    let invalid = server.order(Some("order 4"), ORDER).await;
    assert_eq!(invalid.status, 400);
    assert!(invalid.json()["message"].as_str().unwrap().starts_with("Idempotency-Key: has the character ' '"));
    assert_eq!(server.created().await, 0);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_creates_nothing() {
    let server = start().await;
    let note = "x".repeat(http_axum_redis::MAX_BODY_BYTES);
    let large = format!(r#"{{"item": "tea", "quantity": 2, "note": "{note}"}}"#);
    let refused = server.order(Some("order-5"), &large).await;
    assert_eq!((refused.status, refused.json()["error"].as_str()), (413, Some("payload_too_large")), "{refused:?}");
    assert_eq!(server.created().await, 0);
    assert_eq!(server.order(Some("order-5"), ORDER).await.status, 201, "nothing was claimed");
}

#[tokio::test]
async fn concurrent_retries_of_one_key_create_one_order() {
    let server = Arc::new(start().await);
    let clients = (0..8).map(|_| {
        let server = server.clone();
        tokio::spawn(async move { server.order(Some("order-6"), ORDER).await })
    });
    let mut fresh = 0;
    for reply in clients {
        let reply = reply.await.unwrap();
        match (reply.status, reply.replayed.as_deref()) {
            (201, None) => fresh += 1,
            (201, Some("true")) => assert_eq!(reply.json()["order"], 1),
            (409, None) => assert!(reply.retry_after.is_some()),
            _ => panic!("unexpected answer {reply:?}"),
        }
    }
    assert_eq!(fresh, 1);
    assert_eq!(server.created().await, 1);
}
