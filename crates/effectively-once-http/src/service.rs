//! [`IdempotencyKeyService`]: the service the layer makes. It bounds and reads the body, validates the key,
//! claims it, runs the handler and stores its answer; or replays, or refuses.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use effectively_once::{Attempt, Begin, ErrorChain, ErrorKind, Idempotency, Lookup, Replaced, Retry, Store};
use effectively_once_redact::redact_emails;
use http::request::Parts;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::Value;
use tower_service::Service;

use crate::answer::{body_of, Answer, IN_PROGRESS, LEASE_ENDED, PAYLOAD_TOO_LARGE, RESPONSE_TOO_LARGE, UNAVAILABLE};
use crate::body::ResponseBody;
use crate::key::{scope_name, IdempotencyKey};
use crate::layer::Shared;
use crate::rules::{self, OnClaim, OnFailure, OnReused};

/// The response header that marks a replay.
pub const REPLAYED: &str = "idempotent-replayed";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What becomes of a key after the handler's answer, when the handler says so in the
/// response's extensions; without it, [`IdempotencyKeyLayer::store_status`](crate::IdempotencyKeyLayer::store_status)
/// decides between `Store` and `Release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAnswer {
    /// Store the answer: retries of the same body are answered it.
    Store,
    /// Nothing was done: free the key, so a retry (any body) runs again. On a key taken over
    /// from an attempt that may have done something, the key is held instead ([`rules::on_failure`]).
    Release,
    /// The effect may have happened (a timeout downstream): keep the key in progress until its
    /// lease ends (retries get `409`), then let the same body run again; the answer gets a
    /// `Retry-After` of the lease's remaining seconds.
    Hold,
}

/// A service with `Idempotency-Key` semantics, made by [`IdempotencyKeyLayer`](crate::IdempotencyKeyLayer).
pub struct IdempotencyKeyService<Svc, S> {
    pub(crate) inner: Svc,
    pub(crate) shared: Arc<Shared<S>>,
}

impl<Svc: Clone, S> Clone for IdempotencyKeyService<Svc, S> {
    fn clone(&self) -> Self {
        IdempotencyKeyService { inner: self.inner.clone(), shared: self.shared.clone() }
    }
}

impl<Svc: std::fmt::Debug, S> std::fmt::Debug for IdempotencyKeyService<Svc, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyKeyService")
            .field("inner", &self.inner)
            .field("prefix", &self.shared.prefix)
            .finish()
    }
}

impl<Svc, S> IdempotencyKeyService<Svc, S> {
    /// Answers one request, as `ServiceExt::oneshot` would, without the boxing the
    /// [`Service`] impl needs (which asks for `'static` types): for a caller that owns the
    /// service (a handler that builds it per request) or whose store type is a generic
    /// parameter.
    pub async fn handle<ReqB, ResB>(mut self, request: Request<ReqB>) -> Result<Response<ResB>, Svc::Error>
    where
        Svc: Service<Request<ReqB>, Response = Response<ResB>>,
        S: Store,
        ReqB: Body + From<String> + From<Vec<u8>>,
        ReqB::Error: Into<BoxError>,
        ResB: ResponseBody,
        ResB::Error: Into<BoxError>,
    {
        std::future::poll_fn(|cx| self.inner.poll_ready(cx)).await?;
        if !self.shared.methods.contains(request.method()) {
            return self.inner.call(request).await;
        }
        Flow { inner: self.inner, shared: self.shared, body: PhantomData }.handle(request).await
    }
}

impl<Svc, S, ReqB, ResB> Service<Request<ReqB>> for IdempotencyKeyService<Svc, S>
where
    Svc: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    Svc::Future: Send,
    Svc::Error: Send,
    S: Store + 'static,
    ReqB: Body + From<String> + From<Vec<u8>> + Send + 'static,
    ReqB::Data: Send,
    ReqB::Error: Into<BoxError>,
    ResB: ResponseBody + Send + 'static,
    ResB::Data: Send,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<ResB>;
    type Error = Svc::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResB>, Svc::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // The service polled ready goes with this request; a fresh clone stays for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        if !shared.methods.contains(request.method()) {
            let mut inner = inner;
            return Box::pin(inner.call(request));
        }
        Box::pin(async move { Flow { inner, shared, body: PhantomData }.handle(request).await })
    }
}

/// One keyed request.
struct Flow<Svc, S, ReqB, ResB> {
    inner: Svc,
    shared: Arc<Shared<S>>,
    body: PhantomData<fn(ReqB) -> ResB>,
}

/// A request ready to claim: its key, its parts (with the key in their extensions), its body.
struct Prepared {
    key: IdempotencyKey,
    parts: Parts,
    body: Bytes,
    payload: Value,
}

impl<Svc, S, ReqB, ResB> Flow<Svc, S, ReqB, ResB>
where
    Svc: Service<Request<ReqB>, Response = Response<ResB>>,
    S: Store,
    ReqB: Body + From<String> + From<Vec<u8>>,
    ReqB::Error: Into<BoxError>,
    ResB: ResponseBody,
    ResB::Error: Into<BoxError>,
{
    async fn handle(self, request: Request<ReqB>) -> Result<Response<ResB>, Svc::Error> {
        let prepared = match self.shared.prepare(request).await {
            Ok(prepared) => prepared,
            Err(refusal) => return Ok(refusal.into_response()),
        };
        let deadline_ms = self.shared.deadline.as_ref().and_then(|deadline| deadline(&prepared.parts));
        let idempotency = self.shared.idempotency.with_deadline(deadline_ms);
        let record_key = prepared.key.record_key().clone();
        let attempt = match idempotency.begin::<_, Answer>(&record_key, &prepared.payload).await {
            Ok(Begin::Claimed(attempt)) => attempt,
            Ok(Begin::Replayed(answer)) => {
                tracing::info!(key = %record_key, status = answer.status, "replayed");
                let mut response = answer.into_response::<ResB>();
                response.headers_mut().insert(REPLAYED, HeaderValue::from_static("true"));
                return Ok(response);
            }
            Err(e) if e.kind() == ErrorKind::KeyReused => return self.reused(prepared).await,
            Err(e) if e.kind() == ErrorKind::InProgress => return Ok(self.shared.in_progress(&prepared.key).await),
            Err(e) if e.retry() == Retry::Now => return Ok(unavailable(&record_key, &e)),
            // The handler answered, too large to keep: its work is done and is not run again.
            Err(e) if e.kind() == ErrorKind::ResponseTooLarge => {
                let message = "the answer to this request was too large to keep, and is not repeated";
                return Ok(
                    Answer::error(StatusCode::INTERNAL_SERVER_ERROR, RESPONSE_TOO_LARGE, message).into_response()
                );
            }
            Err(e) => {
                // A malformed record or a store that refuses for good: retrying will not help.
                tracing::error!(key = %record_key, error = %redact_emails(&ErrorChain(&e).to_string()), "idempotency store failed");
                let answer = Answer::error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    "the request could not be recorded",
                );
                return Ok(answer.into_response());
            }
        };
        if *attempt.what_it_replaced() == Replaced::Nothing {
            // A free key, the common case: nothing to compare, so no second hash of the body.
            return self.run(&idempotency, attempt, prepared).await;
        }
        let hash = match idempotency.config().payload_hash(&prepared.payload) {
            Ok(hash) => hash,
            Err(e) => return Ok(unavailable(&record_key, &e)),
        };
        let answer = match rules::on_claim(attempt.what_it_replaced(), &hash) {
            OnClaim::Run => return self.run(&idempotency, attempt, prepared).await,
            // The claim overwrote a record that binds the key to another body whose effect may
            // have happened (in progress past its lease, or answered past its window). The
            // refusal is not stored: this attempt is left in progress, as a crash leaves it,
            // so until its lease ends retries of either body get `409`, and after it the next
            // claim replaces it as part of a run of takeovers that began with the other body's
            // record: that body's retry takes the key over under the store's conditional write
            // and runs once, its answer stored; this body is refused again.
            OnClaim::Refuse { held_for: Some(_) } => {
                tracing::info!(key = %record_key, "the key is held for another body: refused, not stored");
                drop(attempt);
                return Ok(Answer::key_reused(prepared.key.key()).into_response());
            }
            // The key is another body's for good (nothing of it may have happened), or refused
            // this one before: the refusal is stored with this body, so its retries replay it
            // and a later claim over it finds the refusal again.
            OnClaim::Refuse { held_for: None } => Answer::key_reused(prepared.key.key()),
            OnClaim::Hold => {
                tracing::error!(key = %record_key, "claimed over a record that could not be read: the key is held");
                Answer::key_held(prepared.key.key())
            }
        };
        if let Err(e) = idempotency.complete(attempt, &answer).await {
            tracing::warn!(key = %record_key, error = %redact_emails(&ErrorChain(&e).to_string()), "answer not stored");
        }
        Ok(answer.into_response())
    }

    /// Runs the handler under the key `attempt` holds, within its lease, then stores its
    /// answer, releases the key or holds it, as the answer's [`OnAnswer`] says.
    ///
    /// The handler, and the reading of an answer to store, are cut off when the lease ends, as
    /// `Idempotency::run` cuts a handler off: after it, a retry may take the key over and run,
    /// so an attempt past its lease must do nothing more. The cut-off request is answered `503
    /// lease_ended` with `Retry-After: 1` and nothing is stored; the record stays in progress,
    /// as a crash leaves it, and the retry takes it over at once.
    async fn run(
        mut self,
        idempotency: &Idempotency<S>,
        attempt: Attempt,
        prepared: Prepared,
    ) -> Result<Response<ResB>, Svc::Error> {
        let record_key = prepared.key.record_key().clone();
        let lease_end_ms = run_until_ms(idempotency, &attempt);
        let request = Request::from_parts(prepared.parts, body_of::<ReqB>(prepared.body));
        let called = idempotency.within_lease(lease_end_ms, self.inner.call(request)).await;
        let response = match called {
            None => return Ok(lease_ended(&record_key)),
            Some(Ok(response)) => response,
            Some(Err(e)) => {
                // No answer to store: as a crash would, unless nothing was done for sure.
                Shared::settle(idempotency, attempt, OnAnswer::Hold, &record_key).await;
                return Err(e);
            }
        };
        let disposition = response.extensions().get::<OnAnswer>().copied().unwrap_or_else(|| {
            if (self.shared.stored)(response.status()) {
                OnAnswer::Store
            } else if response.status().is_server_error() {
                // A 5xx may come after the handler did its work (axum answers a handler's
                // failure, or a caught panic, as a 500, never an `Err`): held as a crash is, so
                // no other body runs under the key, and this body's retry takes over after the
                // lease.
                OnAnswer::Hold
            } else {
                // A 4xx not stored: the request was refused before any effect (a framework's
                // extractor, the handler's validation). The corrected retry runs.
                OnAnswer::Release
            }
        });
        if disposition != OnAnswer::Store {
            let seconds = Shared::settle(idempotency, attempt, disposition, &record_key).await;
            let mut response = response;
            if let Some(seconds) = seconds {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            return Ok(response);
        }
        let (parts, mut body) = response.into_parts();
        // Never more than the largest answer stored, and one byte to know it is larger.
        let limit = idempotency.config().max_response_bytes().saturating_add(1);
        let read = idempotency.within_lease(lease_end_ms, read_prefix(&mut body, limit)).await;
        let (prefix, ended) = match read {
            None => return Ok(lease_ended(&record_key)),
            Some(Ok(read)) => read,
            Some(Err(e)) => {
                tracing::error!(key = %record_key, error = %redact_emails(&ErrorChain(&*e).to_string()), "the handler's answer could not be read; the key is held");
                Shared::settle(idempotency, attempt, OnAnswer::Hold, &record_key).await;
                let answer = Answer::error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "the answer was lost");
                return Ok(answer.into_response());
            }
        };
        let answer = Answer::of(parts.status, &parts.headers, &prefix, &self.shared.headers);
        match idempotency.complete(attempt, &answer).await {
            Ok(()) => tracing::info!(key = %record_key, status = parts.status.as_u16(), "answered and stored"),
            // Over the largest answer stored: the core completes the record without it (the
            // handler's work is done and must not run again), and retries get `500
            // response_too_large`; this answer goes out whole, the rest of it streamed.
            Err(e) if e.kind() == ErrorKind::ResponseTooLarge => {
                tracing::warn!(key = %record_key, status = parts.status.as_u16(), "answered; too large to store, completed without it");
            }
            // The handler has done its work, so its answer goes out all the same. Retries meet
            // the record in progress until its lease ends, then run again.
            Err(e) => {
                tracing::warn!(key = %record_key, error = %redact_emails(&ErrorChain(&e).to_string()), "answered, answer not stored")
            }
        }
        let body = if ended { body_of(prefix) } else { ResB::prepend(prefix, body) };
        Ok(Response::from_parts(parts, body))
    }

    /// The key is bound to another body: `422`, unless its record is a refusal stored over this
    /// body's attempt whose outcome was unknown ([`Answer::held_for`], written by earlier
    /// versions): the key is this body's, but only a claim may run it, and the store lets one
    /// replace that record once its window ends; `409` with `Retry-After` until then. One
    /// read, on this rare path only.
    async fn reused(self, prepared: Prepared) -> Result<Response<ResB>, Svc::Error> {
        let key = &prepared.key;
        let store = self.shared.idempotency.store();
        let record = Store::get(store, key.record_key().as_str()).await.ok().flatten();
        let rule = match self.shared.idempotency.config().payload_hash(&prepared.payload) {
            Ok(hash) => rules::on_reused(record.as_ref(), &hash),
            Err(_) => OnReused::Refuse,
        };
        match rule {
            OnReused::Refuse => Ok(Answer::key_reused(key.key()).into_response()),
            OnReused::Held => Ok(Answer::key_held(key.key()).into_response()),
            OnReused::InProgress => Ok(self.shared.in_progress(key).await),
            OnReused::WaitForWindow => {
                let now_s = self.shared.idempotency.config().now_ms() / 1000;
                let window_end_s = record.map_or(now_s, |record| record.expiration_s);
                let seconds = window_end_s.saturating_sub(now_s).saturating_add(1);
                tracing::info!(key = %key.record_key(), seconds, "the key is held for this body behind a stored refusal");
                let message = format!(
                    "Idempotency-Key {} is held for this request; retry after the refusal stored for another body ends",
                    key.key()
                );
                let mut response = Answer::error(StatusCode::CONFLICT, IN_PROGRESS, message).into_response::<ResB>();
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                Ok(response)
            }
        }
    }
}

impl<S: Store> Shared<S> {
    /// Scope, key, body within its bound, fingerprint; or the refusal, before anything is
    /// stored.
    async fn prepare<ReqB>(&self, request: Request<ReqB>) -> Result<Prepared, Answer>
    where
        ReqB: Body,
        ReqB::Error: Into<BoxError>,
    {
        let shared = self;
        let (mut parts, body) = request.into_parts();
        let max = shared.max_body_bytes;
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
            .unwrap_or(0)
            .max(body.size_hint().lower());
        if declared > max as u64 {
            return Err(too_large(max));
        }
        let scope = shared.scope.scope(&parts)?.map(|scope| scope_name(&scope));
        let key = IdempotencyKey::in_layer(&parts.headers, &shared.prefix, scope, shared.scoped)?;
        // Bounded as it is read: a body that says nothing of its length is cut off at the limit.
        let collected = Limited::new(body, max).collect().await;
        let body = match collected {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<LengthLimitError>() => return Err(too_large(max)),
            Err(_) => return Err(Answer::error(StatusCode::BAD_REQUEST, "invalid_body", "body: could not be read")),
        };
        parts.extensions.insert(key.clone());
        let payload = shared.fingerprint.fingerprint(&key, &mut parts, &body)?;
        Ok(Prepared { key, parts, body, payload })
    }

    /// Releases or holds the key of an answer not stored; `Some(seconds)` to the lease's end
    /// when it is held.
    async fn settle(
        idempotency: &Idempotency<S>,
        attempt: Attempt,
        disposition: OnAnswer,
        record_key: &effectively_once::Key,
    ) -> Option<u64> {
        match rules::on_failure(disposition == OnAnswer::Release, attempt.what_it_replaced()) {
            OnFailure::Release => {
                if let Err(e) = idempotency.release(attempt).await {
                    tracing::warn!(key = %record_key, error = %redact_emails(&ErrorChain(&e).to_string()), "release failed; the key waits for its lease");
                }
                None
            }
            // Held until the lease ends (at the invocation's deadline): retries get `409` with
            // `Retry-After` until then; after it the same body takes the key over and runs
            // again, and another body is refused. Not completed with a pending answer: a retry
            // could then never store its own.
            OnFailure::Hold => {
                let now_ms = idempotency.config().now_ms();
                tracing::warn!(key = %record_key, "outcome unknown; the key is held until its lease ends");
                Some(attempt.lease_expires_at_ms().saturating_sub(now_ms).div_ceil(1000).max(1))
            }
        }
    }

    /// `409` with `Retry-After`: the seconds until the holder's lease ends (at least one).
    async fn in_progress<ResB: From<String> + From<Vec<u8>>>(&self, key: &IdempotencyKey) -> Response<ResB> {
        let idempotency = &self.idempotency;
        let now_ms = idempotency.config().now_ms();
        let seconds = match idempotency.get::<Answer>(key.record_key()).await {
            Ok(Lookup::InProgress { lease_expires_at_ms }) => lease_expires_at_ms.saturating_sub(now_ms).div_ceil(1000),
            _ => 1,
        }
        .max(1);
        let message = format!("a request with Idempotency-Key {} is in progress", key.key());
        let mut response = Answer::error(StatusCode::CONFLICT, IN_PROGRESS, message).into_response::<ResB>();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        response
    }
}

/// Reads `body` until it ends or `limit` bytes are read: the bytes, and whether it ended.
/// Trailers are dropped, as `collect` drops them from a stored answer.
async fn read_prefix<B>(body: &mut B, limit: usize) -> Result<(Bytes, bool), BoxError>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    let mut read = BytesMut::new();
    while read.len() < limit {
        match body.frame().await {
            None => return Ok((read.freeze(), true)),
            Some(frame) => {
                if let Ok(mut data) = frame.map_err(Into::into)?.into_data() {
                    read.put(&mut data);
                }
            }
        }
    }
    Ok((read.freeze(), false))
}

/// `503 lease_ended` with `Retry-After: 1`: the handler outran its lease and was cut off.
fn lease_ended<B: From<String> + From<Vec<u8>>>(key: &effectively_once::Key) -> Response<B> {
    tracing::warn!(key = %key, "handler outran its lease: cut off, not stored");
    let answer = Answer::error(StatusCode::SERVICE_UNAVAILABLE, LEASE_ENDED, "the request took too long; try again");
    let mut response = answer.into_response::<B>();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn too_large(max: usize) -> Answer {
    Answer::error(StatusCode::PAYLOAD_TOO_LARGE, PAYLOAD_TOO_LARGE, format!("body: over the limit of {max} bytes"))
}

/// `503` with `Retry-After: 1`: the store failed; nothing is stored, a retry starts over.
fn unavailable<B: From<String> + From<Vec<u8>>>(
    key: &effectively_once::Key,
    cause: &(dyn std::error::Error + 'static),
) -> Response<B> {
    tracing::warn!(key = %key, error = %redact_emails(&ErrorChain(cause).to_string()), "unavailable");
    let mut response = Answer::error(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE, "try again").into_response::<B>();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// When the handler must be cut off: at the lease's end, or sooner where the dedup window ends
/// first. A record in progress frees its key at the earlier of the two (past its window a claim
/// replaces it), so a handler running past either could run beside a retry that took the key
/// over. The claim's time is at most the lease's end less the lease; the window's end is kept
/// to whole seconds, hence the second taken off.
fn run_until_ms<S: Store>(idempotency: &Idempotency<S>, attempt: &Attempt) -> u64 {
    let config = idempotency.config();
    let lease_end_ms = attempt.lease_expires_at_ms();
    let claimed_at_or_before_ms = lease_end_ms.saturating_sub(config.lease().as_millis() as u64);
    let window_end_ms =
        claimed_at_or_before_ms.saturating_add(config.dedup_window().as_millis() as u64).saturating_sub(1000);
    lease_end_ms.min(window_end_ms)
}
