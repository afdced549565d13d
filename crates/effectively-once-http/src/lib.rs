//! `Idempotency-Key` for any HTTP service: a tower [`Layer`](tower_layer::Layer) over
//! `http::Request` / `http::Response` that runs a request's handler once per key, stores its
//! answer in any `effectively_once::Store` (DynamoDB, Valkey/Redis, in memory) and replays it to
//! retries. The semantics are Stripe's and the IETF draft's (`draft-ietf-httpapi-idempotency-key-header`):
//!
//! | request | answer |
//! |---|---|
//! | first, with a key | the handler's answer; stored when its status is ([`IdempotencyKeyLayer::store_status`]) |
//! | same key, same body | the stored status, headers and body, plus `Idempotent-Replayed: true` |
//! | same key, other body | `422 {"error": "idempotency_key_reused", ...}` |
//! | same key, first still in flight | `409 {"error": "request_in_progress", ...}` with `Retry-After` (seconds to the lease end) |
//! | body over the limit | `413 {"error": "payload_too_large", ...}`, before more is read |
//! | key missing or invalid | `400 {"error": "invalid_idempotency_key", "message": "Idempotency-Key: ..."}` |
//! | store unavailable | `503 {"error": "unavailable", ...}` with `Retry-After: 1`; nothing stored |
//! | handler still running at its lease's end | cut off: `503 {"error": "lease_ended", ...}` with `Retry-After: 1`; nothing stored |
//! | same key, same body, answer too large to store | `500 {"error": "response_too_large", ...}`; not run again |
//!
//! Errors are JSON `{"error": CODE, "message": TEXT}`. A key is 1 to 200 characters from
//! `[A-Za-z0-9._:#-]`. "Same body" means the same payload ([`Fingerprint`]): by default the
//! method, the path and the body's RFC 8785 canonical JSON (key order, whitespace, `1250`
//! against `1250.0` do not count), or its bytes when it is not JSON ([`request_payload`]); a
//! route can validate its body and hash only what it means (the payments API hashes its
//! validated event).
//!
//! ```
//! use effectively_once::{Config, Idempotency, InMemoryStore};
//! use effectively_once_http::IdempotencyKeyLayer;
//! use bytes::Bytes;
//! use http::{Request, Response, StatusCode};
//! use http_body_util::Full;
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let layer = IdempotencyKeyLayer::new(Idempotency::new(InMemoryStore::new(), Config::default()), "orders");
//! let orders = layer.layer(service_fn(|_request: Request<Full<Bytes>>| async {
//!     let mut response = Response::new(Full::<Bytes>::from(r#"{"order": 1}"#));
//!     *response.status_mut() = StatusCode::CREATED;
//!     Ok::<_, std::convert::Infallible>(response)
//! }));
//! let post = || Request::post("/orders").header("idempotency-key", "order-1").body(Full::from("{}")).unwrap();
//! let first = orders.clone().oneshot(post()).await.unwrap();
//! let again = orders.oneshot(post()).await.unwrap();
//! assert_eq!((first.status(), again.status()), (StatusCode::CREATED, StatusCode::CREATED));
//! assert_eq!(again.headers()["idempotent-replayed"], "true");
//! # }
//! ```
//!
//! Under axum, put the layer on a route (`post(handler).layer(layer)`); under `lambda_http`,
//! around the function's service, with [`IdempotencyKeyLayer::lambda_deadline`] (feature
//! `lambda`) so leases end at the invocation's deadline. Body types are generic: any
//! `http_body::Body` that can be built `From<String>` and `From<Vec<u8>>`; a response body is
//! also a [`ResponseBody`] (`Full<Bytes>`; axum's under feature `axum`; `lambda_http::Body`
//! under `lambda`), so an answer too large to store streams on: the layer reads no more of it
//! than `Config::max_response_bytes` and one byte.
//!
//! # Per route
//!
//! One layer per route, each with its own [`IdempotencyKeyLayer::methods`] (default `POST` and
//! `PATCH`; others pass through untouched), [`store_status`](IdempotencyKeyLayer::store_status),
//! [`scope`](IdempotencyKeyLayer::scope) (each caller's keys apart: an IAM principal, a hashed
//! token), [`fingerprint`](IdempotencyKeyLayer::fingerprint), [`max_body_bytes`](IdempotencyKeyLayer::max_body_bytes)
//! and [`store_headers`](IdempotencyKeyLayer::store_headers). The record of a key is
//! `{prefix}#{scope}:{key}` (`{prefix}#{key}` on a route without a scope, `{prefix}#:{key}` for
//! a request a route's scope leaves unscoped; a hashed scope is `#` and hex digits, which no
//! plain scope spells); the handler finds the validated key in the request's extensions
//! ([`IdempotencyKey`]).
//!
//! A route's settings are its layer's alone: the builder methods copy on write, so
//! `base.clone().scope(..)` scopes that route and leaves `base`, and every other clone of it,
//! as it was. Give each route its own prefix: a scope keeps callers apart within one layer,
//! while two layers on one prefix, one scoped and one not, could spell the same record
//! (`{prefix}#shop-a:k` is caller `shop-a`'s key `k` on the one and key `shop-a:k` on the
//! other). The payments API keys its route by the caller's producer this way (its
//! `API_PRODUCERS`).
//!
//! # Order of writes, and what the handler may say
//!
//! The key is claimed (one conditional write) **before** the handler runs, and completed with
//! its answer after; a replay costs one request. The handler, and the reading of its answer,
//! are bounded by the lease, as `Idempotency::run` bounds a handler: past it a retry may take
//! the key over, so the handler is cut off. The handler's answer is stored when its status is
//! stored ([`IdempotencyKeyLayer::store_status`]; by default 2xx and 3xx: a result is stored only
//! when the handler ran), and otherwise the key is **released**, so a retry runs again. A handler whose failure
//! may have had an effect (a call downstream timed out) says so with [`OnAnswer::Hold`] in
//! the response's extensions: the key stays in progress until its lease ends (retries get
//! `409`; the answer gets `Retry-After`), then the same body may run again, and another body is
//! refused. A handler that returns an `Err` is held the same way, as a crash is. The handler
//! must tolerate running twice for one body (after a crash, a lost answer, or a lease that
//! ended): key its own effects, as the workspace's consumers do.
//!
//! A key is bound to one body for as long as its record lasts: a claim that replaces a record
//! past its dedup window or its lease checks what it replaced, and refuses (`422`) another
//! body's key where that body may have had its effect: that refusal is not stored, its attempt
//! holds the key until its lease ends, and then that body's retry takes the key over (one
//! claim, one run, its answer stored). The rules are pure functions in
//! [`rules`], explored by the workspace's protocol model. Leases are the store's (the
//! `Config`'s, bounded by [`IdempotencyKeyLayer::deadline`]); the dedup window is the `Config`'s.
//!
//! `IDEMPOTENCY_DISABLED` does not turn this layer off: like `Idempotency::begin`, on which it
//! is built, it keeps the key's binding to its body.
// docs.rs (nightly, `--cfg docsrs`): each feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod answer;
mod body;
mod fingerprint;
mod key;
mod layer;
pub mod rules;
mod service;

pub use crate::answer::{
    Answer, INVALID_KEY, IN_PROGRESS, KEY_HELD, KEY_REUSED, LEASE_ENDED, PAYLOAD_TOO_LARGE, RESPONSE_TOO_LARGE,
    UNAVAILABLE,
};
pub use crate::body::{Prefixed, ResponseBody};
pub use crate::fingerprint::{canonical_payload, request_payload, Canonical, Fingerprint};
pub use crate::key::{hashed, scope_name, IdempotencyKey, Scope, Unscoped, HEADER, MAX_KEY, MAX_SCOPE};
pub use crate::layer::{IdempotencyKeyLayer, DEFAULT_MAX_BODY_BYTES};
pub use crate::service::{IdempotencyKeyService, OnAnswer, REPLAYED};
