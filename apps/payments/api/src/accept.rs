//! [`Api`], the accept logic: the route, then the Idempotency-Key layer around the send, whose
//! failure says what becomes of the key (released when SQS refused, held when it may have landed).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use effectively_once::{Idempotency, Store};
use effectively_once_http::{IdempotencyKeyLayer, OnAnswer};
use lambda_http::http::request::Parts;
use lambda_http::http::{header, HeaderValue, Method, StatusCode};
use lambda_http::tower::{Layer, Service};
use lambda_http::{Body, Request, Response};
use payments::PaymentEvent;

use crate::answer::unavailable;
use crate::caller::{principal, Caller, Producers};
use crate::request::fingerprint;
use crate::{accepted, error, reply, route_path, Env, Queue, SqsQueue, DEFAULT_MAX_BODY_BYTES, PATH, PREFIX};

/// The handler: the route, then the Idempotency-Key layer around the send.
#[derive(Debug, Clone)]
pub struct Api<S, Q> {
    layer: IdempotencyKeyLayer<S>,
    queue: Arc<Q>,
    producers: Arc<Producers>,
}

/// The API as deployed: records in DynamoDB, events on SQS.
pub type DeployedApi = Api<effectively_once_dynamodb::DynamoDbStore, SqsQueue>;

impl DeployedApi {
    /// The API on the table and queue `env` names.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Self {
        let store =
            effectively_once_dynamodb::DynamoDbStore::new(aws_sdk_dynamodb::Client::new(sdk), &env.idempotency_table);
        let queue = SqsQueue::new(aws_sdk_sqs::Client::new(sdk), &env.queue_url, env.fifo);
        Api::new(Idempotency::new(store, env.config.clone()), queue)
            .with_max_body_bytes(env.max_body_bytes)
            .with_producers(env.producers.clone())
    }
}

impl<S: Store, Q: Queue + 'static> Api<S, Q> {
    /// The API over its records and its queue: `POST` keyed under [`PREFIX`], the validated
    /// event as the payload ([`parse_event`](crate::parse_event)), the `202` stored, leases ending at the
    /// invocation's deadline; every caller accepted, the event id the key
    /// ([`Producers::open`]; see [`with_producers`](Api::with_producers)).
    pub fn new(idempotency: Idempotency<S>, queue: Q) -> Self {
        let layer = IdempotencyKeyLayer::new(idempotency, PREFIX)
            .methods([Method::POST])
            .store_status(|status| status == StatusCode::ACCEPTED)
            .fingerprint(fingerprint)
            .max_body_bytes(DEFAULT_MAX_BODY_BYTES)
            .lambda_deadline();
        Api { layer, queue: Arc::new(queue), producers: Arc::new(Producers::open()) }
    }

    /// The same API for these callers only ([`Producers`]): an unknown principal gets `403`
    /// before anything is read or stored, an account its producer may not post to `403`
    /// before anything is stored or sent; with several producers each one's keys are scoped
    /// by its name (the layer's [`scope`](IdempotencyKeyLayer::scope): records
    /// `api#{producer}:{key}`, the event id `{producer}:{key}`). Once per API: the scope it
    /// sets stays on the layer.
    pub fn with_producers(mut self, producers: Producers) -> Self {
        if producers.scoped() {
            // Set by `handle` before the layer runs; a request without one is refused.
            self.layer = self.layer.scope(|parts: &Parts| match parts.extensions.get::<Caller>() {
                Some(caller) => Ok(caller.scope().map(str::to_owned)),
                None => Err(error(StatusCode::FORBIDDEN, "forbidden", "the caller is not known")),
            });
        }
        self.producers = Arc::new(producers);
        self
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
    pub async fn handle(&self, mut request: Request) -> Response<Body> {
        let path = route_path(&request);
        if path != PATH {
            return reply(error(StatusCode::NOT_FOUND, "not_found", format!("no route {path}")));
        }
        if request.method() != Method::POST {
            let mut response = reply(error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "use POST"));
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
            return response;
        }
        // Before the layer reads the key or the body: an unknown caller leaves no trace.
        let caller = match self.producers.caller(principal(&request)) {
            Ok(caller) => caller,
            Err(forbidden) => return reply(forbidden),
        };
        request.extensions_mut().insert(caller);
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
            // The account, the amount and the address stay out of INFO (PII, issue 27).
            let producer = request.extensions().get::<Caller>().and_then(Caller::producer);
            tracing::info!(event_id = %event.event_id, producer, "enqueued");
            tracing::debug!(?event, "enqueued event");
            reply(accepted(event))
        }
        Err(e) => {
            let mut response = unavailable(&event.event_id, &e);
            // Refused: nothing is on the queue, the retry (any body) starts over. Otherwise the
            // event may be on the queue: the key keeps this body until its lease ends, and the
            // layer answers Retry-After with the lease's seconds.
            let disposition = if e.is_refused() { OnAnswer::Release } else { OnAnswer::Hold };
            response.extensions_mut().insert(disposition);
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use effectively_once::Config;
    use serde_json::{json, Value};

    use super::*;
    use crate::{EnqueueError, REPLAYED};

    /// hashed nor sent.
    #[tokio::test]
    async fn a_body_over_the_limit_is_413_before_it_is_parsed() {
        let api =
            Api::new(Idempotency::new(effectively_once::InMemoryStore::new(), Config::default()), Counting::default());
        let mut event: Value = serde_json::from_str(include_str!("../../../../events/http-payment.json")).unwrap();
        let padding = "x".repeat(2 * 1024 * 1024);
        event["body"] =
            json!(format!(r#"{{"account_id": "a", "amount_cents": 1, "currency": "USD", "pad": "{padding}"}}"#));
        let response = api.handle(lambda_http::request::from_str(&event.to_string()).unwrap()).await;
        assert_eq!(response.status().as_u16(), 413);
        let Body::Text(text) = response.body() else { panic!("a text body") };
        assert!(text.contains("payload_too_large"), "{text}");
        assert_eq!(api.queue().0.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing sent");
        let small = api.with_max_body_bytes(16);
        let request = lambda_http::request::from_str(include_str!("../../../../events/http-payment.json")).unwrap();
        assert_eq!(small.handle(request).await.status().as_u16(), 413, "the limit is configurable");
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
            (include_str!("../../../../events/http-payment.json"), 202, None, None),
            (include_str!("../../../../events/http-payment-replay.json"), 202, Some("true"), None),
            (include_str!("../../../../events/http-key-reuse.json"), 422, None, Some("idempotency_key_reused")),
            (include_str!("../../../../events/http-missing-key.json"), 400, None, Some("invalid_idempotency_key")),
            (include_str!("../../../../events/apigw-http-payment.json"), 202, None, None),
            (include_str!("../../../../events/apigw-http-payment-stage.json"), 202, None, None),
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

    /// Log lines, as the runtime's subscriber writes them.
    #[derive(Clone, Default)]
    struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> lambda_http::tracing::subscriber::fmt::MakeWriter<'a> for Logs {
        type Writer = Logs;

        fn make_writer(&'a self) -> Logs {
            self.clone()
        }
    }

    /// At INFO an accepted payment logs its event id and producer, never its account, amount
    /// or address (issue 27); the rest is at DEBUG.
    #[test]
    fn info_logs_name_the_event_and_the_producer_only() {
        let producers = crate::Producers::parse(
            r#"{"shop": {"principals": ["arn:aws:iam::123456789012:user/producer"], "accounts": ["*"]},
                "payroll": {"principals": ["arn:aws:iam::123456789012:user/payroll"], "accounts": ["*"]}}"#,
        )
        .unwrap();
        let run = |level: tracing::Level| {
            let api = Api::new(
                Idempotency::new(effectively_once::InMemoryStore::new(), Config::default()),
                Counting::default(),
            )
            .with_producers(producers.clone());
            let logs = Logs::default();
            let subscriber = lambda_http::tracing::subscriber::fmt()
                .with_writer(logs.clone())
                .with_max_level(level)
                .with_ansi(false)
                .without_time()
                .finish();
            tracing::subscriber::with_default(subscriber, || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                let request =
                    lambda_http::request::from_str(include_str!("../../../../events/http-payment.json")).unwrap();
                assert_eq!(runtime.block_on(api.handle(request)).status().as_u16(), 202);
            });
            let text = logs.0.lock().unwrap().clone();
            String::from_utf8(text).unwrap()
        };
        let info = run(tracing::Level::INFO);
        assert!(info.contains("enqueued") && info.contains("shop:pay_http_0001") && info.contains("shop"), "{info}");
        for secret in ["acct_42", "1250", "alice", "example.com"] {
            assert!(!info.contains(secret), "{secret} at INFO: {info}");
        }
        let debug = run(tracing::Level::DEBUG);
        assert!(debug.contains("acct_42") && !debug.contains("alice@"), "{debug}");
    }
}
