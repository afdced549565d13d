//! The tower layer over the Redis store: a handler wrapped once runs once per key.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use effectively_once::layer::IdempotencyLayer;
use effectively_once::{Config, Idempotency, Status, Store};
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};

#[tokio::test]
async fn a_layered_handler_runs_once_per_key_on_redis() {
    let store = crate::common::fresh_store("layer").await;
    let layer = IdempotencyLayer::json_pointer(
        Idempotency::new(store.clone(), Config::default()),
        "orders",
        "/order_id",
        |request: &Value| request.clone(),
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(tower::service_fn({
        let runs = runs.clone();
        move |request: Value| {
            let run = runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, std::io::Error>(json!({"order": request["order_id"], "run": run})) }
        }
    }));
    let order = json!({"order_id": "o-1", "amount_cents": 700});
    let first = service.clone().oneshot(order.clone()).await.unwrap();
    let second = service.clone().oneshot(order.clone()).await.unwrap();
    assert_eq!(first, json!({"order": "o-1", "run": 0}));
    assert_eq!(second, first, "the duplicate gets the stored response");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = store.get("orders#o-1").await.unwrap().expect("the record is in Redis");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(serde_json::from_str::<Value>(record.response.as_deref().unwrap()).unwrap(), first);

    let other = service.oneshot(json!({"order_id": "o-2"})).await.unwrap();
    assert_eq!(other["run"], 1);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
