//! A fault-injecting HTTP proxy on loopback, between the AWS SDK and the local AWS: for each
//! request a rule decides to pass it, delay it, forward it and then drop the answer (the write
//! committed, the caller saw a broken connection), or answer a 500 or a throttling error without
//! forwarding it. Built on hyper's HTTP/1.1 server, so chunked request bodies and
//! `Expect: 100-continue` are handled as any server handles them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::error::{Result, ResultExt};
use crate::http::{exchange, Body};
use crate::rng::SharedRng;

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forwarded, answered.
    Pass,
    /// Forwarded after a delay.
    Delay(Duration),
    /// Forwarded (its effect happens), then the connection is closed without the answer.
    DropResponse,
    /// Not forwarded: a 500 internal error.
    ServerError,
    /// Not forwarded: the service's throttling error.
    Throttle,
    /// Not forwarded: the provider refuses the request for good: SES's `MessageRejected`, as
    /// for a recipient its sandbox has not verified; DynamoDB's `ValidationException`, as for a
    /// write to a table whose key schema is another template's (a bad deploy).
    Refuse,
}

impl Fault {
    fn label(self) -> &'static str {
        match self {
            Fault::Pass => "pass",
            Fault::Delay(_) => "delay",
            Fault::DropResponse => "lost response",
            Fault::ServerError => "500",
            Fault::Throttle => "throttled",
            Fault::Refuse => "refused",
        }
    }
}

/// Decides each request's fate from its operation (`dynamodb:TransactWriteItems`, `ses:SendEmail`).
pub trait Rules: Send + Sync + 'static {
    /// The fault for this request.
    fn decide(&self, operation: &str) -> Fault;

    /// The fault for this request, seeing its body too; by default, by its operation alone.
    fn decide_request(&self, operation: &str, _body: &[u8]) -> Fault {
        self.decide(operation)
    }
}

/// No faults: every request passes.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFaults;

impl Rules for NoFaults {
    fn decide(&self, _operation: &str) -> Fault {
        Fault::Pass
    }
}

/// SES refuses recipients whose address starts with a prefix, as its sandbox refuses
/// unverified ones; every other request is left to the inner rules. The local SES (moto) checks
/// only the sender's identity and that an address has a domain, so it cannot refuse a
/// recipient itself.
#[derive(Debug)]
pub struct RefuseRecipients<R> {
    prefix: String,
    inner: R,
}

impl<R: Rules> RefuseRecipients<R> {
    /// Refuses sends to addresses starting with `prefix`, then asks `inner`.
    pub fn new(prefix: impl Into<String>, inner: R) -> Self {
        RefuseRecipients { prefix: prefix.into(), inner }
    }
}

impl<R: Rules> Rules for RefuseRecipients<R> {
    fn decide(&self, operation: &str) -> Fault {
        self.inner.decide(operation)
    }

    fn decide_request(&self, operation: &str, body: &[u8]) -> Fault {
        if operation == "ses:SendEmail" && recipients(body).iter().any(|to| to.starts_with(&self.prefix)) {
            return Fault::Refuse;
        }
        self.inner.decide_request(operation, body)
    }
}

/// The `To` addresses of an SES v2 `SendEmail` body.
fn recipients(body: &[u8]) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    value["Destination"]["ToAddresses"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Faults at random, per operation prefix, from a seed.
#[derive(Debug)]
pub struct RandomFaults {
    rules: Vec<(String, Vec<(Fault, u32)>)>,
    rng: SharedRng,
}

impl RandomFaults {
    /// No faults yet; `seed` makes runs repeatable.
    pub fn new(seed: u64) -> Self {
        RandomFaults { rules: Vec::new(), rng: SharedRng::new(seed) }
    }

    /// For operations starting with `prefix`, each fault with its rate in per mille.
    pub fn on(mut self, prefix: &str, faults: &[(Fault, u32)]) -> Self {
        self.rules.push((prefix.into(), faults.to_vec()));
        self
    }
}

impl Rules for RandomFaults {
    fn decide(&self, operation: &str) -> Fault {
        let Some((_, faults)) = self.rules.iter().find(|(p, _)| operation.starts_with(p.as_str())) else {
            return Fault::Pass;
        };
        let roll = self.rng.with(|rng| rng.per_mille()) as u32;
        let mut acc = 0;
        for (fault, rate) in faults {
            acc += rate;
            if roll < acc {
                return *fault;
            }
        }
        Fault::Pass
    }
}

/// Faults in order: each entry applies once, to the next request whose operation starts with
/// its prefix; everything else passes.
#[derive(Debug, Default)]
pub struct ScriptedFaults {
    script: Mutex<VecDeque<(String, Fault)>>,
}

impl ScriptedFaults {
    /// An empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a fault for the next request matching `prefix`.
    pub fn then(self, prefix: &str, fault: Fault) -> Self {
        self.script.lock().unwrap_or_else(|p| p.into_inner()).push_back((prefix.into(), fault));
        self
    }
}

impl Rules for ScriptedFaults {
    fn decide(&self, operation: &str) -> Fault {
        let mut script = self.script.lock().unwrap_or_else(|p| p.into_inner());
        match script.iter().position(|(p, _)| operation.starts_with(p.as_str())) {
            Some(i) => script.remove(i).map(|(_, f)| f).unwrap_or(Fault::Pass),
            None => Fault::Pass,
        }
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    addr: std::net::SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

/// What every connection of a proxy shares.
struct State {
    upstream: String,
    rules: Arc<dyn Rules>,
    injected: Mutex<BTreeMap<String, u64>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("upstream", &self.upstream).finish_non_exhaustive()
    }
}

impl Proxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream` (`127.0.0.1:4566`).
    pub async fn start(upstream: &str, rules: Arc<dyn Rules>) -> Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("fault proxy: bind")?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State { upstream: upstream.to_owned(), rules, injected: Mutex::default() });
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = shared.clone();
                let service = service_fn(move |request| {
                    let state = state.clone();
                    async move { state.handle(request).await }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(client), service),
                );
            }
        });
        Ok(Proxy { addr, state, task })
    }

    /// A proxy in front of the local AWS (`AWS_ENDPOINT_URL`).
    pub async fn to_local_aws(rules: Arc<dyn Rules>) -> Result<Proxy> {
        let endpoint = effectively_once_dynamodb::testing::endpoint();
        Proxy::start(endpoint.trim_start_matches("http://").trim_end_matches('/'), rules).await
    }

    /// The endpoint to give the SDK (`AWS_ENDPOINT_URL`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An SDK configuration whose every client goes through this proxy, retrying as `retries`
    /// says, with the local AWS's dummy credentials.
    pub async fn sdk_config(&self, retries: aws_config::retry::RetryConfig) -> aws_config::SdkConfig {
        use aws_sdk_dynamodb::config::{Credentials, Region};
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(self.url())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "fault-proxy"))
            .retry_config(retries)
            .load()
            .await
    }

    /// Faults injected so far, by `fault operation`.
    pub fn injected(&self) -> BTreeMap<String, u64> {
        self.state.injected.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl State {
    /// One request: its fault decided from its operation and whole body, then answered, or
    /// forwarded. An `Err` closes the connection without an answer.
    async fn handle(&self, request: Request<Incoming>) -> Result<Response<Body>> {
        let (parts, body) = request.into_parts();
        // Reading the body sends `100 Continue` to a client that waits for it.
        let body = body.collect().await?.to_bytes();
        let op = operation(&parts.headers, parts.uri.path());
        let fault = self.rules.decide_request(&op, &body);
        if fault != Fault::Pass {
            let mut injected = self.injected.lock().unwrap_or_else(|p| p.into_inner());
            *injected.entry(format!("{} {op}", fault.label())).or_default() += 1;
        }
        match fault {
            Fault::ServerError => Ok(error(500, "InternalServerError", &op, "injected by the fault proxy")),
            // SES's own wording, address included, as a provider's message would carry it.
            Fault::Refuse if op.starts_with("dynamodb") => {
                Ok(error(400, "ValidationException", &op, "The provided key element does not match the schema"))
            }
            Fault::Refuse => Ok(error(400, "MessageRejected", &op, &refusal(&body))),
            Fault::Throttle if op.starts_with("ses:") => {
                Ok(error(429, "TooManyRequestsException", &op, "injected by the fault proxy"))
            }
            Fault::Throttle => Ok(error(400, "ThrottlingException", &op, "injected by the fault proxy")),
            Fault::Pass | Fault::Delay(_) | Fault::DropResponse => {
                if let Fault::Delay(d) = fault {
                    tokio::time::sleep(d).await;
                }
                let answer = self.forward(parts, body).await?;
                if fault == Fault::DropResponse {
                    // The upstream applied it; the caller never hears so.
                    return Err("the fault proxy dropped the answer".into());
                }
                Ok(answer)
            }
        }
    }

    /// Sends the request upstream, whole, on a connection of its own, and returns its answer
    /// whole, for the client's connection to be kept alive.
    async fn forward(&self, mut parts: hyper::http::request::Parts, body: Bytes) -> Result<Response<Body>> {
        strip_framing(&mut parts.headers);
        parts.headers.remove(hyper::header::EXPECT);
        parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        parts.headers.insert(CONNECTION, HeaderValue::from_static("close"));
        let request = Request::from_parts(parts, Body::new(body));
        let (mut parts, body) = exchange(&self.upstream, request).await?.into_parts();
        strip_framing(&mut parts.headers);
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

/// Drops the headers of one hop's framing; hyper sets them anew for the next.
fn strip_framing(headers: &mut HeaderMap) {
    for name in [CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING, HeaderName::from_static("keep-alive")] {
        headers.remove(name);
    }
}

/// The operation a request names: the `X-Amz-Target` of JSON protocols, or SES v2's path.
fn operation(headers: &HeaderMap, path: &str) -> String {
    if let Some(target) = headers.get("x-amz-target").and_then(|v| v.to_str().ok()) {
        let target = target.trim();
        let (service, op) = target.split_once('.').unwrap_or(("", target));
        return format!("{}:{op}", service.split('_').next().unwrap_or("").to_lowercase());
    }
    if path.starts_with("/v2/email/outbound-emails") {
        return "ses:SendEmail".into();
    }
    format!("http:{path}")
}

/// SES's message for refused recipients.
fn refusal(body: &[u8]) -> String {
    format!(
        "Email address is not verified. The following identities failed the check in region US-EAST-1: {}",
        recipients(body).join(", ")
    )
}

/// An AWS JSON error answer.
fn error(status: u16, code: &str, op: &str, message: &str) -> Response<Body> {
    let prefix = if op.starts_with("dynamodb") { "com.amazonaws.dynamodb.v20120810#" } else { "" };
    let body = serde_json::json!({"__type": format!("{prefix}{code}"), "message": message}).to_string();
    let mut response = Response::new(Body::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/x-amz-json-1.0"));
    headers.insert("x-amzn-requestid", HeaderValue::from_static("fault-proxy"));
    if let Ok(code) = HeaderValue::from_str(code) {
        headers.insert("x-amzn-errortype", code);
    }
    response
}
