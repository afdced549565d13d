//! A function's own binary run as Lambda runs it: a child process polling a Lambda Runtime API
//! that this module serves on loopback, one invocation at a time. The emulator invokes it like
//! any other function, so a user's crate (any `lambda_runtime` binary) runs under the local
//! pipeline without cargo-lambda.
//!
//! The Runtime API's routes, as the Lambda documentation states them
//! (<https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html>): `GET
//! /2018-06-01/runtime/invocation/next` hands out the next event with its request id, deadline
//! and function ARN; `POST .../invocation/{id}/response` and `.../error` answer it;
//! `POST /2018-06-01/runtime/init/error` reports a failed start.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_lambda_events::event::streams::{DynamoDbEventResponse, KinesisEventResponse};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Result, ResultExt};
use crate::http::Body;
use crate::invoke::{KinesisFunction, SqsFunction, StreamFunction};

/// How long an invocation may run: the template's function timeout.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Where an invocation's answer goes: the response's body, or the error the function reported.
type Answer = oneshot::Sender<std::result::Result<Vec<u8>, String>>;

/// An event waiting for the function, and where its answer goes.
struct Invocation {
    event: Vec<u8>,
    answer: Answer,
}

/// The Runtime API's side: invocations queued for `next`, those handed out by request id.
struct Api {
    queued: tokio::sync::Mutex<mpsc::Receiver<Invocation>>,
    running: Mutex<HashMap<String, Answer>>,
    function: String,
}

/// A function binary under the local Runtime API. The process is killed when this is dropped.
pub struct Hosted {
    invocations: mpsc::Sender<Invocation>,
    // std's, not tokio's: tokio's `process` feature would change tokio's build for the whole
    // workspace (features unify), and a poll of `try_wait` is all this needs.
    child: std::process::Child,
    task: tokio::task::JoinHandle<()>,
    function: String,
}

impl Hosted {
    /// Starts `binary` as the function `function`, with `env` (its variables, as
    /// `.local-aws/lambda.env` holds them) and the Runtime API's own variables.
    pub async fn start(binary: &Path, function: &str, env: &[(String, String)]) -> Result<Hosted> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("runtime API: bind")?;
        let addr = listener.local_addr()?;
        // One invocation at a time, as one Lambda execution environment takes them.
        let (invocations, queued) = mpsc::channel(1);
        let api = Arc::new(Api {
            queued: tokio::sync::Mutex::new(queued),
            running: Mutex::default(),
            function: function.to_owned(),
        });
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let api = api.clone();
                let service = service_fn(move |request| {
                    let api = api.clone();
                    async move { api.handle(request).await }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        let child = std::process::Command::new(binary)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", function)
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
            .stdin(Stdio::null())
            .spawn()
            .context(format!("start {}", binary.display()))?;
        Ok(Hosted { invocations, child, task, function: function.to_owned() })
    }

    /// Invokes the function with `event` and returns its answer's body; `Err` is an invocation
    /// error (the function reported one, exited, or ran past [`TIMEOUT`]).
    pub async fn call<T: serde::Serialize>(&mut self, event: &T) -> Result<Vec<u8>> {
        if let Some(status) = self.child.try_wait()? {
            return Err(format!("function {} exited ({status})", self.function).into());
        }
        let (answer, answered) = oneshot::channel();
        let event = serde_json::to_vec(event).context("invocation event")?;
        self.invocations.send(Invocation { event, answer }).await.map_err(|_| "runtime API closed")?;
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        tokio::pin!(answered);
        loop {
            tokio::select! {
                answer = &mut answered => return match answer {
                    Ok(Ok(body)) => Ok(body),
                    Ok(Err(error)) => Err(format!("function error: {error}").into()),
                    Err(_) => Err("runtime API closed".into()),
                },
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    if let Some(status) = self.child.try_wait()? {
                        return Err(format!("function {} exited ({status})", self.function).into());
                    }
                    if tokio::time::Instant::now() > deadline {
                        return Err(format!("function {} timed out after {TIMEOUT:?}", self.function).into());
                    }
                }
            }
        }
    }
}

impl Drop for Hosted {
    fn drop(&mut self) {
        self.task.abort();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Api {
    async fn handle(&self, request: Request<Incoming>) -> Result<Response<Body>> {
        let (parts, body) = request.into_parts();
        let body = body.collect().await?.to_bytes();
        let path = parts.uri.path().trim_start_matches("/2018-06-01/runtime/");
        match (parts.method, path.split('/').collect::<Vec<_>>().as_slice()) {
            (Method::GET, ["invocation", "next"]) => self.next().await,
            (Method::POST, ["invocation", id, verdict @ ("response" | "error")]) => {
                let answer = self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(*id);
                let Some(answer) = answer else { return Ok(reply(StatusCode::BAD_REQUEST, "unknown request id")) };
                let body = if *verdict == "response" { Ok(body.to_vec()) } else { Err(error_text(&body)) };
                let _ = answer.send(body);
                Ok(reply(StatusCode::ACCEPTED, "{}"))
            }
            (Method::POST, ["init", "error"]) => {
                eprintln!("local: function {} failed to start: {}", self.function, error_text(&body));
                Ok(reply(StatusCode::ACCEPTED, "{}"))
            }
            _ => Ok(reply(StatusCode::NOT_FOUND, "no such route")),
        }
    }

    /// The next event, once there is one (the function's long poll).
    async fn next(&self) -> Result<Response<Body>> {
        let Some(invocation) = self.queued.lock().await.recv().await else {
            return Ok(reply(StatusCode::GONE, "closed"));
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let id = format!("local-{}", now.as_nanos());
        let deadline = (now + TIMEOUT).as_millis();
        let arn = format!("arn:aws:lambda:us-east-1:000000000000:function:{}", self.function);
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), invocation.answer);
        Ok(Response::builder()
            .header("lambda-runtime-aws-request-id", id)
            .header("lambda-runtime-deadline-ms", deadline.to_string())
            .header("lambda-runtime-invoked-function-arn", arn)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Body::from(Bytes::from(invocation.event)))?)
    }
}

/// The `errorType: errorMessage` of an error report, or its raw text.
fn error_text(body: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(v) => format!("{}: {}", v["errorType"].as_str().unwrap_or("?"), v["errorMessage"].as_str().unwrap_or("?")),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    }
}

fn reply(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
}

/// The emulator's invocations take `&self`; one process takes one at a time.
pub struct Process(tokio::sync::Mutex<Hosted>);

impl Process {
    /// Wraps a started function.
    pub fn new(hosted: Hosted) -> Self {
        Process(tokio::sync::Mutex::new(hosted))
    }
}

impl SqsFunction for Process {
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse> {
        crate::esm::sqs_response(&self.0.lock().await.call(&event).await?)
    }
}

impl StreamFunction for Process {
    async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse> {
        crate::esm::stream_response(&self.0.lock().await.call(&event).await?)
    }
}

impl KinesisFunction for Process {
    async fn invoke(&self, event: KinesisEvent) -> Result<KinesisEventResponse> {
        crate::esm::kinesis_response(&self.0.lock().await.call(&event).await?)
    }
}
