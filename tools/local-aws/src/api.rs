//! An HTTP function over real HTTP, in process: a hyper server on `127.0.0.1:0` that turns each
//! request into the Function URL event Lambda would send (payload 2.0), parses it with
//! `lambda_http` as the runtime does, and answers with the handler's response; and a client.
//! Tests and the demo (`demo --via-api`) reach the payments API this way without `cargo lambda`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;

use crate::error::{Result, ResultExt};
use crate::http::exchange;

/// A running server; stops when dropped.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `handler` on `127.0.0.1:0`, one task per connection.
pub async fn serve<H, F>(handler: H) -> Result<Server>
where
    H: Fn(lambda_http::Request) -> F + Send + Sync + 'static,
    F: Future<Output = lambda_http::Response<lambda_http::Body>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.context("api server: bind")?;
    let addr = listener.local_addr()?;
    let handler = Arc::new(handler);
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let handler = handler.clone();
            let service = service_fn(move |request| {
                let handler = handler.clone();
                async move { call(&*handler, request).await }
            });
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(client), service));
        }
    });
    Ok(Server { addr, task })
}

/// One request through the handler, as Lambda would deliver it.
async fn call<H, F>(handler: &H, request: Request<Incoming>) -> Result<Response<Full<Bytes>>>
where
    H: Fn(lambda_http::Request) -> F,
    F: Future<Output = lambda_http::Response<lambda_http::Body>> + Send + 'static,
{
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let event = function_url_event(&parts, &body);
    let request = lambda_http::request::from_str(&event.to_string())?;
    // A deadline as Lambda gives one (the template's 10 s timeout): it bounds the API's leases,
    // so a request whose send outcome is unknown frees its key within seconds, as deployed.
    let mut context = lambda_http::Context::default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    context.deadline = now.as_millis() as u64 + 10_000;
    let request = lambda_http::RequestExt::with_lambda_context(request, context);
    // In a task of its own: a client that gives up does not stop the invocation, as on Lambda
    // (hyper drops a request's future when its connection closes).
    let (parts, body) = tokio::spawn(handler(request)).await?.into_parts();
    let bytes = match body {
        lambda_http::Body::Text(text) => Bytes::from(text),
        lambda_http::Body::Binary(bytes) => Bytes::from(bytes),
        _ => Bytes::new(),
    };
    Ok(Response::from_parts(parts, Full::new(bytes)))
}

/// The Function URL event (payload 2.0) of a request. Headers repeated are joined with commas,
/// as Lambda joins them; a body that is not UTF-8 is passed lossily (the payments API takes
/// JSON only).
fn function_url_event(parts: &hyper::http::request::Parts, body: &[u8]) -> Value {
    let mut headers = Map::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.get_mut(name.as_str()) {
            Some(Value::String(joined)) => *joined = format!("{joined},{value}"),
            _ => drop(headers.insert(name.as_str().to_owned(), Value::String(value))),
        }
    }
    let path = parts.uri.path();
    json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": parts.uri.query().unwrap_or(""),
        "headers": headers,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "local",
            "domainName": "127.0.0.1",
            "domainPrefix": "local",
            "http": {"method": parts.method.as_str(), "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "local"},
            "requestId": uuid(),
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 0
        },
        "body": String::from_utf8_lossy(body),
        "isBase64Encoded": false
    })
}

fn uuid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("local-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// An answer of the API, body parsed.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status.
    pub status: u16,
    /// The headers.
    pub headers: hyper::HeaderMap,
    /// The body as JSON (`null` when it is not JSON).
    pub body: Value,
}

impl Reply {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// `POST {path}` to `addr` (`127.0.0.1:9000`) with `Idempotency-Key: key` (none when `None`) and
/// `body`, given up after `timeout` (an `Err`, as a client's timeout is: the request may still
/// be served).
pub async fn post(addr: &str, path: &str, key: Option<&str>, body: &str, timeout: Duration) -> Result<Reply> {
    let mut request = Request::post(path).header("host", addr).header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request.body(Full::new(Bytes::from(body.to_owned())))?;
    let response =
        tokio::time::timeout(timeout, exchange(addr, request)).await.context(format!("POST {path}: timed out"))??;
    let (parts, body) = response.into_parts();
    Ok(Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}
