//! How the emulator invokes a function: in process (a handler of `effectively_once_lambda`, run
//! through its trigger's driver as the deployed binary runs it), or through `cargo lambda
//! watch`'s invoke endpoint, so the real binary runs ([`crate::runtime`] runs one under a local
//! Runtime API). The traits ([`SqsFunction`], ...) are what a mapping invokes: a user's own
//! function plugs in by implementing one, or by handing its handler to [`InProcess`].

use effectively_once_lambda::{BatchHandler, Handler, OrderedBatch, OrderedBatchHandler};
use std::future::Future;
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::kafka::{KafkaEvent, KafkaRecord};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_lambda_events::event::streams::{DynamoDbEventResponse, KinesisEventResponse};
use effectively_once_lambda::kafka::KafkaEventResponse;
use effectively_once_lambda::metrics::Counts;
use effectively_once_lambda::park::{Poison, SqsQueue};
use effectively_once_lambda::{kafka, kinesis, sqs, streams, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

use crate::error::{Result, ResultExt};

/// A function an SQS event source mapping invokes. `Err` is an invocation error (the function
/// threw, crashed, timed out, or gave an answer that is not one).
pub trait SqsFunction: Send + Sync {
    /// Invokes it with one batch.
    fn invoke(&self, event: SqsEvent) -> impl Future<Output = Result<SqsBatchResponse>> + Send;
}

/// A function a DynamoDB Streams event source mapping invokes; `Err` as for [`SqsFunction`].
pub trait StreamFunction: Send + Sync {
    /// Invokes it with one batch.
    fn invoke(&self, event: Event) -> impl Future<Output = Result<DynamoDbEventResponse>> + Send;
}

/// A function a Kinesis event source mapping invokes; `Err` as for [`SqsFunction`].
pub trait KinesisFunction: Send + Sync {
    /// Invokes it with one batch.
    fn invoke(&self, event: KinesisEvent) -> impl Future<Output = Result<KinesisEventResponse>> + Send;
}

/// A function a Kafka (MSK or self-managed) event source mapping invokes; `Err` as for
/// [`SqsFunction`].
pub trait KafkaFunction: Send + Sync {
    /// Invokes it with one batch.
    fn invoke(&self, event: KafkaEvent) -> impl Future<Output = Result<KafkaEventResponse>> + Send;
}

impl<F: KafkaFunction> KafkaFunction for &F {
    fn invoke(&self, event: KafkaEvent) -> impl Future<Output = Result<KafkaEventResponse>> + Send {
        (**self).invoke(event)
    }
}

impl<F: SqsFunction> SqsFunction for &F {
    fn invoke(&self, event: SqsEvent) -> impl Future<Output = Result<SqsBatchResponse>> + Send {
        (**self).invoke(event)
    }
}

impl<F: StreamFunction> StreamFunction for &F {
    fn invoke(&self, event: Event) -> impl Future<Output = Result<DynamoDbEventResponse>> + Send {
        (**self).invoke(event)
    }
}

impl<F: KinesisFunction> KinesisFunction for &F {
    fn invoke(&self, event: KinesisEvent) -> impl Future<Output = Result<KinesisEventResponse>> + Send {
        (**self).invoke(event)
    }
}

/// A context as Lambda gives it: a real deadline, 30 s away (the template's timeout).
pub fn context() -> Context {
    let mut context = Context::default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    context.deadline = now.as_millis() as u64 + 30_000;
    context.request_id = format!("local-{}", now.as_nanos());
    context
}

/// A handler run in this process through the trigger drivers, counting what it did.
pub struct InProcess<H> {
    handler: Counting<H>,
    function: String,
    poison: Poison,
}

impl<H> InProcess<H> {
    /// Wraps a handler. On a stream trigger its poison is held until [`InProcess::park_in`]
    /// names a destination, as the driver does for a function that chose none.
    pub fn new(handler: H, function: &str) -> Self {
        let handler = Counting { inner: handler, counts: Arc::default() };
        InProcess { handler, function: function.into(), poison: Poison::Unchosen }
    }

    /// Parks the function's poison in the queue at `url`, as a deployed function with
    /// `PARK_QUEUE_URL` does.
    pub fn park_in(mut self, sqs: &aws_sdk_sqs::Client, url: &str) -> Self {
        self.poison = Poison::Park(Arc::new(SqsQueue::new(sqs.clone(), url)));
        self
    }

    /// The options of each invocation: the driver's, no EMF line, this function's poison.
    fn options(&self) -> effectively_once_lambda::Options {
        effectively_once_lambda::Options { poison: self.poison.clone(), ..quiet(&self.function) }
    }

    /// What the handler's records came to so far.
    pub fn counts(&self) -> Counts {
        *self.handler.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler.inner
    }
}

/// Counts each record's result on the way out.
struct Counting<H> {
    inner: H,
    counts: Arc<Mutex<Counts>>,
}

impl<H> Counting<H> {
    fn count(&self, result: RecordResult) -> RecordResult {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).add(&result);
        result
    }
}

impl<R: Sync, H: Handler<R>> Handler<R> for Counting<H> {
    async fn handle(&self, record: &R, context: &Context) -> RecordResult {
        self.count(self.inner.handle(record, context).await)
    }

    fn key(&self, record: &R) -> Option<String> {
        self.inner.key(record)
    }

    fn span(&self, record: &R) -> tracing::Span {
        self.inner.span(record)
    }
}

impl<R: Sync, H: BatchHandler<R>> BatchHandler<R> for Counting<H> {
    async fn handle_batch(&self, records: &[&R], context: &Context) -> Vec<RecordResult> {
        let results = self.inner.handle_batch(records, context).await;
        results.into_iter().map(|result| self.count(result)).collect()
    }
}

impl<R: Sync, H: OrderedBatchHandler<R>> OrderedBatchHandler<R> for Counting<H> {
    async fn handle_ordered(&self, batch: &OrderedBatch<'_, R>, context: &Context) -> Vec<RecordResult> {
        let results = self.inner.handle_ordered(batch, context).await;
        results.into_iter().map(|result| self.count(result)).collect()
    }
}

/// The options the emulator's in-process invocations use: the driver's, no EMF line.
fn quiet(function: &str) -> effectively_once_lambda::Options {
    effectively_once_lambda::Options { emit_metrics: false, ..effectively_once_lambda::Options::new(function) }
}

impl<H: Handler<SqsMessage>> SqsFunction for InProcess<H> {
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse> {
        Ok(sqs::process(&self.handler, LambdaEvent::new(event, context()), &quiet(&self.function)).await)
    }
}

/// An [`InProcess`] function served through the batch path (`process_batch` of its trigger), as
/// the payments consumer is deployed.
pub struct Batched<H>(pub InProcess<H>);

impl<H> Batched<H> {
    /// Wraps a handler.
    pub fn new(handler: H, function: &str) -> Self {
        Batched(InProcess::new(handler, function))
    }

    /// Parks the function's poison in the queue at `url` ([`InProcess::park_in`]).
    pub fn park_in(self, sqs: &aws_sdk_sqs::Client, url: &str) -> Self {
        Batched(self.0.park_in(sqs, url))
    }

    /// What the handler's records came to so far.
    pub fn counts(&self) -> Counts {
        self.0.counts()
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        self.0.handler()
    }
}

impl<H: BatchHandler<SqsMessage>> SqsFunction for Batched<H> {
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse> {
        Ok(sqs::process_batch(&self.0.handler, LambdaEvent::new(event, context()), &quiet(&self.0.function)).await)
    }
}

/// An [`InProcess`] function served through the ordered path (`process_ordered` of its trigger:
/// the whole batch in one call), as the payments consumers are deployed.
pub struct Ordered<H>(pub InProcess<H>);

impl<H> Ordered<H> {
    /// Wraps a handler.
    pub fn new(handler: H, function: &str) -> Self {
        Ordered(InProcess::new(handler, function))
    }

    /// Parks the function's poison in the queue at `url` ([`InProcess::park_in`]).
    pub fn park_in(self, sqs: &aws_sdk_sqs::Client, url: &str) -> Self {
        Ordered(self.0.park_in(sqs, url))
    }

    /// What the handler's records came to so far.
    pub fn counts(&self) -> Counts {
        self.0.counts()
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        self.0.handler()
    }
}

impl<H: OrderedBatchHandler<SqsMessage>> SqsFunction for Ordered<H> {
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse> {
        Ok(sqs::process_ordered(&self.0.handler, LambdaEvent::new(event, context()), &quiet(&self.0.function)).await)
    }
}

impl<H: OrderedBatchHandler<KafkaRecord>> KafkaFunction for Ordered<H> {
    async fn invoke(&self, event: KafkaEvent) -> Result<KafkaEventResponse> {
        Ok(kafka::process_ordered(&self.0.handler, LambdaEvent::new(event, context()), &self.0.options()).await)
    }
}

impl<H: Handler<EventRecord>> StreamFunction for InProcess<H> {
    async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse> {
        Ok(streams::process(&self.handler, LambdaEvent::new(event, context()), &self.options()).await)
    }
}

impl<H: BatchHandler<EventRecord>> StreamFunction for Batched<H> {
    async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse> {
        Ok(streams::process_batch(&self.0.handler, LambdaEvent::new(event, context()), &self.0.options()).await)
    }
}

impl<H: Handler<KinesisEventRecord>> KinesisFunction for InProcess<H> {
    async fn invoke(&self, event: KinesisEvent) -> Result<KinesisEventResponse> {
        Ok(kinesis::process(&self.handler, LambdaEvent::new(event, context()), &self.options()).await)
    }
}

impl<H: BatchHandler<KinesisEventRecord>> KinesisFunction for Batched<H> {
    async fn invoke(&self, event: KinesisEvent) -> Result<KinesisEventResponse> {
        Ok(kinesis::process_batch(&self.0.handler, LambdaEvent::new(event, context()), &self.0.options()).await)
    }
}

impl<H: Handler<KafkaRecord>> KafkaFunction for InProcess<H> {
    async fn invoke(&self, event: KafkaEvent) -> Result<KafkaEventResponse> {
        Ok(kafka::process(&self.handler, LambdaEvent::new(event, context()), &self.options()).await)
    }
}

impl<H: BatchHandler<KafkaRecord>> KafkaFunction for Batched<H> {
    async fn invoke(&self, event: KafkaEvent) -> Result<KafkaEventResponse> {
        Ok(kafka::process_batch(&self.0.handler, LambdaEvent::new(event, context()), &self.0.options()).await)
    }
}

/// A function behind `cargo lambda watch` (`make watch`): `POST
/// {url}/2015-03-31/functions/{function}/invocations`.
#[derive(Debug, Clone)]
pub struct Http {
    /// `http://127.0.0.1:9000`.
    pub url: String,
    /// The function's name.
    pub function: String,
}

impl Http {
    /// The function's raw answer; the mapping reads it as Lambda does ([`crate::esm::sqs_response`]).
    async fn call<T: serde::Serialize>(&self, event: &T) -> Result<Vec<u8>> {
        let body = serde_json::to_vec(event).context("invocation event")?;
        let host = self.url.trim_start_matches("http://").trim_end_matches('/');
        let request = hyper::Request::post(format!("/2015-03-31/functions/{}/invocations", self.function))
            .header(hyper::header::HOST, host)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(crate::http::Body::from(body))?;
        let response = crate::http::exchange(host, request).await.context(format!("invoke endpoint {host}"))?;
        if response.status() != hyper::StatusCode::OK {
            return Err(format!("invoke failed: {}", response.status()).into());
        }
        // Lambda's Invoke API answers a function error with 200 and this header: the whole
        // batch failed, whatever the body says (it has no batchItemFailures to read).
        if let Some(kind) = response.headers().get("x-amz-function-error") {
            let kind = kind.to_str().unwrap_or("?").to_owned();
            return Err(format!("function error ({kind}): {}", String::from_utf8_lossy(response.body())).into());
        }
        Ok(response.into_body().to_vec())
    }
}

impl SqsFunction for Http {
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse> {
        crate::esm::sqs_response(&self.call(&event).await?)
    }
}

impl StreamFunction for Http {
    async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse> {
        crate::esm::stream_response(&self.call(&event).await?)
    }
}

impl KinesisFunction for Http {
    async fn invoke(&self, event: KinesisEvent) -> Result<KinesisEventResponse> {
        crate::esm::kinesis_response(&self.call(&event).await?)
    }
}

impl KafkaFunction for Http {
    async fn invoke(&self, event: KafkaEvent) -> Result<KafkaEventResponse> {
        crate::esm::kafka::kafka_response(&self.call(&event).await?)
    }
}
