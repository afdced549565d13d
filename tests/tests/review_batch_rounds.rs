//! Review of issue 15 (batch commit, as fixed in 3ed80c3): when a batch's rounds run out, the
//! members still live are reported retryable (undecided), but the group's later members that had
//! gone alone are then committed one at a time anyway: a later event of an account is decided
//! before an earlier one. Needs transaction conflicts, which the local AWS never answers, so a
//! scripted DynamoDB endpoint on loopback answers instead.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use effectively_once::Outcome;
use effectively_once_dynamodb::{DynamoDbStore, MAX_ROUNDS};
use end_to_end::LedgerHarness;
use payments::{Ledger, Posting};

/// A DynamoDB endpoint that answers the n-th request with `script[n]` (a JSON error body with
/// HTTP 400, or a success body with 200), and `{}` with 200 after the script; it records the
/// operations asked for.
fn scripted(script: Vec<(u16, String)>) -> (u16, Arc<Mutex<Vec<String>>>) {
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

fn cancelled(codes: &[&str]) -> (u16, String) {
    let reasons: Vec<String> = codes.iter().map(|code| format!(r#"{{"Code":"{code}"}}"#)).collect();
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled","CancellationReasons":[{}]}}"#,
        reasons.join(",")
    );
    (400, body)
}

/// One account, `[a0: +100, a1, a2: -100]`. Round 1's transaction (a0, a1, a2 each an entry
/// and a record, then the balance) is cancelled by a1's entry: a1 goes alone and takes a2 with
/// it; a0 is sent again. Every later round is cancelled by a conflict on the balance, until the
/// rounds run out and a0 is reported retryable: undecided, redelivered later. Then a1 and a2
/// are committed alone: a2, after a0 in its account, is decided before a0 (here applied; on a
/// real table, the debit without a0's credit is rejected and the rejection recorded for good).
#[tokio::test]
async fn rounds_run_out_and_a_later_member_is_not_committed_alone() {
    let mut script = vec![cancelled(&["None", "None", "ConditionalCheckFailed", "None", "None", "None", "None"])];
    for _ in 1..MAX_ROUNDS {
        script.push(cancelled(&["None", "None", "TransactionConflict"]));
    }
    let (port, seen) = scripted(script);
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "review"))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), "idempotency");
    let ledger = Ledger::new(store, "ledger", None);
    let events = vec![
        LedgerHarness::event("rounds-a0", "acct-rounds", 100, "USD"),
        LedgerHarness::event("rounds-a1", "acct-rounds", 5, "USD"),
        LedgerHarness::event("rounds-a2", "acct-rounds", -100, "USD"),
    ];
    let results = ledger.post_batch(&events).await;
    let requests = seen.lock().unwrap().clone();
    assert!(
        results[0].as_ref().is_err_and(|e| e.is_retryable()),
        "a0 is undecided after {} requests: {results:?}",
        requests.len()
    );
    assert!(
        !matches!(results[2], Ok(Outcome::Fresh(Posting::Applied)) | Ok(Outcome::Fresh(Posting::Rejected { .. }))),
        "a2 decided while a0, before it in its account, is undecided: {results:?}; requests {requests:?}"
    );
}
