//! The recipient rule read at send time meets a receipt an earlier attempt already handled: the
//! account's registered address is read on every attempt, and the email marker hashes the
//! recipient. An attempt that sent (marker completed) and died before marking the row leaves the
//! stream record to a retry, which may read another registered address (the customer changed it
//! meanwhile, or registered one for the first time). The receipt's fate is the marker's: the row
//! is marked as the earlier attempt left it, and nothing is sent again.
//!
//! A registered address the relay cannot read is the account owner's data, not a fault a retry
//! will cure: it must not hold the stream (MaximumRetryAttempts -1, a day of retries on the
//! shard) nor leave the row PENDING for good.

use crate::support;
use crate::support::Pending;
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_effects::{send_once, Policy, RecordingSender};
use effectively_once_lambda::{Handled, Handler, Retry};
use payments::{receipt_key, Profiles, RowStatus};

async fn ledger_with_profile(p: &Pending, address: &str) -> String {
    let ledger_table = unique_name("ledger");
    payments::tables::create_ledger_table(&p.client, &ledger_table).await.unwrap();
    Profiles::new(p.client.clone(), &ledger_table).put("acct_42", address).await.unwrap();
    ledger_table
}

/// Sent to the registered address, then the attempt died before marking the row; the
/// customer changed the address; the redelivered insert replays the marker: the row is SENT with
/// the earlier message id, and the new address gets nothing.
#[tokio::test]
async fn a_receipt_sent_before_the_registered_address_changed_is_marked_sent_not_failed() {
    let p = Pending::new("moved").await;
    let old = format!("{}@bank.example", unique_name("old"));
    let ledger_table = ledger_with_profile(&p, &old).await;
    let markers = p.markers();

    // The first attempt, as the relay makes it: the receipt to the registered address, under
    // the receipt's marker; then it died before `Outbox::mark`.
    let first = RecordingSender::new();
    let key = receipt_key(&p.event_id).unwrap();
    let sent = send_once(&markers, &first, &key, &p.receipt().message(&old), Policy::AtMostOnce).await.unwrap();
    assert_eq!(first.sent().len(), 1);
    assert_eq!(p.status().await, "PENDING");

    // The customer registers a new address before the stream retries the record.
    let new = format!("{}@bank.example", unique_name("new"));
    Profiles::new(p.client.clone(), &ledger_table).put("acct_42", &new).await.unwrap();

    let sender = RecordingSender::new();
    let relay = support::relay(markers, &sender, &p.outbox_table, Policy::AtMostOnce).with_profiles(&ledger_table);
    let result = Handler::<effectively_once_lambda::events::EventRecord>::handle(
        &relay,
        &p.event.records[0],
        &Default::default(),
    )
    .await;

    assert!(sender.sent().is_empty(), "no second receipt: {:?}", sender.sent());
    let row = p.row().await.unwrap();
    assert_eq!(
        row.status,
        RowStatus::Sent,
        "the receipt went out (marker {sent:?}); the row says {:?} ({:?}); handle gave {result:?}",
        row.status,
        row.failure_reason
    );
    assert_eq!(result, Ok(Handled::Duplicate));
}

/// A profile whose `receipt_email` is not an address (written by another tool than
/// `Profiles::put`): the receipt is held back or failed for good, not retried for a day while
/// every receipt behind it on the shard waits.
#[tokio::test]
async fn a_malformed_registered_address_does_not_hold_the_stream() {
    let p = Pending::new("badprofile").await;
    let ledger_table = ledger_with_profile(&p, "placeholder@bank.example").await;
    p.client
        .put_item()
        .table_name(&ledger_table)
        .item("pk", aws_sdk_dynamodb::types::AttributeValue::S("account#acct_42".into()))
        .item("sk", aws_sdk_dynamodb::types::AttributeValue::S("profile".into()))
        .item("receipt_email", aws_sdk_dynamodb::types::AttributeValue::S("n/a".into()))
        .send()
        .await
        .unwrap();

    let sender = RecordingSender::new();
    let relay = support::relay(p.markers(), &sender, &p.outbox_table, Policy::AtMostOnce).with_profiles(&ledger_table);
    let result = Handler::<effectively_once_lambda::events::EventRecord>::handle(
        &relay,
        &p.event.records[0],
        &Default::default(),
    )
    .await;

    assert!(sender.sent().is_empty());
    assert!(
        !matches!(&result, Err(e) if matches!(e.retry, Retry::Now | Retry::AfterFix)),
        "a malformed profile is retried (the shard holds up to 24 h): {result:?}"
    );
    assert_ne!(p.status().await, "PENDING", "the row's fate is recorded");
}
