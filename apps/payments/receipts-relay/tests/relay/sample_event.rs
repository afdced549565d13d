//! The receipts relay end to end on the local AWS: a payment's outbox row, the stream event in
//! `events/`, and the email the local SES recorded.

use crate::support;
use std::time::Duration;

use aws_lambda_events::event::dynamodb::Event;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use effectively_once_effects::testing::emails_to;
use effectively_once_effects::Policy;
use effectively_once_lambda::streams::{process, Options};
use lambda_runtime::{Context, LambdaEvent};
use payments::{Ledger, PaymentEvent};
use receipts_relay::Receipts;

#[tokio::test]
async fn an_outbox_insert_sends_one_receipt_and_marks_the_row_even_when_redelivered() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let (ledger_table, outbox_table) = (unique_name("ledger"), unique_name("outbox"));
    payments::tables::create_ledger_table(&client, &ledger_table).await.unwrap();
    payments::tables::create_outbox_table(&client, &outbox_table).await.unwrap();

    // The sample stream event, for a recipient of this test's own.
    let to = format!("{}@example.com", unique_name("alice"));
    let sample = include_str!("../../../../../events/dynamodb-stream-outbox.json").replace("alice@example.com", &to);
    let event: Event = serde_json::from_str(&sample).unwrap();

    // The payment that wrote that row.
    let ledger = Ledger::new(store.clone(), &ledger_table, Some(outbox_table.clone()));
    let mut payment = PaymentEvent::parse(
        r#"{"event_id": "pay_0001", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}"#,
    )
    .unwrap();
    payment.receipt_email = Some(to.clone());
    ledger.post(&payment).await.unwrap();

    let ses = support::verified_ses("receipts@example.com").await;
    let markers = Idempotency::new(store, Config::default().with_lease(Duration::from_secs(60)));
    let relay = Receipts::new(markers, ses, &outbox_table, Policy::default());
    let options = Options { emit_metrics: false, ..Options::new("test") };
    for _ in 0..2 {
        let response = process(&relay, LambdaEvent::new(event.clone(), Context::default()), &options).await;
        assert!(response.batch_item_failures.is_empty());
    }
    assert_eq!(emails_to(&to).len(), 1, "one receipt for two deliveries of the stream record");
    let row = support::row(&client, &outbox_table, "pay_0001").await.unwrap();
    assert_eq!(row.status.as_str(), "SENT");
    assert!(!row.message_id.unwrap().is_empty());
}
