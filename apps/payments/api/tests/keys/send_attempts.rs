//! A send is one attempt: a refusal must mean nothing landed, because a refused send releases a
//! free key. With the SDK's retries, an attempt that may have landed (a 500) followed by a
//! throttled retry (a 4xx) read as a refusal: the key was freed while the first body may have
//! been on the queue, and another body under the key was answered 202 and sent. Against a fake
//! SQS endpoint that answers 500, then 400 `RequestThrottled`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effectively_once::{Config, Idempotency, InMemoryStore};
use lambda_http::Body;
use payments_api::{Api, SqsQueue};
use serde_json::{json, Value};

/// A fake SQS endpoint: answers the first request 500 (InternalError: the message may have been
/// stored), the next `throttled` requests 400 RequestThrottled, the rest 200. Records every
/// request body it received (the messages that may have landed).
fn fake_sqs(throttled: usize) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let seen = seen2.clone();
            let count = count.clone();
            std::thread::spawn(move || loop {
                // Read one request: headers, then Content-Length bytes.
                let mut buf = Vec::new();
                let mut byte = [0u8; 1];
                while !buf.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte) {
                        Ok(1) => buf.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()))
                    .unwrap_or(0);
                let mut body = vec![0u8; len];
                if stream.read_exact(&mut body).is_err() {
                    return;
                }
                seen.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
                let n = count.fetch_add(1, Ordering::SeqCst);
                let (status, payload) = if n == 0 {
                    (
                        "500 Internal Server Error",
                        r#"{"__type":"com.amazonaws.sqs#InternalError","message":"internal"}"#,
                    )
                } else if n <= throttled {
                    ("400 Bad Request", r#"{"__type":"com.amazonaws.sqs#RequestThrottled","message":"Rate exceeded"}"#)
                } else {
                    ("200 OK", r#"{"MessageId":"m","MD5OfMessageBody":"x"}"#)
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{payload}",
                    payload.len()
                );
                if stream.write_all(response.as_bytes()).is_err() {
                    return;
                }
            });
        }
    });
    (port, seen)
}

fn request(key: &str, cents: i64) -> lambda_http::Request {
    let mut event: Value = serde_json::from_str(include_str!("../../../../../events/http-payment.json")).unwrap();
    event["headers"]["idempotency-key"] = json!(key);
    event["body"] = json!(format!(r#"{{"account_id": "acct_l", "amount_cents": {cents}, "currency": "USD"}}"#));
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

#[tokio::test]
async fn a_send_that_may_have_landed_holds_the_key_for_its_body() {
    // Throttled on every retry of X's send (attempts 2 and 3), then 200 for whatever follows.
    let (port, seen) = fake_sqs(2);
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "test"))
        .load()
        .await;
    let queue =
        SqsQueue::new(aws_sdk_sqs::Client::new(&sdk), format!("http://127.0.0.1:{port}/000000000000/payments"), false);
    let api = Api::new(Idempotency::new(InMemoryStore::new(), Config::default()), queue);

    let first = api.handle(request("pay_sqs_retry", 100)).await;
    let second = api.handle(request("pay_sqs_retry", 999)).await;
    let Body::Text(text) = second.body() else { panic!() };
    let bodies: Vec<i64> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|b| {
            let outer: Value = serde_json::from_str(b).unwrap();
            let inner: Value = serde_json::from_str(outer["MessageBody"].as_str().unwrap()).unwrap();
            inner["amount_cents"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(bodies, vec![100], "one attempt for X's send, whose outcome is unknown; Y not sent");
    assert_eq!(first.status().as_u16(), 503);
    assert_ne!(second.status().as_u16(), 202, "Y under X's key: {text}");
}
