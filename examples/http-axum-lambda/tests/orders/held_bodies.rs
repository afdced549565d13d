//! Over DynamoDB on the local AWS: a body whose first invocation died mid-handler keeps its key;
//! another body is refused, and the first body's retry takes the key over once the refused
//! attempt's lease ends, creates one order, and is replayed after.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use effectively_once::{Begin, Config, Idempotency, Key};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_http::request_payload;
use http_axum_lambda::{app, Orders};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

fn event(key: &str, body: &str) -> lambda_http::Request {
    let mut event: Value = serde_json::from_str(include_str!("../../events/http-payment.json")).unwrap();
    event["rawPath"] = json!("/orders");
    event["requestContext"]["http"]["path"] = json!("/orders");
    event["body"] = json!(body);
    event["headers"].as_object_mut().unwrap().insert("idempotency-key".into(), json!(key));
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

async fn call(router: &Router, request: lambda_http::Request) -> (u16, bool) {
    let response = router.clone().oneshot(request).await.unwrap();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await.unwrap();
    (status, replayed)
}

const ORDER: &str = r#"{"item": "tea", "quantity": 2}"#;

#[tokio::test]
async fn a_held_body_retried_after_another_bodys_refusal_creates_one_order_then_replays() {
    let (store, _) = fresh_store().await;
    // The first invocation of ORDER claimed the key (a 1 s lease: its deadline) and was killed
    // mid-handler: the record stays in progress.
    let crashed = Idempotency::new(store.clone(), Config::default().with_lease(Duration::from_secs(1)));
    let key = Key::new("orders", "order-9").unwrap();
    let begun = crashed
        .begin::<_, Value>(&key, &request_payload(&lambda_http::http::Method::POST, "/orders", ORDER.as_bytes()))
        .await
        .unwrap();
    assert!(matches!(begun, Begin::Claimed(_)));
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let orders = Arc::new(Orders::default());
    let router = app(store, Config::default().with_lease(Duration::from_secs(1)), orders.clone());
    let other = call(&router, event("order-9", r#"{"item": "tea", "quantity": 3}"#)).await;
    assert_eq!(other.0, 422, "the key is ORDER's");
    let waiting = call(&router, event("order-9", ORDER)).await;
    assert_eq!(waiting.0, 409, "the refused attempt holds the key until its lease ends");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let retry = call(&router, event("order-9", ORDER)).await;
    assert_eq!(retry, (201, false), "ORDER runs again: its first invocation's outcome was unknown");
    let again = call(&router, event("order-9", ORDER)).await;
    let last = call(&router, event("order-9", ORDER)).await;
    assert_eq!((again, last), ((201, true), (201, true)), "replayed");
    assert_eq!(orders.created(), 1, "one order per key");
}
