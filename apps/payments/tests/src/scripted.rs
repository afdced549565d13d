//! A scripted DynamoDB endpoint on loopback, for answers the local AWS never gives (transaction
//! conflicts, cancellation reasons such as a full item collection).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use effectively_once_dynamodb::DynamoDbStore;

/// A DynamoDB endpoint that answers the n-th request with `script[n]` (a JSON error body with
/// HTTP 400, or a success body with 200), and `{}` with 200 after the script; it records the
/// operations asked for.
pub fn scripted(script: Vec<(u16, String)>) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let script = Arc::new(Mutex::new(script.into_iter()));
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let (script, log) = (script.clone(), log.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let (mut length, mut target) = (0usize, String::new());
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(value) = lower.strip_prefix("content-length:") {
                            length = value.trim().parse().unwrap_or(0);
                        }
                        if let Some(value) = lower.strip_prefix("x-amz-target:") {
                            target = value.trim().to_owned();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    log.lock().unwrap().push(target);
                    let (status, reply) = script.lock().unwrap().next().unwrap_or((200, "{}".to_owned()));
                    let reason = if status == 200 { "OK" } else { "Bad Request" };
                    let response = format!(
                        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n{reply}",
                        reply.len()
                    );
                    if writer.write_all(response.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, seen)
}

pub fn cancelled(codes: &[&str]) -> (u16, String) {
    let reasons: Vec<String> = codes.iter().map(|code| format!(r#"{{"Code":"{code}"}}"#)).collect();
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled","CancellationReasons":[{}]}}"#,
        reasons.join(",")
    );
    (400, body)
}

/// A store on [`scripted`]'s endpoint, the SDK's own retries off so each answer is seen once.
pub fn scripted_store(port: u16, table: &str) -> DynamoDbStore {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "scripted"))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), table)
}
