//! The Kafka driver on the sample MSK event and scripted handlers: partitions in offset order;
//! the answer names, for each failing partition, its first record not durably done and every
//! record after it in the batch (partition and offset), in the shape Lambda reads; permanent
//! failures passed; producer retries at a new offset run after the first copy.

use std::sync::Mutex;

use base64::Engine;
use effectively_once_lambda::events::{Context, KafkaEvent, KafkaRecord, LambdaEvent};
use effectively_once_lambda::kafka::{self, KafkaEventResponse};
use effectively_once_lambda::{BodyHandler, Handled, Options, RecordError, RecordResult, Retry, Typed};
use serde::Deserialize;

fn sample() -> KafkaEvent {
    serde_json::from_slice(include_bytes!("../../../../events/kafka-orders.json")).unwrap()
}

/// Poison dropped by name: these tests pin resume points; parking is pinned in `park.rs`.
fn quiet() -> Options {
    Options { emit_metrics: false, ..Options::new("t") }.drop_poison()
}

#[derive(Debug, Deserialize)]
struct Order {
    order_id: String,
}

/// Records each order it applies; fails the order ids listed retryably.
#[derive(Default)]
struct Orders {
    retryable: Vec<&'static str>,
    applied: Mutex<Vec<(String, i64)>>,
}

impl BodyHandler<KafkaRecord> for Orders {
    type Body = Order;

    async fn handle(&self, order: Order, record: &KafkaRecord, _context: &Context) -> RecordResult {
        if self.retryable.contains(&order.order_id.as_str()) {
            return Err(RecordError::retryable("throttled"));
        }
        let mut applied = self.applied.lock().unwrap();
        let duplicate = applied.iter().any(|(id, _)| *id == order.order_id);
        applied.push((order.order_id, record.offset));
        Ok(if duplicate { Handled::Duplicate } else { Handled::Applied })
    }

    fn key(&self, order: &Order) -> Option<String> {
        Some(order.order_id.clone())
    }
}

/// The records the answer names, as `topic-partition@offset`, in its order.
fn named(response: &KafkaEventResponse) -> Vec<String> {
    let failures = response.batch_item_failures.iter();
    failures.map(|f| format!("{}@{}", f.item_identifier.partition, f.item_identifier.offset)).collect()
}

/// An order record of topic `orders` as Lambda hands it over (the value in base64).
fn order(partition: i64, offset: i64, order_id: &str) -> KafkaRecord {
    let mut record = KafkaRecord::default();
    record.topic = Some("orders".into());
    record.partition = partition;
    record.offset = offset;
    let value = serde_json::json!({ "order_id": order_id }).to_string();
    record.value = Some(base64::engine::general_purpose::STANDARD.encode(value));
    record
}

fn event(records: &[KafkaRecord]) -> KafkaEvent {
    let mut event = KafkaEvent::default();
    for record in records {
        event.records.entry(kafka::topic_partition(record)).or_default().push(record.clone());
    }
    event
}

/// A permanent failure alone (the sample's poison value) names nothing: a retry cannot change
/// it. This is the one place that pins it: once poison is parked in the function's park
/// destination, the answer names it until it is parked, and this assertion changes.
#[tokio::test]
async fn a_permanent_failure_alone_names_nothing() {
    let orders = Typed(Orders::default());
    let response = kafka::process(&orders, LambdaEvent::new(sample(), Context::default()), &quiet()).await;
    assert!(response.batch_item_failures.is_empty(), "the poison record is permanent, not named: {response:?}");
    let applied = orders.0.applied.lock().unwrap().clone();
    let offsets: Vec<i64> = applied.iter().map(|(_, offset)| *offset).collect();
    assert_eq!(offsets, [15, 16, 17, 9], "partition 0 in offset order, then partition 1");
}

/// Whether Lambda reads the answer as a resume point per partition or retries only the records
/// it names, nothing of p0 after its failure is committed: the held-back 11 and 12 are named
/// with 10. p1, all done, is named nowhere.
#[tokio::test]
async fn a_failure_names_its_record_and_every_later_one_of_its_partition_and_nothing_else() {
    let orders = Typed(Orders { retryable: vec!["ord_10"], ..Orders::default() });
    let batch = vec![
        order(0, 10, "ord_10"),
        order(0, 11, "ord_11"),
        order(0, 12, "ord_12"),
        order(1, 5, "ord_5"),
        order(1, 6, "ord_6"),
    ];
    let response = kafka::process(&orders, LambdaEvent::new(event(&batch), Context::default()), &quiet()).await;
    assert_eq!(named(&response), ["orders-0@10", "orders-0@11", "orders-0@12"]);
    let applied = orders.0.applied.lock().unwrap().clone();
    assert_eq!(applied, [("ord_5".to_owned(), 5), ("ord_6".to_owned(), 6)], "11 and 12 held back behind 10");
}

/// The answer in the shape Lambda reads for Kafka: `itemIdentifier` an object whose
/// `partition` is the string `{topic}-{partition}` and whose `offset` is a JSON integer.
#[tokio::test]
async fn a_failing_partition_is_named_from_its_first_record_not_durably_done_in_lambdas_shape() {
    let orders = Typed(Orders { retryable: vec!["ord_0002"], ..Orders::default() });
    let response = kafka::process(&orders, LambdaEvent::new(sample(), Context::default()), &quiet()).await;
    assert_eq!(named(&response), ["orders-0@16", "orders-0@17"]);
    let applied = orders.0.applied.lock().unwrap().clone();
    assert_eq!(applied, [("ord_0001".to_owned(), 15), ("ord_0003".to_owned(), 9)]);
    let json = serde_json::to_value(&response).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"batchItemFailures": [
            {"itemIdentifier": {"partition": "orders-0", "offset": 16}},
            {"itemIdentifier": {"partition": "orders-0", "offset": 17}},
        ]})
    );
    let id = &json["batchItemFailures"][0]["itemIdentifier"];
    assert!(id["partition"].is_string() && id["offset"].is_i64(), "{id}");
    let read: KafkaEventResponse = serde_json::from_value(json).unwrap();
    assert_eq!(read, response);
}

/// Each failing partition is named from its own first failure.
#[tokio::test]
async fn each_failing_partition_is_named_from_its_own_first_failure() {
    let orders = Typed(Orders { retryable: vec!["ord_0001", "ord_0003"], ..Orders::default() });
    let response = kafka::process(&orders, LambdaEvent::new(sample(), Context::default()), &quiet()).await;
    // orders-1@8 is the poison value: permanent, before the failure, not named.
    assert_eq!(named(&response), ["orders-0@15", "orders-0@16", "orders-0@17", "orders-1@9"]);
}

/// A producer retry of one order at a later offset is answered from the first copy.
#[tokio::test]
async fn a_producer_retry_at_a_new_offset_is_a_duplicate_of_the_first() {
    let orders = Typed(Orders::default());
    let mut event = sample();
    // The retry lands in another partition too: the business key still joins it to the first.
    let mut copy = event.records["orders-0"][2].clone();
    copy.partition = 1;
    copy.offset = 10;
    event.records.get_mut("orders-1").unwrap().push(copy);
    let response = kafka::process(&orders, LambdaEvent::new(event, Context::default()), &quiet()).await;
    assert!(response.batch_item_failures.is_empty());
    let applied = orders.0.applied.lock().unwrap().clone();
    let first = applied.iter().filter(|(id, _)| id == "ord_0001").count();
    assert_eq!(first, 3, "the order and its two retries, one after another: {applied:?}");
    assert_eq!(applied.iter().position(|(id, _)| id == "ord_0001"), Some(0), "the first copy first: {applied:?}");
}

#[test]
fn keys_values_and_headers_decode_from_the_event() {
    let event = sample();
    let record = &event.records["orders-0"][0];
    assert_eq!(kafka::topic_partition(record), "orders-0");
    assert_eq!(kafka::key_bytes(record).as_deref(), Some(&b"customer-alice"[..]));
    assert_eq!(kafka::header(record, "order-id").as_deref(), Some(&b"ord_0001"[..]));
    assert!(kafka::value_bytes(record).unwrap().starts_with(b"{\"order_id\""));
    assert_eq!(kafka::header(record, "missing"), None);
}

/// A value that is not the handler's type fails its record alone, permanently.
#[tokio::test]
async fn a_value_that_is_not_the_type_fails_permanently() {
    let orders = Typed(Orders::default());
    let event = sample();
    let poison = &event.records["orders-1"][0];
    let error = effectively_once_lambda::Handler::handle(&orders, poison, &Context::default()).await.unwrap_err();
    assert_eq!(error.retry, Retry::Never);
}
