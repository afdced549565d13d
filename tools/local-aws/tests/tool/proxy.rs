//! The fault proxy speaks HTTP/1.1 as a server must: a chunked request body and a client that
//! waits for `100 Continue` are both forwarded whole, and the rules see the whole body. No AWS
//! needed: the upstream is a small echo server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use local::proxy::{Fault, NoFaults, Proxy, RefuseRecipients, ScriptedFaults};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An upstream that answers each request with its body, and with how it was framed on the way
/// in (`x-framed: content-length N` or `chunked`).
async fn echo() -> String {
    echo_counting().await.0
}

/// [`echo`], and how many requests it served.
async fn echo_counting() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let count = count.clone();
            let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                count.fetch_add(1, Ordering::SeqCst);
                async move {
                    let framed = match request.headers().get("content-length") {
                        Some(n) => format!("content-length {}", n.to_str().unwrap()),
                        None => "chunked".to_owned(),
                    };
                    let body = request.into_body().collect().await?.to_bytes();
                    let mut response = Response::new(Full::<Bytes>::new(body));
                    response.headers_mut().insert("x-framed", framed.parse().unwrap());
                    Ok::<_, hyper::Error>(response)
                }
            });
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(socket), service));
        }
    });
    (addr, served)
}

async fn connect(proxy: &Proxy) -> TcpStream {
    TcpStream::connect(proxy.url().trim_start_matches("http://")).await.unwrap()
}

/// One answer's head (lower-cased) and body, by its `Content-Length`.
async fn answer(socket: &mut TcpStream) -> (String, Vec<u8>) {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length: usize =
                head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
            if raw.len() >= end + 4 + length {
                return (head, raw[end + 4..end + 4 + length].to_vec());
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut chunk)).await.unwrap().unwrap();
        assert!(n > 0, "connection closed mid-answer: {}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn a_chunked_body_is_forwarded_whole() {
    let proxy = Proxy::start(&echo().await, Arc::new(NoFaults)).await.unwrap();
    let mut socket = connect(&proxy).await;
    socket
        .write_all(
            b"POST / HTTP/1.1\r\nHost: proxy\r\nX-Amz-Target: DynamoDB_20120810.PutItem\r\n\
              Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
    let (head, body) = answer(&mut socket).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(body, b"hello world");
    assert!(head.contains("x-framed: content-length 11"), "de-chunked upstream: {head}");
    // The connection stays open for the next request.
    socket.write_all(b"POST / HTTP/1.1\r\nHost: proxy\r\nContent-Length: 2\r\n\r\nok").await.unwrap();
    assert_eq!(answer(&mut socket).await.1, b"ok");
}

#[tokio::test]
async fn the_rules_see_a_chunked_body_whole() {
    let rules = RefuseRecipients::new("refused-", NoFaults);
    let proxy = Proxy::start(&echo().await, Arc::new(rules)).await.unwrap();
    let mut socket = connect(&proxy).await;
    let json = br#"{"Destination": {"ToAddresses": ["refused-1@example.com"]}}"#;
    let (first, second) = json.split_at(20);
    let mut request =
        b"POST /v2/email/outbound-emails HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for part in [first, second] {
        request.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        request.extend_from_slice(part);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    socket.write_all(&request).await.unwrap();
    let (head, body) = answer(&mut socket).await;
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert!(head.contains("x-amzn-errortype: messagerejected"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("refused-1@example.com"));
    assert_eq!(proxy.injected().get("refused ses:SendEmail"), Some(&1));
}

#[tokio::test]
async fn a_client_that_expects_100_continue_gets_it_then_its_answer() {
    let proxy = Proxy::start(&echo().await, Arc::new(NoFaults)).await.unwrap();
    let mut socket = connect(&proxy).await;
    socket
        .write_all(b"PUT /object HTTP/1.1\r\nHost: proxy\r\nContent-Length: 7\r\nExpect: 100-continue\r\n\r\n")
        .await
        .unwrap();
    let mut interim = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut interim)).await.unwrap().unwrap();
    let interim = String::from_utf8_lossy(&interim[..n]).to_string();
    assert!(interim.starts_with("HTTP/1.1 100 Continue\r\n\r\n"), "{interim:?}");
    socket.write_all(b"payload").await.unwrap();
    let (head, body) = answer(&mut socket).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(body, b"payload");
    assert!(!head.contains("expect"), "{head}");
}

#[tokio::test]
async fn a_dropped_answer_closes_the_connection_after_the_upstream_applied_it() {
    let rules = ScriptedFaults::new().then("dynamodb:PutItem", Fault::DropResponse);
    let (upstream, served) = echo_counting().await;
    let proxy = Proxy::start(&upstream, Arc::new(rules)).await.unwrap();
    let mut socket = connect(&proxy).await;
    socket
        .write_all(
            b"POST / HTTP/1.1\r\nHost: proxy\r\nX-Amz-Target: DynamoDB_20120810.PutItem\r\nContent-Length: 2\r\n\r\n{}",
        )
        .await
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut rest)).await.unwrap().unwrap();
    assert!(rest.is_empty(), "no answer: {}", String::from_utf8_lossy(&rest));
    assert_eq!(served.load(Ordering::SeqCst), 1, "forwarded: its effect happened upstream");
    assert_eq!(proxy.injected().get("lost response dynamodb:PutItem"), Some(&1));
}
