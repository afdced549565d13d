//! The orders consumer on the local AWS: one order item and one email per order, however often
//! and however close together the order arrives.

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_dynamodb::Table;
use effectively_once_effects::testing::{emails_to, fresh_table, ses_sender, unique_name, KeyAttribute};
use effectively_once_lambda::events::{Context, LambdaEvent, SqsBatchResponse};
use effectively_once_lambda::sqs::{self, Options};
use effectively_once_lambda::testing::sqs::Batch;
use orders_consumer::Orders;

async fn orders_handler() -> Orders<effectively_once_effects::SesSender> {
    let (store, _) = fresh_store().await;
    let orders = fresh_table(store.client(), "orders", KeyAttribute::string("pk"), None).await;
    Orders {
        sender: ses_sender("orders@example.com").await,
        idempotency: Idempotency::new(store, Config::default()),
        orders: Table::new(orders, "pk"),
    }
}

async fn deliver(handler: &Orders<effectively_once_effects::SesSender>, batch: &Batch) -> SqsBatchResponse {
    let options = Options { emit_metrics: false, ..Options::new("orders-consumer") };
    sqs::process(handler, LambdaEvent::new(batch.build(), Context::default()), &options).await
}

async fn order_items(handler: &Orders<effectively_once_effects::SesSender>, order_id: &str) -> usize {
    let out = handler
        .idempotency
        .store()
        .client()
        .get_item()
        .table_name(handler.orders.name())
        .key("pk", AttributeValue::S(format!("order#{order_id}")))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    usize::from(out.item().is_some())
}

/// The same order twice in one batch (the default concurrency of 10): both messages succeed (no
/// redelivery), one item is stored and one email sent. Delivered again later, nothing changes.
#[tokio::test]
async fn the_same_order_twice_in_one_batch_is_one_item_and_one_email() {
    let handler = orders_handler().await;
    let order_id = unique_name("ord");
    let email = format!("{order_id}@example.com");
    let body = format!(r#"{{"order_id": "{order_id}", "email": "{email}", "total_cents": 4200}}"#);
    let batch = Batch::new().message(body.as_str()).message(body.as_str()).message("{not an order");
    let response = deliver(&handler, &batch).await;
    let failed: Vec<_> = response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    assert_eq!(failed, vec!["m-3".to_owned()], "only the malformed message is redelivered");
    assert_eq!(order_items(&handler, &order_id).await, 1);
    assert_eq!(emails_to(&email).len(), 1, "one confirmation");

    // A redelivery of the whole batch later (a lost ack) changes nothing.
    let response = deliver(&handler, &batch).await;
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(order_items(&handler, &order_id).await, 1);
    let sent = emails_to(&email);
    assert_eq!(sent.len(), 1, "still one confirmation");
    assert!(sent[0]["subject"].as_str().is_some_and(|s| s.contains(&order_id)), "{sent:?}");
}
