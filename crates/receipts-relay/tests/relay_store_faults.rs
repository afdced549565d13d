//! Review round 2 (fixed): since a permanent relay failure is no longer the Streams checkpoint, every
//! DynamoDB error `classify` calls `Other` is a receipt given up on for good: the row is
//! marked FAILED, the stream goes past it, and no retry ever sends it. `Other` includes
//! conditions an operator or a moment fixes: a marker table not there yet (a deploy order, a
//! restore under a new name), and a 5xx whose body names no code the classifier lists. The
//! same reasoning that makes an SES account-level refusal `Blocked` (retried) applies, but the
//! store's faults are not read that way.

use std::io::{Read, Write};
use std::net::TcpListener;

use aws_lambda_events::event::dynamodb::Event;
use aws_sdk_dynamodb::types::AttributeValue;
use effects::outbox::row_item;
use effects::{PaymentEvent, Policy, RecordingSender};
use idempotency::{Config, Idempotency};
use idempotency_dynamodb::testing::{fresh_store, sdk_config, unique_name};
use idempotency_dynamodb::DynamoDbStore;
use lambda_runtime::{Context, LambdaEvent};
use receipts_relay::{Alerts, Receipts, MARKER_LEASE};
use triggers::streams::{process, Options};

async fn row_status(client: &aws_sdk_dynamodb::Client, table: &str, event_id: &str) -> String {
    let row = client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(effects::outbox::row_key(event_id)))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    row.item().unwrap()["status"].as_s().unwrap().clone()
}

/// An outbox table with a pending row for a new event, and the stream record of its insert.
async fn pending_row(client: &aws_sdk_dynamodb::Client) -> (String, String, Event) {
    let outbox_table = unique_name("outbox");
    effects::tables::create_outbox_table(client, &outbox_table).await.unwrap();
    let event_id = unique_name("pay");
    let to = format!("{}@example.com", unique_name("cust"));
    let mut payment = PaymentEvent::parse(&format!(
        r#"{{"event_id": "{event_id}", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}}"#
    ))
    .unwrap();
    payment.receipt_email = Some(to.clone());
    let item = row_item(&payment, &to, "2026-11-18T11:06:40.123Z");
    client.put_item().table_name(&outbox_table).set_item(Some(item)).send().await.unwrap();
    let sample = include_str!("../../../events/dynamodb-stream-outbox.json")
        .replace("alice@example.com", &to)
        .replace("pay_0001", &event_id);
    (outbox_table, event_id, serde_json::from_str(&sample).unwrap())
}

/// The marker table is missing (ResourceNotFoundException, `Other`): the receipt's row is
/// marked FAILED and the stream goes on. Once the table exists, nothing sends that receipt.
#[tokio::test]
async fn a_missing_marker_table_is_not_a_receipt_given_up_on() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let (outbox_table, event_id, event) = pending_row(&client).await;
    let missing = DynamoDbStore::new(client.clone(), unique_name("not-yet-created"));
    let markers = Idempotency::new(missing, Config::default().lease(MARKER_LEASE));
    let sender = RecordingSender::new();
    let relay = Receipts::new(markers, &sender, &outbox_table, Policy::AtMostOnce)
        .with_alerts(Alerts::new("test").published(false));
    let options = Options { metrics: false, ..Options::new("test") };
    let response = process(&relay, LambdaEvent::new(event, Context::default()), &options).await;
    let status = row_status(&client, &outbox_table, &event_id).await;
    assert!(sender.sent().is_empty());
    assert!(
        !response.batch_item_failures.is_empty() && status == "PENDING",
        "a table an operator can create is not a verdict on the receipt; got checkpoint {:?}, row {status}: \
         the stream went past it and the receipt is never sent",
        response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect::<Vec<_>>()
    );
}

/// A DynamoDB endpoint that answers every request `503` with an empty body (a load balancer's
/// answer, after the SDK's own retries): `Other`, permanent; the row is marked FAILED.
#[tokio::test]
async fn a_server_error_on_the_marker_claim_is_not_a_receipt_given_up_on() {
    claim_meets(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n").await;
}

/// Even a store error the store itself calls permanent (a request refused as invalid: a bug or
/// a schema drift, fixed by a deploy) is no verdict on the receipt: retried, the row stays
/// PENDING. Only key reuse on the marker or an unreadable row fails a receipt for good.
#[tokio::test]
async fn a_refused_marker_claim_is_not_a_receipt_given_up_on() {
    let body = r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"One or more parameter values were invalid"}"#;
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    claim_meets(Box::leak(answer.into_bytes().into_boxed_slice())).await;
}

/// A relay whose marker table answers every request with `answer`: nothing is sent, the record
/// is not failed permanently and the row stays PENDING.
async fn claim_meets(answer: &'static [u8]) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            let _ = stream.write_all(answer);
                        }
                    }
                }
            });
        }
    });
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let (outbox_table, event_id, event) = pending_row(&client).await;
    let failing_conf = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .build();
    let failing = aws_sdk_dynamodb::Client::from_conf(failing_conf);
    let table = store.table().to_owned();
    let markers = Idempotency::new(DynamoDbStore::new(failing, table), Config::default().lease(MARKER_LEASE));
    let sender = RecordingSender::new();
    // The relay marks rows through the markers' client; the failure record goes there too, so
    // the row stays as the real table has it.
    let relay = Receipts::new(markers, &sender, &outbox_table, Policy::AtMostOnce)
        .with_alerts(Alerts::new("test").published(false));
    let result = triggers::streams::Handler::handle(&relay, &event.records[0], None).await;
    let status = row_status(&client, &outbox_table, &event_id).await;
    assert!(sender.sent().is_empty());
    let err = result.clone().unwrap_err();
    assert_ne!(
        err.retry,
        triggers::Retry::Permanent,
        "a 503 is classified permanent ({}), so the Streams driver goes past the receipt for good (row {status})",
        err.reason
    );
    assert_eq!(status, "PENDING", "{}", err.reason);
}
