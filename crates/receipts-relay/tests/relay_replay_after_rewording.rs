//! Review finding (issue 11; fixed: the marker hashes the receipt's identity, not its
//! wording): the email marker's payload hash covers the whole rendered
//! message (subject and body wording included). A relay release that changes the receipt's
//! wording, meeting a record an older release already sent (a batch retried whole after a
//! timeout or crash, or a stream replayed from TRIM_HORIZON by a replaced mapping), gets
//! `KeyReused`: a *permanent* failure, which the stream driver reports as the checkpoint. With
//! MaximumRetryAttempts -1 the shard is then held for 24 h and the batch discarded, taking the
//! new receipts behind it (see crates/local/tests/review_relay_stream.rs for that mechanism).
//! The receipt was sent once and its marker says so: the record should be acked as a duplicate.

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

#[tokio::test]
async fn a_replay_after_a_wording_change_is_a_duplicate() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let outbox_table = unique_name("outbox");
    effects::tables::create_outbox_table(&client, &outbox_table).await.unwrap();
    let event_id = unique_name("pay");
    let to = format!("{}@example.com", unique_name("replay"));
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

    // The previous release sent this receipt, worded its own way, and completed the marker.
    let mut earlier = ReceiptRow::from_item(&item).unwrap().message();
    earlier.text = earlier.text.replace(" was credited ", " has been credited ");
    let old_sender = RecordingSender::new();
    let key = email_key(&event_id).unwrap();
    send_once(&markers, &old_sender, &key, &earlier, Policy::AtMostOnce).await.unwrap();
    assert_eq!(old_sender.sent().len(), 1);

    // The current release meets the same record again.
    let sender = RecordingSender::new();
    let relay = Receipts::new(markers.clone(), &sender, &outbox_table, Policy::AtMostOnce)
        .with_alerts(Alerts::new("review").published(false));
    let options = Options { metrics: false, ..Options::new("review") };
    let mut context = Context::default();
    context.deadline = markers.config().now_ms() + 30_000;
    let direct = triggers::streams::Handler::handle(&relay, &event.records[0], None).await;
    let response = process(&relay, LambdaEvent::new(event, context), &options).await;
    assert!(sender.sent().is_empty(), "never a second copy");
    assert!(
        response.batch_item_failures.is_empty(),
        "the receipt was sent once and its marker records it: a duplicate, not a failure holding the shard; \
         the relay answered {direct:?}"
    );
    let row = client
        .get_item()
        .table_name(&outbox_table)
        .key("pk", AttributeValue::S(effects::outbox::row_key(&event_id)))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert_eq!(row.item().unwrap()["status"].as_s().unwrap(), "SENT");
}
