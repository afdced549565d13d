//! How the emulator invokes a function: in process (the handler crates' own code, the default)
//! or through `cargo lambda watch`'s invoke endpoint, so the real binary runs.

use std::future::Future;
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use effectively_once_lambda::metrics::Counts;
use effectively_once_lambda::{sqs, streams, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

/// A function an SQS event source mapping invokes.
pub trait SqsFunction: Send + Sync {
    /// Invokes it with one batch.
    fn invoke(&self, event: SqsEvent) -> impl Future<Output = Result<SqsBatchResponse, String>> + Send;
}

/// A function a DynamoDB Streams event source mapping invokes.
pub trait StreamFunction: Send + Sync {
    /// Invokes it with one batch.
    fn invoke(&self, event: Event) -> impl Future<Output = Result<DynamoDbEventResponse, String>> + Send;
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
}

impl<H> InProcess<H> {
    /// Wraps a handler.
    pub fn new(handler: H, function: &str) -> Self {
        InProcess { handler: Counting { inner: handler, counts: Arc::default() }, function: function.into() }
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

impl<H: sqs::Handler> sqs::Handler for Counting<H> {
    async fn handle(&self, message: &SqsMessage, deadline_ms: Option<u64>) -> RecordResult {
        self.count(self.inner.handle(message, deadline_ms).await)
    }
}

impl<H: streams::Handler> streams::Handler for Counting<H> {
    async fn handle(&self, record: &EventRecord, deadline_ms: Option<u64>) -> RecordResult {
        self.count(self.inner.handle(record, deadline_ms).await)
    }
}

impl<H: sqs::Handler> SqsFunction for InProcess<H> {
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse, String> {
        let options = sqs::Options { metrics: false, ..sqs::Options::new(&self.function) };
        Ok(sqs::process(&self.handler, LambdaEvent::new(event, context()), &options).await)
    }
}

impl<H: streams::Handler> StreamFunction for InProcess<H> {
    async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse, String> {
        let options = streams::Options { metrics: false, ..streams::Options::new(&self.function) };
        Ok(streams::process(&self.handler, LambdaEvent::new(event, context()), &options).await)
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
    async fn call<T: serde::Serialize>(&self, event: &T) -> Result<Vec<u8>, String> {
        let body = serde_json::to_vec(event).map_err(|e| e.to_string())?;
        let host = self.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let path = format!("/2015-03-31/functions/{}/invocations", self.function);
        tokio::task::spawn_blocking(move || post(&host, &path, &body)).await.map_err(|e| e.to_string())?
    }
}

/// One HTTP/1.1 POST with `Connection: close`, enough for a local invoke endpoint.
fn post(host: &str, path: &str, body: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(host).map_err(|e| format!("invoke endpoint {host}: {e}"))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .and_then(|_| stream.write_all(body))
    .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(|e| e.to_string())?;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").ok_or("invoke answer has no body")?;
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("invoke failed: {}", head.lines().next().unwrap_or("")));
    }
    let body = response[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return Ok(dechunk_bytes(&body));
    }
    Ok(body)
}

/// Undoes HTTP/1.1 chunked transfer encoding.
pub fn dechunk_bytes(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..line_end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        out.extend_from_slice(&body[start..(start + size).min(body.len())]);
        body = &body[(start + size + 2).min(body.len())..];
    }
    out
}

impl SqsFunction for Http {
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse, String> {
        crate::esm::sqs_response(&self.call(&event).await?)
    }
}

impl StreamFunction for Http {
    async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse, String> {
        crate::esm::stream_response(&self.call(&event).await?)
    }
}

/// The payments handler with panics injected where the workload marks them: an event id holding
/// [`PANIC_ALWAYS`](crate::workload::PANIC_ALWAYS) panics on every delivery, one holding
/// [`PANIC_ONCE`](crate::workload::PANIC_ONCE) on its first. The real handler stays untouched;
/// the drivers must catch the panic and fail that record alone.
#[derive(Debug, Default)]
pub struct Panicking<H> {
    inner: H,
    panicked_once: Mutex<std::collections::HashSet<String>>,
}

impl<H> Panicking<H> {
    /// Wraps a handler.
    pub fn new(inner: H) -> Self {
        Panicking { inner, panicked_once: Mutex::default() }
    }

    /// The handler.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    fn should_panic(&self, message: &SqsMessage) -> bool {
        let id = message
            .body
            .as_deref()
            .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok())
            .and_then(|v| v["event_id"].as_str().map(str::to_owned));
        let Some(id) = id else { return false };
        id.contains(crate::workload::PANIC_ALWAYS)
            || (id.contains(crate::workload::PANIC_ONCE)
                && self.panicked_once.lock().unwrap_or_else(|p| p.into_inner()).insert(id))
    }
}

impl<H: sqs::Handler> sqs::Handler for Panicking<H> {
    async fn handle(&self, message: &SqsMessage, deadline_ms: Option<u64>) -> RecordResult {
        if self.should_panic(message) {
            panic!("injected panic: the workload marks this record's event id");
        }
        self.inner.handle(message, deadline_ms).await
    }
}
