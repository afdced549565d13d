//! Review (issue 14): `Tx::otherwise` on the put that carries the record is never consulted. An
//! item already there without a record (written by a backfill, or by an earlier build: the case
//! `Otherwise::AlreadyApplied` exists for) is read as a malformed carried record instead, an
//! error the Lambda drivers retry (`ErrorKind::Store` converts to retryable): the message is
//! redelivered until the DLQ on SQS, and stalls the shard on a stream.
#![cfg(feature = "test-util")]

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency, Key, Outcome};
use effectively_once_dynamodb::testing::fresh_store_and_table;
use effectively_once_dynamodb::{CommitOnce, Otherwise, Tx};
use serde::Serialize;

#[derive(Serialize)]
struct Order<'a> {
    id: &'a str,
    total_cents: i64,
}

#[tokio::test]
async fn the_carrier_puts_otherwise_answers_an_item_without_a_record() {
    let (store, orders) = fresh_store_and_table("review-orders").await;
    // The order is there already, written before the consumer kept records.
    store
        .client()
        .put_item()
        .table_name(orders.name())
        .item("id", AttributeValue::S("order#o-1".into()))
        .item("total_cents", AttributeValue::N("500".into()))
        .send()
        .await
        .unwrap();
    let idempotency = Idempotency::new(store.clone(), Config::default());
    let build = |tx: &mut Tx<String>| {
        let put = tx.put(&orders, &Order { id: "order#o-1", total_cents: 500 })?;
        tx.carry_record(put)?;
        tx.otherwise(put, |_| Otherwise::AlreadyApplied { response: "stored".into(), same_payload: true });
        Ok("stored".to_owned())
    };
    let outcome = idempotency.commit_once(&Key::new("orders", "o-1").unwrap(), &500, build).await;
    assert!(matches!(outcome, Ok(Outcome::Replayed(ref r)) if r == "stored"), "{outcome:?}");
}
