//! An orders service as an axum router on AWS Lambda: `POST /orders` creates an order once per
//! `Idempotency-Key`, with `effectively_once_http::IdempotencyKeyLayer` on that route and the
//! answers kept in DynamoDB. `lambda_http` turns each Function URL or HTTP API event into the
//! request the router serves; the layer ends each lease at the invocation's deadline
//! (`lambda_deadline`), so a timed-out invocation frees its key when Lambda gives up on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use effectively_once::{Config, Idempotency, Store};
use effectively_once_http::{IdempotencyKey, IdempotencyKeyLayer};
use serde::Deserialize;
use serde_json::{json, Value};

/// The largest order body: anything larger is `413` before it is read.
pub const MAX_BODY_BYTES: usize = 4 * 1024;

/// The orders this sandbox created (a real service would write them to a table).
#[derive(Debug, Default)]
pub struct Orders {
    created: AtomicU64,
}

impl Orders {
    /// How many orders were created.
    pub fn created(&self) -> u64 {
        self.created.load(Ordering::SeqCst)
    }
}

/// An order as clients post it.
#[derive(Debug, Deserialize)]
pub struct NewOrder {
    /// What is ordered.
    pub item: String,
    /// How many.
    pub quantity: u32,
}

/// The router: `POST /orders` keyed by `Idempotency-Key` over `store`, `GET /orders/count`.
pub fn app<S: Store + 'static>(store: S, config: Config, orders: Arc<Orders>) -> Router {
    let idempotency = IdempotencyKeyLayer::new(Idempotency::new(store, config), "orders")
        .max_body_bytes(MAX_BODY_BYTES)
        .lambda_deadline();
    Router::new()
        .route("/orders", post(create).layer(idempotency))
        .route("/orders/count", get(count))
        .with_state(orders)
}

/// Creates the order: runs once per key and body.
async fn create(
    State(orders): State<Arc<Orders>>,
    Extension(key): Extension<IdempotencyKey>,
    Json(order): Json<NewOrder>,
) -> (StatusCode, Json<Value>) {
    let number = orders.created.fetch_add(1, Ordering::SeqCst) + 1;
    tracing::info!(order = number, "order created");
    (
        StatusCode::CREATED,
        Json(json!({ "order": number, "item": order.item, "quantity": order.quantity, "key": key.key() })),
    )
}

async fn count(State(orders): State<Arc<Orders>>) -> Json<Value> {
    Json(json!({ "created": orders.created() }))
}
