//! A permanent relay failure is recorded on the outbox row (FAILED, with its reason, addresses
//! redacted) and the stream goes on: the driver does not make it the checkpoint.

use aws_lambda_events::event::dynamodb::Event;
use aws_sdk_dynamodb::types::AttributeValue;
use effects::email::email_key;
use effects::outbox::{row_item, ReceiptRow};
use effects::{send_once, PaymentEvent, Policy, RecordingSender};
use idempotency::{Config, Idempotency};
use idempotency_dynamodb::testing::{fresh_store, unique_name};
use lambda_runtime::{Context, LambdaEvent};
use receipts_relay::{Alerts, Receipts, MARKER_LEASE};
use triggers::streams::{process, Options};

/// The event's marker records a receipt to another recipient (same key, another address: a
/// producer bug, an edited redrive): key reuse, which no retry changes.
#[tokio::test]
async fn key_reuse_marks_the_row_failed_redacted_and_the_stream_goes_on() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let outbox_table = unique_name("outbox");
    effects::tables::create_outbox_table(&client, &outbox_table).await.unwrap();
    let event_id = unique_name("pay");
    let to = format!("{}@example.com", unique_name("second"));
    let mut payment = PaymentEvent::parse(&format!(
        r#"{{"event_id": "{event_id}", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}}"#
    ))
    .unwrap();
    payment.receipt_email = Some(to.clone());
    let item = row_item(&payment, &to, "2026-11-18T11:06:40.123Z");
    client.put_item().table_name(&outbox_table).set_item(Some(item.clone())).send().await.unwrap();
    let sample = include_str!("../../../events/dynamodb-stream-outbox.json")
        .replace("alice@example.com", &to)
        .replace("pay_0001", &event_id);
    let event: Event = serde_json::from_str(&sample).unwrap();
    let markers = Idempotency::new(store, Config::default().lease(MARKER_LEASE));

    let mut other = ReceiptRow::from_item(&item).unwrap().message();
    other.to = "first.recipient@example.com".into();
    let first = RecordingSender::new();
    send_once(&markers, &first, &email_key(&event_id).unwrap(), &other, Policy::AtMostOnce).await.unwrap();

    let sender = RecordingSender::new();
    let relay = Receipts::new(markers.clone(), &sender, &outbox_table, Policy::AtMostOnce)
        .with_alerts(Alerts::new("test").published(false));
    let options = Options { metrics: false, ..Options::new("test") };
    let response = process(&relay, LambdaEvent::new(event, Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty(), "a permanent failure is not the checkpoint");
    assert!(sender.sent().is_empty(), "nothing sent under a reused key");
    let row = client
        .get_item()
        .table_name(&outbox_table)
        .key("pk", AttributeValue::S(effects::outbox::row_key(&event_id)))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item()
        .cloned()
        .unwrap();
    assert_eq!(row["status"].as_s().unwrap(), "FAILED");
    let reason = row["failure_reason"].as_s().unwrap();
    assert!(reason.contains("different payload"), "{reason}");
    assert!(!reason.contains(to.split('@').next().unwrap()) && !reason.contains("first.recipient"), "{reason}");
}

/// The outbox row was deleted after the stream captured its insert (an erasure, a cleanup):
/// nothing is left to mark, and the receipt is acked as skipped, no row written back.
#[tokio::test]
async fn a_deleted_row_is_skipped_not_failed() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let outbox_table = unique_name("outbox");
    effects::tables::create_outbox_table(&client, &outbox_table).await.unwrap();
    let event_id = unique_name("pay");
    let to = format!("{}@example.com", unique_name("erased"));
    let sample = include_str!("../../../events/dynamodb-stream-outbox.json")
        .replace("alice@example.com", &to)
        .replace("pay_0001", &event_id);
    let event: Event = serde_json::from_str(&sample).unwrap();
    let markers = Idempotency::new(store, Config::default().lease(MARKER_LEASE));
    let sender = RecordingSender::new();
    let relay = Receipts::new(markers, &sender, &outbox_table, Policy::AtMostOnce)
        .with_alerts(Alerts::new("test").published(false));
    let result = triggers::streams::Handler::handle(&relay, &event.records[0], None).await;
    assert_eq!(result, Ok(triggers::Disposition::Skipped));
    let row = client
        .get_item()
        .table_name(&outbox_table)
        .key("pk", AttributeValue::S(effects::outbox::row_key(&event_id)))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert!(row.item().is_none(), "no row written back");
}
