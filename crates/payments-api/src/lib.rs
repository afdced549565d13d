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
//! | body over `API_MAX_BODY_BYTES` (default 8 KiB) | `413 {"error": "payload_too_large", ...}`, before it is parsed |
//! | key or body missing or invalid | `400 {"error": "invalid_idempotency_key" \| "invalid_body", "message": "FIELD: ..."}` (a field named twice included) |
//!
//! The body is the payment event's fields without `event_id`: the key becomes the event id, and
//! the event is validated by [`PaymentEvent::parse`], so the API and the consumer apply one set
//! of rules. "Same body" means the same validated event (RFC 8785 canonical form: key order,
//! `1250` against `1250.0` and unknown fields do not count).
//!
//! # Built on the Idempotency-Key layer
//!
//! The key's handling is `effectively_once_http`'s [`IdempotencyLayer`], one route of it: the
//! layer bounds the body, validates the key, hashes the validated event (its fingerprint is
//! [`parse`]), claims the key's record (`api#{key}` in `IdempotencyTable`, apart from the
//! consumer's `payments#{event_id}`) **before** the message is sent, stores the `202`, and
//! replays, refuses or holds by its rules ([`rules`]). What this crate adds is the payment:
//! the route, the event's validation, and the send, whose failure says what becomes of the key.
//!
//! The record binds the key to its body: an event id names one payment in the ledger for good,
//! so two different events must never carry it (the consumer would post one and send the
//! other to the DLQ as key reuse, after the client got a `202` for it). Hence:
//!
//! - A send SQS **refused** (4xx: access denied, no such queue, an invalid request; or never
//!   sent) answers `503` and releases the record (`Disposition::Release`): nothing is on the
//!   queue, and the retry, whatever its body, starts over.
//! - A send whose outcome is **unknown** (a timeout, a dropped connection, a 5xx: it may have
//!   landed) answers `503` with `Retry-After` and leaves the record in progress until its lease
//!   ends (`Disposition::Hold`, at the invocation's deadline): retries get `409` until then;
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
//! (`tests/model`).
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
#![warn(missing_docs)]

pub use effectively_once_http::{rules, Answer};

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use effectively_once::{Config, ErrorChain, Idempotency, Store};
use effectively_once_http::{Disposition, IdempotencyKey, IdempotencyLayer};
use effectively_once_redact::redact_emails;
use lambda_http::http::request::Parts;
use lambda_http::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use lambda_http::tower::{Layer, Service};
use lambda_http::{Body, Request, RequestExt, Response};
use payments::PaymentEvent;
use serde_json::{json, Value};

/// The function's name in metrics and logs.
pub const FUNCTION: &str = "payments-api";
/// The key prefix of the API's records: `api#{Idempotency-Key}`.
pub const PREFIX: &str = "api";
/// The request header carrying the key.
pub const IDEMPOTENCY_KEY: &str = effectively_once_http::HEADER;
/// The answer header that marks a replay.
pub const REPLAYED: &str = effectively_once_http::REPLAYED;
/// How long a key's record (its body's hash and its answer) is kept, unless
/// `API_DEDUP_WINDOW_SECONDS` says otherwise: for good (100 years), because an event id is
/// unique in the ledger for good, and a record that DynamoDB's TTL has deleted can no longer
/// refuse another body under its key.
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// The largest body accepted unless `API_MAX_BODY_BYTES` says otherwise: a payment's fields take
/// a few hundred bytes; anything over 8 KiB is answered `413` before it is parsed.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024;
/// The path the API serves.
pub const PATH: &str = "/payments";

/// The environment the function reads.
#[derive(Debug, Clone)]
pub struct Env {
    /// `IDEMPOTENCY_TABLE`: the API's records, under [`PREFIX`].
    pub idempotency_table: String,
    /// `PAYMENTS_QUEUE_URL`: where payment events go.
    pub queue_url: String,
    /// `PAYMENTS_QUEUE_FIFO` (`true`/`false`, any case), else whether the URL ends in `.fifo`.
    pub fifo: bool,
    /// The dedup window from `API_DEDUP_WINDOW_SECONDS` (default [`DEFAULT_DEDUP_WINDOW`]).
    pub config: Config,
    /// `API_MAX_BODY_BYTES` (default [`DEFAULT_MAX_BODY_BYTES`]): larger bodies get `413`.
    pub max_body_bytes: usize,
}

impl Env {
    /// Reads the process environment; a missing or malformed variable is named in the error.
    pub fn from_env() -> Result<Env, String> {
        Env::from_env_with(|name| std::env::var(name).ok())
    }

    /// The same, with the variables read through `var` (`None` for unset): tests pass a map.
    pub fn from_env_with(var: impl Fn(&str) -> Option<String>) -> Result<Env, String> {
        let required = |name: &str| var(name).ok_or_else(|| format!("environment variable {name} is not set"));
        let queue_url = required("PAYMENTS_QUEUE_URL")?;
        let fifo = match var("PAYMENTS_QUEUE_FIFO").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") => queue_url.ends_with(".fifo"),
            Some("true" | "1" | "yes") => true,
            Some("false" | "0" | "no") => false,
            Some(other) => return Err(format!("PAYMENTS_QUEUE_FIFO must be true or false, is {other:?}")),
        };
        let window =
            match var("API_DEDUP_WINDOW_SECONDS") {
                None => DEFAULT_DEDUP_WINDOW,
                Some(s) => Duration::from_secs(s.trim().parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    format!("API_DEDUP_WINDOW_SECONDS must be a positive number of seconds, is {s:?}")
                })?),
            };
        let max_body_bytes = match var("API_MAX_BODY_BYTES") {
            None => DEFAULT_MAX_BODY_BYTES,
            Some(s) => s
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("API_MAX_BODY_BYTES must be a positive number of bytes, is {s:?}"))?,
        };
        Ok(Env {
            max_body_bytes,
            idempotency_table: required("IDEMPOTENCY_TABLE")?,
            queue_url,
            fifo,
            config: Config::from_env_with(&var).with_dedup_window(window),
        })
    }
}

/// Why a payment event could not be put on the queue. Built from an error alone
/// (`EnqueueError(e)`), it is **ambiguous**: the message may have landed (a timeout, a lost
/// answer), so the key keeps its payload until a retry of the same body sends again.
/// [`EnqueueError::refused`] is a definite refusal (access denied, no such queue, an invalid
/// request): nothing was sent, and the key's record is released.
#[derive(Debug)]
pub struct EnqueueError(pub Box<dyn std::error::Error + Send + Sync>);

/// The cause of a definite refusal, inside an [`EnqueueError`].
#[derive(Debug)]
struct Refused(Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused: {}", ErrorChain(&*self.0))
    }
}

impl std::error::Error for Refused {}

impl EnqueueError {
    /// A definite refusal: the queue answered, and the message is not on it.
    pub fn refused(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        EnqueueError(Box::new(Refused(cause.into())))
    }

    /// Whether the message is known not to be on the queue ([`EnqueueError::refused`]);
    /// otherwise it may have landed.
    pub fn is_refused(&self) -> bool {
        self.0.is::<Refused>()
    }
}

impl std::fmt::Display for EnqueueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "could not enqueue the payment event: {}", ErrorChain(&*self.0))
    }
}

impl std::error::Error for EnqueueError {}

/// The longest `MessageDeduplicationId` and `MessageGroupId` SQS takes.
pub const MAX_FIFO_ID: usize = 128;

/// A FIFO queue's id for `value` (an event id or an account id, up to 200 characters by the
/// contract): the value itself when it fits SQS's 128 characters, else the lower-case hex
/// SHA-256 of it (64 characters). Deterministic, so a resend carries the same ids; the
/// contract's characters are all allowed in these ids.
pub fn fifo_id(value: &str) -> String {
    use sha2::{Digest, Sha256};
    if value.len() <= MAX_FIFO_ID {
        return value.to_owned();
    }
    Sha256::digest(value.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Where accepted payment events go: [`SqsQueue`], or a test's wrapper around it.
pub trait Queue: Send + Sync {
    /// Sends one event.
    fn send(&self, event: &PaymentEvent) -> impl Future<Output = Result<(), EnqueueError>> + Send;
}

impl<Q: Queue + ?Sized> Queue for std::sync::Arc<Q> {
    fn send(&self, event: &PaymentEvent) -> impl Future<Output = Result<(), EnqueueError>> + Send {
        (**self).send(event)
    }
}

/// The payments queue on SQS, standard or FIFO.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    url: String,
    fifo: bool,
}

impl SqsQueue {
    /// The queue at `url`; `fifo` adds the message group (the account) and the deduplication id
    /// (the event id), each through [`fifo_id`].
    ///
    /// Each send is one attempt: the client's retries are turned off here. A refusal must mean
    /// that nothing landed, since it releases a free key ([`rules::on_failure`]); with the
    /// SDK's retries, an attempt that may have landed (a 500, a timeout) followed by a refused
    /// one (throttled) would read as a refusal, and the key would be freed for another body
    /// while the first may be on the queue. The caller retries instead (a `503`).
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>, fifo: bool) -> Self {
        let once = client.config().to_builder().retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled());
        SqsQueue { client: aws_sdk_sqs::Client::from_conf(once.build()), url: url.into(), fifo }
    }
}

impl Queue for SqsQueue {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        let body = serde_json::to_string(event).map_err(|e| EnqueueError(e.into()))?;
        let mut request = self.client.send_message().queue_url(&self.url).message_body(body);
        if self.fifo {
            // Per-account order, as the consumer's FIFO mode expects; SQS drops a copy of the
            // same event id within its 5-minute window, the consumer's record any later one.
            request =
                request.message_group_id(fifo_id(&event.account_id)).message_deduplication_id(fifo_id(&event.event_id));
        }
        request.send().await.map(drop).map_err(|e| {
            use aws_sdk_sqs::error::SdkError;
            // Refused for sure: never sent, or SQS answered 4xx (access denied, no such queue,
            // invalid parameter, throttled). A timeout, a dropped connection, an unreadable
            // answer or a 5xx may hide a message that landed.
            let refused = match &e {
                SdkError::ConstructionFailure(_) => true,
                SdkError::ServiceError(service) => service.raw().status().is_client_error(),
                _ => false,
            };
            if refused {
                EnqueueError::refused(e)
            } else {
                EnqueueError(e.into())
            }
        })
    }
}

/// The handler: the route, then the Idempotency-Key layer around the send.
#[derive(Debug, Clone)]
pub struct Api<S, Q> {
    layer: IdempotencyLayer<S>,
    queue: Arc<Q>,
}

/// The API as deployed: records in DynamoDB, events on SQS.
pub type DeployedApi = Api<effectively_once_dynamodb::DynamoDbStore, SqsQueue>;

impl DeployedApi {
    /// The API on the table and queue `env` names.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Self {
        let store =
            effectively_once_dynamodb::DynamoDbStore::new(aws_sdk_dynamodb::Client::new(sdk), &env.idempotency_table);
        let queue = SqsQueue::new(aws_sdk_sqs::Client::new(sdk), &env.queue_url, env.fifo);
        Api::new(Idempotency::new(store, env.config.clone()), queue).with_max_body_bytes(env.max_body_bytes)
    }
}

impl<S: Store, Q: Queue + 'static> Api<S, Q> {
    /// The API over its records and its queue: `POST` keyed under [`PREFIX`], the validated
    /// event as the payload ([`parse_event`]), the `202` stored, leases ending at the
    /// invocation's deadline.
    pub fn new(idempotency: Idempotency<S>, queue: Q) -> Self {
        let layer = IdempotencyLayer::new(idempotency, PREFIX)
            .methods([Method::POST])
            .store_status(|status| status == StatusCode::ACCEPTED)
            .fingerprint(fingerprint)
            .max_body_bytes(DEFAULT_MAX_BODY_BYTES)
            .lambda_deadline();
        Api { layer, queue: Arc::new(queue) }
    }

    /// The same API, answering `413` to a body over `bytes` before it is parsed.
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.layer = self.layer.max_body_bytes(bytes);
        self
    }

    /// The queue.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// Answers one request. Never fails: every outcome is an HTTP answer (a store or queue
    /// outage is a `503` with `Retry-After`).
    pub async fn handle(&self, request: Request) -> Response<Body> {
        let path = route_path(&request);
        if path != PATH {
            return reply(error(StatusCode::NOT_FOUND, "not_found", format!("no route {path}")));
        }
        if request.method() != Method::POST {
            let mut response = reply(error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "use POST"));
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
            return response;
        }
        let service = self.layer.layer(Enqueue { queue: self.queue.clone() });
        match service.handle(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// The handler behind the layer: sends the event [`fingerprint`] left in the request, and says
/// what becomes of the key when the send fails.
struct Enqueue<Q> {
    queue: Arc<Q>,
}

impl<Q> Clone for Enqueue<Q> {
    fn clone(&self) -> Self {
        Enqueue { queue: self.queue.clone() }
    }
}

impl<Q: Queue + 'static> Service<Request> for Enqueue<Q> {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let queue = self.queue.clone();
        Box::pin(async move { Ok(send(&*queue, request).await) })
    }
}

/// Sends the request's event: `202`, stored; or `503`, the key released when SQS refused the
/// send for sure, held until its lease ends when the send may have landed.
async fn send<Q: Queue>(queue: &Q, request: Request) -> Response<Body> {
    let Some(event) = request.extensions().get::<PaymentEvent>() else {
        tracing::error!("no payment event in the request: the layer's fingerprint did not run");
        return reply(error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "the request was not parsed"));
    };
    match queue.send(event).await {
        Ok(()) => {
            tracing::info!(?event, "enqueued");
            reply(accepted(event))
        }
        Err(e) => {
            let mut response = unavailable(&event.event_id, &e);
            // Refused: nothing is on the queue, the retry (any body) starts over. Otherwise the
            // event may be on the queue: the key keeps this body until its lease ends, and the
            // layer answers Retry-After with the lease's seconds.
            let disposition = if e.is_refused() { Disposition::Release } else { Disposition::Hold };
            response.extensions_mut().insert(disposition);
            response
        }
    }
}

/// The layer's fingerprint: the event the request stands for ([`parse_event`] of the scoped
/// key and the body), left in the request's extensions for the send, and hashed as the
/// payload, so "same body" means the same validated event.
fn fingerprint(key: &IdempotencyKey, parts: &mut Parts, body: &bytes::Bytes) -> Result<Value, Answer> {
    let text = std::str::from_utf8(body)
        .map_err(|_| error(StatusCode::BAD_REQUEST, "invalid_body", "body: must be UTF-8 JSON"))?;
    let event = parse_event(key.scoped(), text)?;
    let payload = serde_json::to_value(&event).map_err(|_| {
        error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "the payment event could not be hashed")
    })?;
    parts.extensions.insert(event);
    Ok(payload)
}

/// The event a request stands for: the body's fields and the key as `event_id`, validated by
/// [`PaymentEvent::parse`]. A refusal names the field (`Idempotency-Key` for the key).
pub fn parse(headers: &HeaderMap, body: &Body) -> Result<PaymentEvent, Answer> {
    let key_error = |message: String| error(StatusCode::BAD_REQUEST, "invalid_idempotency_key", message);
    let body_error = |message: String| error(StatusCode::BAD_REQUEST, "invalid_body", message);
    let key = match headers.get(IDEMPOTENCY_KEY).map(HeaderValue::to_str) {
        None => return Err(key_error("Idempotency-Key: the header is required".into())),
        Some(Err(_)) => return Err(key_error("Idempotency-Key: must be ASCII".into())),
        Some(Ok(key)) => key,
    };
    let text = match body {
        Body::Empty => "",
        Body::Text(text) => text.as_str(),
        Body::Binary(bytes) => std::str::from_utf8(bytes).map_err(|_| body_error("body: must be UTF-8 JSON".into()))?,
        _ => "",
    };
    parse_event(key, text)
}

/// The event of `event_id` (the key, within its caller's scope) and a body's text, validated
/// by [`PaymentEvent::parse`]; a refusal names the field (`Idempotency-Key` for the event id).
pub fn parse_event(event_id: &str, text: &str) -> Result<PaymentEvent, Answer> {
    let key_error = |message: String| error(StatusCode::BAD_REQUEST, "invalid_idempotency_key", message);
    let body_error = |message: String| error(StatusCode::BAD_REQUEST, "invalid_body", message);
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) if fields.contains_key("event_id") => {
            return Err(body_error(
                "event_id: not allowed in the body; the Idempotency-Key header is the event id".into(),
            ))
        }
        Ok(Value::Object(_)) => {}
        _ => return Err(body_error("body: must be a JSON object with the payment's fields".into())),
    }
    // Spliced as text, not re-serialised: the amount is judged on the digits the client sent.
    let rest = text.trim_start().strip_prefix('{').unwrap_or_default();
    let comma = if rest.trim_start().starts_with('}') { "" } else { "," };
    let key_json = serde_json::to_string(event_id).unwrap_or_default();
    PaymentEvent::parse(&format!("{{\"event_id\":{key_json}{comma}{rest}")).map_err(|invalid| match invalid.field {
        Some("event_id") => key_error(format!("Idempotency-Key: {}", invalid.problem)),
        Some(field) => body_error(format!("{field}: {}", invalid.problem)),
        None => body_error(format!("body: {}", invalid.problem)),
    })
}

/// `202 {"event_id": KEY}`: the event is on the queue.
pub fn accepted(event: &PaymentEvent) -> Answer {
    Answer::json(StatusCode::ACCEPTED, &json!({ "event_id": event.event_id }))
}

/// `422`: the key is bound to another body (the layer's refusal).
pub fn key_reused(event: &PaymentEvent) -> Answer {
    Answer::key_reused(&event.event_id)
}

/// `503 key_held`, stored for good: the key's claim replaced a record that could not be read,
/// which may be another body's send ([`rules::OnClaim::Hold`]).
pub fn key_held(event: &PaymentEvent) -> Answer {
    Answer::key_held(&event.event_id)
}

/// The request's path without an API Gateway stage: an HTTP API on a named stage (`prod`)
/// sends `/prod/payments`, and `lambda_http` keeps the stage unless
/// `AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH` is set (then the path has none, and is kept). A
/// Function URL's stage, like the HTTP API's default one, is `$default`, never in the path.
pub fn route_path(request: &Request) -> &str {
    use lambda_http::request::RequestContext;
    let path = request.uri().path();
    #[allow(unreachable_patterns)] // one variant or several, as the workspace's features unify
    let stage = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(context)) => context.stage.as_deref(),
        _ => None,
    };
    match stage {
        Some(stage) if stage != "$default" && !stage.is_empty() => path
            .strip_prefix('/')
            .and_then(|rest| rest.strip_prefix(stage))
            .filter(|rest| rest.starts_with('/'))
            .unwrap_or(path),
        _ => path,
    }
}

/// An error answer, `{"error": CODE, "message": TEXT}`.
pub fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Answer {
    Answer::error(status, code, message)
}

/// `503` with `Retry-After: 1`: the queue failed; a retry starts over, or waits for the key's
/// lease where the layer holds it (it then sets `Retry-After` to the lease's seconds).
fn unavailable(event_id: &str, cause: &(dyn std::error::Error + 'static)) -> Response<Body> {
    tracing::warn!(event_id, error = %redact_emails(&ErrorChain(cause).to_string()), "unavailable");
    let mut response = reply(error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "try again"));
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The HTTP response of an answer.
pub fn reply(answer: Answer) -> Response<Body> {
    answer.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(key: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(key) = key {
            headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_str(key).unwrap());
        }
        headers
    }

    fn refusal(key: Option<&str>, body: &str) -> (u16, String, String) {
        let answer = parse(&headers(key), &Body::Text(body.into())).unwrap_err();
        let body = answer.json_body().unwrap();
        (answer.status, body["error"].as_str().unwrap().into(), body["message"].as_str().unwrap().into())
    }

    const BODY: &str = r#"{"account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}"#;

    #[test]
    fn the_key_becomes_the_event_id() {
        let event = parse(&headers(Some("pay_0001")), &Body::Text(BODY.into())).unwrap();
        assert_eq!((event.event_id.as_str(), event.amount_cents), ("pay_0001", 1250));
        let empty = parse(&headers(Some("k")), &Body::Text("{}".into())).unwrap_err();
        assert!(empty.json_body().unwrap()["message"].as_str().unwrap().starts_with("account_id:"), "{empty:?}");
    }

    #[test]
    fn refusals_name_the_field() {
        let (status, code, message) = refusal(None, BODY);
        assert_eq!((status, code.as_str()), (400, "invalid_idempotency_key"));
        assert!(message.starts_with("Idempotency-Key:"), "{message}");
        let (_, code, message) = refusal(Some("pay 1"), BODY);
        assert_eq!(code, "invalid_idempotency_key");
        assert!(message.starts_with("Idempotency-Key: has the character ' '"), "{message}");
        let (_, code, message) = refusal(Some("k"), r#"{"account_id": "a", "amount_cents": 0, "currency": "USD"}"#);
        assert_eq!((code.as_str(), message.as_str()), ("invalid_body", "amount_cents: must not be zero"));
        let (_, _, message) = refusal(Some("k"), "[1]");
        assert!(message.starts_with("body:"), "{message}");
        let (_, _, message) =
            refusal(Some("k"), r#"{"event_id": "x", "account_id": "a", "amount_cents": 1, "currency": "USD"}"#);
        assert!(message.starts_with("event_id:"), "{message}");
    }

    #[test]
    fn env_reads_the_window_and_the_queue_type() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        let env =
            Env::from_env_with(vars(&[("IDEMPOTENCY_TABLE", "t"), ("PAYMENTS_QUEUE_URL", "http://q/p.fifo")])).unwrap();
        assert!(env.fifo);
        assert_eq!(env.config.dedup_window(), DEFAULT_DEDUP_WINDOW);
        let env = Env::from_env_with(vars(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("PAYMENTS_QUEUE_URL", "http://q/p"),
            ("API_DEDUP_WINDOW_SECONDS", "60"),
        ]))
        .unwrap();
        assert!(!env.fifo);
        assert_eq!(env.config.dedup_window(), Duration::from_secs(60));
        assert!(Env::from_env_with(vars(&[("IDEMPOTENCY_TABLE", "t")])).unwrap_err().contains("PAYMENTS_QUEUE_URL"));
        for (value, fifo) in [("TRUE", true), ("True", true), (" yes ", true), ("FALSE", false), ("No", false)] {
            let env = Env::from_env_with(|name: &str| match name {
                "IDEMPOTENCY_TABLE" => Some("t".into()),
                "PAYMENTS_QUEUE_URL" => Some("http://q/p".into()),
                "PAYMENTS_QUEUE_FIFO" => Some(value.into()),
                _ => None,
            });
            assert_eq!(env.unwrap().fifo, fifo, "{value}");
        }
    }

    /// A body over the limit is refused before it is parsed: a 2 MB unknown field is never
    /// hashed nor sent.
    #[tokio::test]
    async fn a_body_over_the_limit_is_413_before_it_is_parsed() {
        let api =
            Api::new(Idempotency::new(effectively_once::InMemoryStore::new(), Config::default()), Counting::default());
        let mut event: Value = serde_json::from_str(include_str!("../../../events/http-payment.json")).unwrap();
        let padding = "x".repeat(2 * 1024 * 1024);
        event["body"] =
            json!(format!(r#"{{"account_id": "a", "amount_cents": 1, "currency": "USD", "pad": "{padding}"}}"#));
        let response = api.handle(lambda_http::request::from_str(&event.to_string()).unwrap()).await;
        assert_eq!(response.status().as_u16(), 413);
        let Body::Text(text) = response.body() else { panic!("a text body") };
        assert!(text.contains("payload_too_large"), "{text}");
        assert_eq!(api.queue().0.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing sent");
        let small = api.with_max_body_bytes(16);
        let request = lambda_http::request::from_str(include_str!("../../../events/http-payment.json")).unwrap();
        assert_eq!(small.handle(request).await.status().as_u16(), 413, "the limit is configurable");
    }

    #[test]
    fn fifo_ids_keep_what_fits_and_hash_the_rest() {
        let fits = format!("pay_{}", "k".repeat(124));
        assert_eq!(fifo_id(&fits), fits, "128 characters are kept as they are");
        let long = format!("pay_{}", "k".repeat(125));
        let hashed = fifo_id(&long);
        assert_eq!(hashed.len(), 64);
        assert!(hashed.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{hashed}");
        assert_eq!(fifo_id(&long), hashed, "deterministic: a resend carries the same id");
        assert_ne!(fifo_id(&format!("{long}x")), hashed);
    }

    #[test]
    fn a_named_stage_is_stripped_from_the_path() {
        let event = |path: &str, stage: &str| {
            let mut event: Value =
                serde_json::from_str(include_str!("../../../events/apigw-http-payment.json")).unwrap();
            event["rawPath"] = json!(path);
            event["requestContext"]["stage"] = json!(stage);
            lambda_http::request::from_str(&event.to_string()).unwrap()
        };
        assert_eq!(route_path(&event("/prod/payments", "prod")), "/payments");
        assert_eq!(route_path(&event("/payments", "prod")), "/payments", "already stripped (IGNORE_STAGE_IN_PATH)");
        assert_eq!(route_path(&event("/payments", "$default")), "/payments");
        assert_eq!(route_path(&event("/production/payments", "prod")), "/production/payments");
    }

    /// A queue that counts what it is sent.
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    impl Queue for Counting {
        async fn send(&self, _event: &PaymentEvent) -> Result<(), EnqueueError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
    }

    /// The sample events in `events/`, as Lambda delivers them, in their order: first request,
    /// replay, key reuse, missing key; and the HTTP API's, on its default stage and on `prod`.
    #[tokio::test]
    async fn the_sample_events_answer_as_documented() {
        let api =
            Api::new(Idempotency::new(effectively_once::InMemoryStore::new(), Config::default()), Counting::default());
        let samples = [
            (include_str!("../../../events/http-payment.json"), 202, None, None),
            (include_str!("../../../events/http-payment-replay.json"), 202, Some("true"), None),
            (include_str!("../../../events/http-key-reuse.json"), 422, None, Some("idempotency_key_reused")),
            (include_str!("../../../events/http-missing-key.json"), 400, None, Some("invalid_idempotency_key")),
            (include_str!("../../../events/apigw-http-payment.json"), 202, None, None),
            (include_str!("../../../events/apigw-http-payment-stage.json"), 202, None, None),
        ];
        for (i, (event, status, replayed, code)) in samples.into_iter().enumerate() {
            let request = lambda_http::request::from_str(event).unwrap();
            let response = api.handle(request).await;
            assert_eq!(response.status().as_u16(), status, "sample {i}");
            assert_eq!(response.headers().get(REPLAYED).map(|v| v.to_str().unwrap()), replayed, "sample {i}");
            let Body::Text(text) = response.body() else { panic!("a text body") };
            let body: Value = serde_json::from_str(text).unwrap();
            match code {
                Some(code) => assert_eq!(body["error"], code, "sample {i}"),
                None => assert!(body["event_id"].as_str().unwrap().starts_with("pay_http_"), "sample {i}"),
            }
        }
        assert_eq!(api.queue().0.load(std::sync::atomic::Ordering::SeqCst), 3, "three first requests sent");
    }
}
