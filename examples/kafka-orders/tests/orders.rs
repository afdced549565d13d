//! The Kafka orders consumer on the local AWS (`make local-aws-up`, or `AWS_ENDPOINT_URL`), fed
//! events built with `effectively_once_lambda::testing::kafka`: each order stored once and counted
//! once in its customer's totals, however often it arrives; a record that is not an order fails
//! alone; a partition whose write failed is named from that record on, and delivered again.

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::{fresh_store_and_table, unique_name};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::events::{Context, KafkaEvent, LambdaEvent};
use effectively_once_lambda::kafka::{self, KafkaEventResponse, Options};
use effectively_once_lambda::testing::kafka::{Batch, Record};
use effectively_once_lambda::Typed;
use kafka_orders::Orders;

/// The consumer as `main` serves it (`Typed`: the value decoded first), on an idempotency table
/// and an orders table of its own.
async fn orders() -> Typed<Orders> {
    let (store, orders) = fresh_store_and_table("kafka-orders").await;
    Typed(Orders { idempotency: Idempotency::new(store, Config::default()), orders })
}

/// One invocation. Poison is dropped by name here; `main` parks it in `PARK_QUEUE_URL`.
async fn deliver(handler: &Typed<Orders>, event: KafkaEvent) -> KafkaEventResponse {
    let options = Options { emit_metrics: false, ..Options::new("kafka-orders") }.drop_poison();
    kafka::process(handler, LambdaEvent::new(event, Context::default()), &options).await
}

/// The records the answer names, as `topic-partition@offset`.
fn named(response: &KafkaEventResponse) -> Vec<String> {
    let failures = response.batch_item_failures.iter();
    failures.map(|f| format!("{}@{}", f.item_identifier.partition, f.item_identifier.offset)).collect()
}

/// An item of the orders table, by its `id`.
async fn item(Typed(handler): &Typed<Orders>, id: &str) -> Option<std::collections::HashMap<String, AttributeValue>> {
    let client = handler.idempotency.store().client();
    let read = client.get_item().table_name(handler.orders.name()).key("id", AttributeValue::S(id.into()));
    read.consistent_read(true).send().await.expect("read the orders table").item().cloned()
}

/// The customer's totals: (orders counted, cents), `(0, 0)` when none was counted.
async fn totals(handler: &Typed<Orders>, customer: &str) -> (i64, i64) {
    let Some(item) = item(handler, &format!("customer#{customer}")).await else { return (0, 0) };
    let number = |name: &str| item.get(name).and_then(|v| v.as_n().ok()).map_or(0, |n| n.parse().unwrap());
    (number("order_count"), number("total_cents"))
}

fn order(id: &str, total_cents: i64) -> String {
    serde_json::json!({"order_id": id, "total_cents": total_cents}).to_string()
}

/// The sample event (`events/orders.json`): ord_0001 twice on partition 0 (a producer's retry at
/// offset 17), a value that is not JSON on partition 1. Nothing is named in the answer; each
/// order is stored once and counted once; the poison adds nothing. Delivered again (a rebalance),
/// nothing changes.
#[tokio::test]
async fn the_sample_event_counts_each_order_once_and_passes_the_poison() {
    let handler = orders().await;
    let sample: KafkaEvent = serde_json::from_slice(include_bytes!("../events/orders.json")).unwrap();
    for delivery in ["first", "again"] {
        let response = deliver(&handler, sample.clone()).await;
        assert_eq!(named(&response), Vec::<String>::new(), "{delivery}");
        assert_eq!(totals(&handler, "customer-alice").await, (2, 4200 + 1999), "{delivery}");
        assert_eq!(totals(&handler, "customer-carol").await, (1, 750), "{delivery}");
        assert_eq!(totals(&handler, "customer-bob").await, (0, 0), "{delivery}: the poison counted nothing");
    }
    let first = item(&handler, "order#ord_0001").await.expect("ord_0001 stored");
    assert_eq!(first["customer_id"].as_s().unwrap(), "customer-alice");
}

/// A producer that lost a send's answer sent the order again: the copy arrives at a new offset,
/// in a later batch and in the same one, and the copy in the same batch is on another partition
/// (the producer changed its partitioner). The order is counted once.
#[tokio::test]
async fn a_producer_retry_at_a_new_offset_is_counted_once() {
    let handler = orders().await;
    let customer = unique_name("customer");
    let (id, other) = (unique_name("ord"), unique_name("ord"));
    let first = Batch::new("orders").record(Record::new(order(&id, 500)).key(customer.as_str()));
    assert_eq!(named(&deliver(&handler, first.build()).await), Vec::<String>::new());
    let later = Batch::new("orders")
        .first_offset(1)
        .record(Record::new(order(&id, 500)).key(customer.as_str()))
        .record(Record::new(order(&other, 20)).key(customer.as_str()))
        .record(Record::new(order(&id, 500)).key(customer.as_str()).partition(3));
    assert_eq!(named(&deliver(&handler, later.build()).await), Vec::<String>::new());
    assert_eq!(totals(&handler, &customer).await, (2, 520), "each order counted once");
}

/// A record that is no order of a customer (no key; a key that is not UTF-8; a value without an
/// order id) fails alone and for good: the answer does not name it, and the order behind it on
/// its partition is stored.
#[tokio::test]
async fn a_record_that_is_not_an_order_fails_alone() {
    let handler = orders().await;
    let customer = unique_name("customer");
    let id = unique_name("ord");
    let event = Batch::new("orders")
        .record(Record::new(order(&unique_name("ord"), 1)))
        .record(Record::new(order(&unique_name("ord"), 2)).key(vec![0xff, 0xfe]))
        .record(Record::new(r#"{"total_cents": 3}"#).key(customer.as_str()))
        .record(Record::new(order(&id, 40)).key(customer.as_str()))
        .build();
    assert_eq!(named(&deliver(&handler, event).await), Vec::<String>::new(), "poison is never delivered again");
    assert_eq!(totals(&handler, &customer).await, (1, 40));
    assert!(item(&handler, &format!("order#{id}")).await.is_some());
}

/// The idempotency table is not there (a bad deploy): every write fails, retryably, so the answer
/// names each partition's records from its first, and nothing is counted. After the fix, the
/// records named are delivered again and each order is counted once.
#[tokio::test]
async fn a_failed_write_names_its_partition_from_that_record_and_the_redelivery_counts_once() {
    let fixed = orders().await;
    let client = fixed.0.idempotency.store().client().clone();
    let store = DynamoDbStore::new(client, unique_name("idem-not-created"));
    let broken =
        Typed(Orders { idempotency: Idempotency::new(store, Config::default()), orders: fixed.0.orders.clone() });
    let customer = unique_name("customer");
    let ids: Vec<String> = (0..3).map(|_| unique_name("ord")).collect();
    let event = Batch::new("orders")
        .first_offset(40)
        .records(ids.iter().map(|id| Record::new(order(id, 100)).key(customer.as_str())))
        .build();

    let response = deliver(&broken, event.clone()).await;
    assert_eq!(named(&response), ["orders-0@40", "orders-0@41", "orders-0@42"]);
    assert_eq!(totals(&fixed, &customer).await, (0, 0));

    let mut again = event;
    let offsets: Vec<i64> = response.batch_item_failures.iter().map(|f| f.item_identifier.offset).collect();
    again.records.values_mut().for_each(|records| records.retain(|r| offsets.contains(&r.offset)));
    assert_eq!(named(&deliver(&fixed, again).await), Vec::<String>::new());
    assert_eq!(totals(&fixed, &customer).await, (3, 300), "each order counted once");
}
