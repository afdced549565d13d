//! Review round 2: the relay reads a deleted outbox row ("an erasure, a cleanup, its TTL", its
//! own comment) from `mark`'s `Malformed`, which comes only after `send_once`: the receipt is
//! emailed to the address the stream image still carries, then the record is acked as
//! `Skipped` and logged "skipped". A row erased on the customer's request still gets its email
//! (and the metrics and log say it was skipped, not sent).

use effects::{Policy, RecordingSender};
use idempotency::{Config, Idempotency};
use idempotency_dynamodb::testing::{fresh_store, unique_name};
use receipts_relay::{Alerts, Receipts, MARKER_LEASE};

#[tokio::test]
#[ignore = "review finding: a receipt whose outbox row was deleted (erased) is still emailed, then reported Skipped"]
async fn a_deleted_row_is_not_emailed() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let outbox_table = unique_name("outbox");
    effects::tables::create_outbox_table(&client, &outbox_table).await.unwrap();
    let event_id = unique_name("pay");
    let to = format!("{}@example.com", unique_name("erased"));
    // The stream captured the insert; the row was deleted before the relay ran (no row here).
    let sample = include_str!("../../../events/dynamodb-stream-outbox.json")
        .replace("alice@example.com", &to)
        .replace("pay_0001", &event_id);
    let event: aws_lambda_events::event::dynamodb::Event = serde_json::from_str(&sample).unwrap();
    let markers = Idempotency::new(store, Config::default().lease(MARKER_LEASE));
    let sender = RecordingSender::new();
    let relay = Receipts::new(markers, &sender, &outbox_table, Policy::AtMostOnce)
        .with_alerts(Alerts::new("test").published(false));
    let result = triggers::streams::Handler::handle(&relay, &event.records[0], None).await;
    assert_eq!(result, Ok(triggers::Disposition::Skipped), "reported skipped");
    assert!(sender.sent().is_empty(), "reported Skipped, yet {} email(s) went to the erased row's address", sender.sent().len());
}
