//! The payments API, the pipeline's inbound edge: `POST /payments` with an `Idempotency-Key`
//! header, answered behind a Lambda Function URL or an API Gateway HTTP API (payload 2.0).
//!
//! The contract (docs/local.md, "The payments API over HTTP", has a curl session):
//!
//! | request | answer |
//! |---|---|
//! | first, valid | `202 {"event_id": KEY}` once the payment event is on the queue (`PAYMENTS_QUEUE_URL`) |
//! | same key, same body | the stored status and body again, with `Idempotent-Replayed: true` |
//! | same key, other body | `422 {"error": "idempotency_key_reused", ...}` |
//! | same key, first still in flight | `409 {"error": "request_in_progress", ...}` with `Retry-After` (seconds to the lease end) |
//! | caller not a configured producer (`API_PRODUCERS`) | `403 {"error": "forbidden", ...}`, before anything is read or stored |
//! | body over `API_MAX_BODY_BYTES` (default 8 KiB) | `413 {"error": "payload_too_large", ...}`, before it is parsed |
//! | key or body missing or invalid | `400 {"error": "invalid_idempotency_key" \| "invalid_body", "message": "FIELD: ..."}` (a field named twice included) |
//! | an account the caller's producer may not post to | `403 {"error": "forbidden", "message": "account_id: ..."}`, before anything is stored or sent |
//!
//! The body is the payment event's fields without `event_id`: the key becomes the event id, and
//! the event is validated by [`PaymentEvent::parse_with_event_id`] (the rules of
//! [`PaymentEvent::parse`], in one pass over the text), so the API and the consumer apply one
//! set of rules.
//!
//! # Keys scoped by caller
//!
//! Callers are IAM principals (`requestContext.authorizer.iam.userArn`, [`principal`]), mapped
//! to producers by `API_PRODUCERS` ([`Producers`], where the syntax is; docs/deploy.md has the
//! template parameter). Unset (the default deployment): every authenticated caller, any
//! account, the event id is the key. One producer: its principals only (others `403`), its
//! accounts only, the event id is still the key. Several: each producer's keys live apart
//! (records `api#{producer}:{key}`), the event id is `{producer}:{key}`, and the key may be as
//! long as the event id allows (200 characters less the name and a colon; longer is `400`
//! naming `Idempotency-Key`). A `403` stores nothing, so the caller's later valid request
//! under the same key is its first. "Same body" means the same validated event (RFC 8785 canonical form: key order,
//! `1250` against `1250.0` and unknown fields do not count).
//!
//! # Built on the Idempotency-Key layer
//!
//! The key's handling is `effectively_once_http`'s [`IdempotencyKeyLayer`], one route of it: the
//! layer bounds the body, validates the key, hashes the validated event (its fingerprint is
//! [`parse`]), claims the key's record (`api#{key}` in `IdempotencyTable`, `api#{producer}:{key}`
//! with several producers, apart from the consumer's `payments#{event_id}`) **before** the
//! message is sent, stores the `202`, and
//! replays, refuses or holds by its rules ([`rules`]). What this crate adds is the payment:
//! the route, the event's validation, and the send, whose failure says what becomes of the key.
//!
//! The record binds the key to its body: an event id names one payment in the ledger for good,
//! so two different events must never carry it (the consumer would post one and send the
//! other to the DLQ as key reuse, after the client got a `202` for it). Hence:
//!
//! - A send SQS **refused** (4xx: access denied, no such queue, an invalid request; or never
//!   sent) answers `503` and releases the record (`OnAnswer::Release`): nothing is on the
//!   queue, and the retry, whatever its body, starts over.
//! - A send whose outcome is **unknown** (a timeout, a dropped connection, a 5xx: it may have
//!   landed) answers `503` with `Retry-After` and leaves the record in progress until its lease
//!   ends (`OnAnswer::Hold`, at the invocation's deadline): retries get `409` until then;
//!   after it the same body takes the key over and sends again, which is safe (the consumer
//!   keys on the event id, so two messages of one event make one ledger entry and one
//!   receipt), and its `202` is stored, so later retries replay it. Another body gets `409`
//!   during the lease (a record in progress may be a refusal not stored yet, over the body on
//!   the queue: it gives no final answer), `422` after it.
//! - A completion that fails after the send still answers `202`: the message is on the queue;
//!   the record stays in progress until its lease ends (retries get `409`), then the same body
//!   sends again, harmlessly.
//! - A claim that overwrote a record past its window, or in progress past its lease, checks
//!   what it overwrote ([`effectively_once::Attempt::what_it_replaced`]; after a run of
//!   takeovers whose attempts died, the record the run began with): another body's record (or
//!   a stored `422` for this one) makes it `422`, and nothing is sent. Where that other body's
//!   send may have landed, the `422` is not stored: the refused attempt holds the key until its
//!   lease ends, and then that body's retry takes the key over, sends once and stores its
//!   `202`; otherwise the `422` is stored for this body.
//! - A claim whose answer was lost meets its own record on the retry, which keeps what the
//!   first write replaced, so the checks above see the record it replaced all the same. Where
//!   that is unknown (an item that could not be read), the key is **held**: nothing is sent, and
//!   every body is answered `503 {"error": "key_held"}` until an operator resolves it.
//!
//! These rules are pure functions in [`rules`] (the layer's), explored by the protocol model
//! (`apps/payments/model`).
//!
//! Leases are bounded by the invocation's deadline ([`Idempotency::with_deadline`]): a timed-out
//! invocation frees its key when Lambda gives up on it. Records are kept for
//! `API_DEDUP_WINDOW_SECONDS`, by default for good ([`DEFAULT_DEDUP_WINDOW`], 100 years), as
//! long as the ledger keeps the event id; Stripe's 24 hours would let DynamoDB's TTL delete the
//! body's hash, and then the key's next body would be accepted. Past a shorter window, a retry
//! of the same body is sent again (a `202`, not a replay), another body is refused as long as
//! the record has not been deleted. FIFO queues (the URL ends in `.fifo`, or
//! `PAYMENTS_QUEUE_FIFO=true`, any case) get `MessageGroupId = account_id` and
//! `MessageDeduplicationId = event_id`, each hashed ([`fifo_id`]) when over SQS's 128 characters.
//! Behind an HTTP API on a named stage the stage is stripped from the path ([`route_path`]).
//!
//! # Layout
//!
//! One concern a module, each re-exported here: `env` (the environment the function reads),
//! `caller` (the producers and the caller's principal),
//! `queue` (the SQS send and what its failure means), `request` (the route and the event a
//! request stands for), `answer` (the JSON answers) and `accept` ([`Api`]: the route, then the
//! Idempotency-Key layer around the send).
//!
//! [`PaymentEvent::parse`]: payments::PaymentEvent::parse
//! [`PaymentEvent::parse_with_event_id`]: payments::PaymentEvent::parse_with_event_id
//! [`IdempotencyKeyLayer`]: effectively_once_http::IdempotencyKeyLayer
//! [`Idempotency::with_deadline`]: effectively_once::Idempotency::with_deadline
#![warn(missing_docs)]

mod accept;
mod answer;
mod caller;
mod env;
mod queue;
mod request;

pub use crate::accept::{Api, DeployedApi};
pub use crate::answer::{accepted, error, key_held, key_reused, reply};
pub use crate::caller::{principal, Caller, Producers, API_PRODUCERS, MAX_PRODUCER};
pub use crate::env::{Env, DEFAULT_DEDUP_WINDOW, DEFAULT_MAX_BODY_BYTES};
pub use crate::queue::{fifo_id, EnqueueError, Queue, SqsQueue, MAX_FIFO_ID};
pub use crate::request::{parse, parse_event, route_path};
pub use effectively_once_http::{rules, Answer};

/// The function's name in metrics and logs.
pub const FUNCTION: &str = "payments-api";
/// The key prefix of the API's records: `api#{Idempotency-Key}` (`api#{producer}:{Idempotency-Key}`
/// with several producers).
pub const PREFIX: &str = "api";
/// The request header carrying the key.
pub const IDEMPOTENCY_KEY: &str = effectively_once_http::HEADER;
/// The answer header that marks a replay.
pub const REPLAYED: &str = effectively_once_http::REPLAYED;
/// The path the API serves.
pub const PATH: &str = "/payments";
