//! Review (issue 14): the commit-once module promises "What no setting can do: write twice" (within the window).
//! `Config::with_dedup_window(Duration::ZERO)` is accepted and gives the record one second, so
//! a transaction of updates alone (no put to refuse the second time) is applied again by any
//! redelivery a few seconds later (an SQS visibility timeout is 30 s by default).
#![cfg(feature = "test-util")]

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency, Key, ManualClock};
use effectively_once_dynamodb::testing::fresh_store_and_table;
use effectively_once_dynamodb::{CommitOnce, Tx};
use serde::Serialize;

#[derive(Serialize)]
struct Id<'a> {
    id: &'a str,
}

#[tokio::test]
async fn a_zero_window_does_not_apply_an_update_twice() {
    let (store, table) = fresh_store_and_table("review-counter").await;
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_clock(clock.clone()).with_dedup_window(Duration::ZERO);
    let idempotency = Idempotency::new(store.clone(), config);
    let key = Key::new("add", "e-1").unwrap();
    let add = |tx: &mut Tx<()>| {
        tx.update(&table, &Id { id: "counter" }, |u| {
            u.update_expression("ADD #n :one")
                .expression_attribute_names("#n", "n")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
        })?;
        Ok(())
    };
    let first = idempotency.commit_once(&key, "e-1", add).await;
    clock.advance(Duration::from_secs(30));
    let redelivery = idempotency.commit_once(&key, "e-1", add).await;
    let out = store
        .client()
        .get_item()
        .table_name(table.name())
        .key("id", AttributeValue::S("counter".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let n = out.item().and_then(|i| i.get("n")).and_then(|v| v.as_n().ok()).cloned();
    assert_eq!(n.as_deref(), Some("1"), "applied twice: {first:?} then {redelivery:?}");
}
