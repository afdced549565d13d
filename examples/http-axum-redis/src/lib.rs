//! An orders service on axum, long-running: `POST /orders` creates an order once per
//! `Idempotency-Key`, whatever the client retries, with the answers kept in Valkey/Redis by
//! `effectively_once_http::IdempotencyKeyLayer` on that route alone. `GET /orders/count` says how
//! many orders were created (the effect a duplicate must not repeat).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use effectively_once::{Config, Idempotency};
use effectively_once_http::{IdempotencyKey, IdempotencyKeyLayer};
use effectively_once_redis::RedisStore;
use serde::Deserialize;
use serde_json::{json, Value};

/// The largest order body: a few fields; anything larger is `413` before it is read.
pub const MAX_BODY_BYTES: usize = 4 * 1024;

/// The orders created so far.
#[derive(Debug, Default)]
pub struct Orders {
    created: AtomicU64,
}

/// An order as clients post it.
#[derive(Debug, Deserialize)]
pub struct NewOrder {
    /// What is ordered.
    pub item: String,
    /// How many.
    pub quantity: u32,
}

/// The service: `POST /orders` keyed by `Idempotency-Key` over `store`, `GET /orders/count`.
pub fn app(store: RedisStore, orders: Arc<Orders>) -> Router {
    // A day's dedup window and a 30 s lease: a retry within a day replays; a request cut off
    // mid-way frees its key 30 s later.
    let config =
        Config::default().with_dedup_window(Duration::from_secs(24 * 3600)).with_lease(Duration::from_secs(30));
    // Answers stored: the default, 2xx and 3xx, the handler's own. A 4xx here comes from
    // axum's extractors (a missing `Content-Type` is `415`) before the handler runs: stored,
    // it would outlive the client's corrected retry.
    let idempotency =
        IdempotencyKeyLayer::new(Idempotency::new(store, config), "orders").max_body_bytes(MAX_BODY_BYTES);
    Router::new()
        .route("/orders", post(create).layer(idempotency))
        .route("/orders/count", get(count))
        .with_state(orders)
}

/// Creates the order: runs once per key and body.
async fn create(
    State(orders): State<Arc<Orders>>,
    axum::Extension(key): axum::Extension<IdempotencyKey>,
    Json(order): Json<NewOrder>,
) -> (StatusCode, Json<Value>) {
    let number = orders.created.fetch_add(1, Ordering::SeqCst) + 1;
    tracing::info!(order = number, "order created");
    let body = json!({ "order": number, "item": order.item, "quantity": order.quantity, "key": key.key() });
    (StatusCode::CREATED, Json(body))
}

async fn count(State(orders): State<Arc<Orders>>) -> Json<Value> {
    Json(json!({ "created": orders.created.load(Ordering::SeqCst) }))
}

/// Serves `app` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}
