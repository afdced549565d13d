//! The router as Lambda runs it: each request is a Function URL event parsed by `lambda_http`
//! (as the runtime does), served by the router, over a DynamoDB table on the local AWS
//! (`make local-aws-up`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use effectively_once::Config;
use effectively_once_dynamodb::testing::fresh_store;
use http_axum_lambda::{app, Orders};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

/// A Function URL event (payload 2.0): `POST path` with `key` and `body`.
fn event(path: &str, key: Option<&str>, body: &str) -> lambda_http::Request {
    let mut event: Value = serde_json::from_str(include_str!("../../events/http-payment.json")).unwrap();
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event["body"] = json!(body);
    let headers = event["headers"].as_object_mut().unwrap();
    headers.remove("idempotency-key");
    if let Some(key) = key {
        headers.insert("idempotency-key".into(), json!(key));
    }
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

struct Reply {
    status: u16,
    replayed: bool,
    body: Value,
}

async fn call(router: &Router, request: lambda_http::Request) -> Reply {
    let response = router.clone().oneshot(request).await.unwrap();
    let (status, replayed) = (response.status().as_u16(), response.headers().contains_key("idempotent-replayed"));
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply { status, replayed, body: serde_json::from_slice(&body).unwrap_or(Value::Null) }
}

async fn setup() -> (Router, Arc<Orders>) {
    let (store, _) = fresh_store().await;
    let orders = Arc::new(Orders::default());
    (app(store, Config::default().with_lease(Duration::from_secs(10)), orders.clone()), orders)
}

const ORDER: &str = r#"{"item": "tea", "quantity": 2}"#;

#[tokio::test]
async fn a_retried_invocation_replays_the_first_answer_and_creates_one_order() {
    let (router, orders) = setup().await;
    let first = call(&router, event("/orders", Some("order-1"), ORDER)).await;
    assert_eq!((first.status, first.replayed), (201, false));
    assert_eq!(first.body, json!({"order": 1, "item": "tea", "quantity": 2, "key": "order-1"}));
    let again = call(&router, event("/orders", Some("order-1"), r#"{"quantity": 2, "item": "tea"}"#)).await;
    assert_eq!((again.status, again.replayed, &again.body), (201, true, &first.body));
    let other = call(&router, event("/orders", Some("order-1"), r#"{"item": "tea", "quantity": 3}"#)).await;
    assert_eq!((other.status, other.body["error"].as_str()), (422, Some("idempotency_key_reused")));
    assert_eq!(orders.created(), 1);
}

#[tokio::test]
async fn a_missing_key_or_a_large_body_is_refused_before_anything_runs() {
    let (router, orders) = setup().await;
    let missing = call(&router, event("/orders", None, ORDER)).await;
    assert_eq!((missing.status, missing.body["error"].as_str()), (400, Some("invalid_idempotency_key")));
    let large = format!(r#"{{"item": "{}", "quantity": 1}}"#, "x".repeat(http_axum_lambda::MAX_BODY_BYTES));
    let refused = call(&router, event("/orders", Some("order-2"), &large)).await;
    assert_eq!((refused.status, refused.body["error"].as_str()), (413, Some("payload_too_large")));
    assert_eq!(orders.created(), 0);
}

/// The invocation's deadline bounds the lease: an invocation whose deadline has passed claims
/// nothing (`503`, retry), where it would otherwise hold the key for the configured lease.
#[tokio::test]
async fn the_invocations_deadline_bounds_the_lease() {
    let (router, orders) = setup().await;
    let mut late = event("/orders", Some("order-3"), ORDER);
    let past = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 - 1000;
    let mut context = lambda_http::Context::default();
    context.deadline = past;
    late.extensions_mut().insert(context);
    let reply = call(&router, late).await;
    assert_eq!((reply.status, reply.body["error"].as_str()), (503, Some("unavailable")), "{:?}", reply.body);
    assert_eq!(orders.created(), 0);
    assert_eq!(call(&router, event("/orders", Some("order-3"), ORDER)).await.status, 201, "nothing was claimed");
}
