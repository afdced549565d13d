//! The handler's answer is read no further than the largest answer stored: a larger one
//! streams on to the client, and the key is completed without it, so it is not run again.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::setup;
use bytes::Bytes;
use effectively_once_http::{Prefixed, ResponseBody, RESPONSE_TOO_LARGE};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::{service_fn, Layer, ServiceExt};

const CHUNK: usize = 1 << 20;
const CHUNKS: usize = 64;

#[tokio::test]
async fn a_streamed_answer_is_not_buffered_past_the_largest_answer_stored() {
    let s = setup();
    let pulled = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let service = s.layer.layer(service_fn({
        let (pulled, runs) = (pulled.clone(), runs.clone());
        move |_request: Request<Chunks>| {
            let pulled = pulled.clone();
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                let mut response = Response::new(Chunks::new(CHUNKS, Some(pulled)));
                *response.status_mut() = StatusCode::CREATED;
                Ok::<_, Infallible>(response)
            }
        }
    }));
    let request = || Request::post("/downloads").header("idempotency-key", "dl-1").body(Chunks::from(String::new()));
    let response = service.clone().oneshot(request().unwrap()).await.unwrap();
    assert_eq!(response.status(), 201);
    let read = pulled.load(Ordering::SeqCst);
    assert!(
        read <= effectively_once::DEFAULT_MAX_RESPONSE_BYTES + CHUNK,
        "the layer buffered {read} bytes of the answer before the client got a byte"
    );
    let mut body = response.into_body();
    let mut received = 0;
    while let Some(frame) = body.frame().await {
        received += frame.unwrap().into_data().map_or(0, |data| data.len());
    }
    assert_eq!(received, CHUNKS * CHUNK, "the client gets the whole answer, the bytes read first");

    let retry = service.oneshot(request().unwrap()).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "completed without the answer: not run again");
    assert_eq!(retry.status(), 500);
    let text = retry.into_body().collect().await.unwrap().to_bytes();
    let error: Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(error["error"], RESPONSE_TOO_LARGE);
}

/// `left` chunks of 1 MiB, counting the bytes pulled; or a prefix (bytes the layer read, a
/// text) and the rest.
struct Chunks {
    prefix: Option<Prefixed<Box<Chunks>>>,
    left: usize,
    pulled: Option<Arc<AtomicUsize>>,
}

impl Chunks {
    fn new(left: usize, pulled: Option<Arc<AtomicUsize>>) -> Self {
        Chunks { prefix: None, left, pulled }
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if let Some(prefixed) = &mut self.prefix {
            return std::pin::Pin::new(prefixed).poll_frame(cx);
        }
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        self.left -= 1;
        if let Some(pulled) = &self.pulled {
            pulled.fetch_add(CHUNK, Ordering::SeqCst);
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(vec![b'x'; CHUNK])))))
    }
}

impl ResponseBody for Chunks {
    fn prepend(prefix: Bytes, rest: Self) -> Self {
        Chunks { prefix: Some(Prefixed::new(prefix, Box::new(rest))), left: 0, pulled: None }
    }
}

impl From<String> for Chunks {
    fn from(s: String) -> Self {
        Chunks::prepend(Bytes::from(s), Chunks::new(0, None))
    }
}

impl From<Vec<u8>> for Chunks {
    fn from(v: Vec<u8>) -> Self {
        Chunks::prepend(Bytes::from(v), Chunks::new(0, None))
    }
}
