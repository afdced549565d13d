//! The relay's permanent path never marks FAILED ("not sent", for the operator who resends FAILED
//! receipts) a row whose email went out: when the `mark` that follows a send SES accepted fails
//! (a 503 without a listed error code on that UpdateItem, after the SDK's own retries, is
//! `StoreErrorKind::Other`, permanent), the marker says SENT with the message id, and the stream
//! goes past the row, so nothing but its retry, or the outbox sweep, would ever correct it.

use crate::support;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use crate::support::{Pending, UNAVAILABLE};
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::endpoint;
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{Policy, RecordingSender};
use effectively_once_lambda::RecordResult;
use receipts_relay::{Sweep, Sweeper, MARKER_LEASE};

/// Reads one HTTP/1.1 request (head and Content-Length body); `None` at end of stream.
fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut data = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_string();
            let len = head
                .lines()
                .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
                .map(|(_, v)| v.trim().parse::<usize>().unwrap())
                .unwrap_or(0);
            let mut body = data[end + 4..].to_vec();
            while body.len() < len {
                let n = stream.read(&mut buf).ok()?;
                if n == 0 {
                    return None;
                }
                body.extend_from_slice(&buf[..n]);
            }
            return Some((head, body));
        }
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
}

/// A proxy to the local AWS that answers `answer` to every UpdateItem whose body contains
/// `needle`, and forwards the rest.
fn proxy(upstream: String, needle: String, answer: &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let upstream = upstream.trim_start_matches("http://").to_owned();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut client) = stream else { continue };
            let (upstream, needle) = (upstream.clone(), needle.clone());
            std::thread::spawn(move || {
                while let Some((head, body)) = read_request(&mut client) {
                    let text = String::from_utf8_lossy(&body);
                    if head.contains("UpdateItem") && text.contains(&needle) {
                        let _ = client.write_all(answer);
                        continue;
                    }
                    let head: Vec<&str> =
                        head.lines().filter(|l| !l.to_ascii_lowercase().starts_with("connection:")).collect();
                    let mut up = TcpStream::connect(&upstream).unwrap();
                    up.write_all(format!("{}\r\nConnection: close\r\n\r\n", head.join("\r\n")).as_bytes()).unwrap();
                    up.write_all(&body).unwrap();
                    let mut answer = Vec::new();
                    up.read_to_end(&mut answer).unwrap();
                    if client.write_all(&answer).is_err() {
                        return;
                    }
                    // The answer said `Connection: close`: the SDK opens a new connection.
                    return;
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn a_server_error_on_mark_after_a_send_does_not_mark_the_row_failed() {
    mark_meets(UNAVAILABLE).await;
}

/// Not only a transient fault: any failed `mark` after an outcome is retryable, even one the
/// store calls permanent (a request it refuses as invalid), since the receipt's fate is in its
/// marker and a FAILED row would say "not sent" over a sent email.
#[tokio::test]
async fn a_refused_mark_after_a_send_does_not_mark_the_row_failed() {
    mark_meets(support::refused_as_invalid()).await;
}

/// The stream gave up on the record whose `mark` failed after the send (its retries spent, or
/// its record trimmed before the store came back): the row is still PENDING, in the pending
/// index. The outbox sweep settles it from the marker: SENT with the message id, no second email,
/// and the next sweep finds nothing.
#[tokio::test]
async fn a_receipt_sent_but_not_marked_is_marked_by_the_sweep_without_a_second_email() {
    let p = Pending::new("cust").await;
    let sender = RecordingSender::new();
    send_and_fail_mark(&p, &sender, UNAVAILABLE).await.unwrap_err();
    assert_eq!(p.status().await, "PENDING");

    let direct = Idempotency::new(p.store.clone(), Config::default().with_lease(MARKER_LEASE));
    let relay = support::relay(direct, &sender, &p.outbox_table, Policy::AtMostOnce);
    let sweeper = Sweeper::new(relay, Sweep { after: Duration::from_secs(1800), ..Sweep::default() });
    // Long after the row was written (the sample's time).
    let later_ms = 4_102_444_800_000;
    let swept = sweeper.run(later_ms, None).await;
    assert_eq!((swept.found, swept.settled, swept.sent, swept.unsent), (1, 1, 0, 0), "{swept:?}");
    assert_eq!(sender.sent().len(), 1, "not sent twice");
    let row = p.row().await.unwrap();
    assert_eq!((row.status.as_str(), row.message_id.is_some()), ("SENT", true));
    let again = sweeper.run(later_ms, None).await;
    assert_eq!((again.found, again.complete), (0, true), "the marked row left the pending index");
}

/// `p`'s receipt through a relay sending with `sender` whose `mark` (its UpdateItem, conditioned
/// on the row's existence) meets `answer`, all else passing: the relay's result.
async fn send_and_fail_mark(p: &Pending, sender: &RecordingSender, answer: &'static [u8]) -> RecordResult {
    let port = proxy(endpoint(), "attribute_exists(#pk)".into(), answer);
    let proxied = support::client_at(port).await;
    let markers =
        Idempotency::new(DynamoDbStore::new(proxied, p.store.table()), Config::default().with_lease(MARKER_LEASE));
    let relay = support::relay(markers, sender, &p.outbox_table, Policy::AtMostOnce);
    effectively_once_lambda::Handler::<effectively_once_lambda::events::EventRecord>::handle(
        &relay,
        &p.event.records[0],
        &Default::default(),
    )
    .await
}

/// A receipt sent through a relay whose `mark` meets `answer`: the email goes out once, the
/// row is not FAILED, the record is retryable, and the retry (through the real table) replays
/// the marker and marks the row SENT without a second email.
async fn mark_meets(answer: &'static [u8]) {
    let p = Pending::new("cust").await;
    let (store, event_id) = (&p.store, &p.event_id);

    // `mark`'s UpdateItem (its condition is the row's existence) meets 503s; all else passes.
    let direct = Idempotency::new(store.clone(), Config::default().with_lease(MARKER_LEASE));
    let sender = RecordingSender::new();
    let result = send_and_fail_mark(&p, &sender, answer).await;
    assert_eq!(sender.sent().len(), 1, "the email went out");
    let marker = effectively_once::Store::get(store, &format!("email#{event_id}")).await.unwrap().unwrap();
    assert!(marker.response.unwrap_or_default().contains("sent"), "the marker records the send");
    let row = p.row().await.unwrap();
    let status = row.status.as_str();
    assert_ne!(
        status, "FAILED",
        "the row says FAILED ({:?}) for a receipt SES accepted; relay result {result:?}",
        row.failure_reason
    );
    let err = result.unwrap_err();
    assert_ne!(err.retry, effectively_once_lambda::Retry::Never, "{}", err.reason);

    // The stream's retry, with the store reachable again.
    let retry = support::relay(direct, &sender, &p.outbox_table, Policy::AtMostOnce);
    let again = effectively_once_lambda::Handler::<effectively_once_lambda::events::EventRecord>::handle(
        &retry,
        &p.event.records[0],
        &Default::default(),
    )
    .await;
    assert_eq!(again.unwrap(), effectively_once_lambda::Handled::Duplicate, "the marker's outcome replayed");
    assert_eq!(sender.sent().len(), 1, "not sent twice");
    let row = p.row().await.unwrap();
    assert_eq!(row.status.as_str(), "SENT");
}
