//! The Kafka driver on the sample MSK event and scripted handlers: partitions in offset order,
//! each failing partition resumed at its first record not durably done (partition and offset),
//! permanent failures passed, producer retries at a new offset run after the first copy.

use std::sync::Mutex;

use effectively_once_lambda::events::{Context, KafkaEvent, KafkaRecord, LambdaEvent};
use effectively_once_lambda::kafka::{self, KafkaEventResponse};
use effectively_once_lambda::{BodyHandler, Disposition, Options, RecordError, RecordResult, Retry, Typed};
use serde::Deserialize;

fn sample() -> KafkaEvent {
    serde_json::from_slice(include_bytes!("../../../events/kafka-orders.json")).unwrap()
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
        Ok(if duplicate { Disposition::Duplicate } else { Disposition::Applied })
    }

    fn key(&self, order: &Order) -> Option<String> {
        Some(order.order_id.clone())
    }
}

fn resume_points(response: &KafkaEventResponse) -> Vec<(String, i64)> {
    let failures = response.batch_item_failures.iter();
    failures.map(|f| (f.item_identifier.partition.clone(), f.item_identifier.offset)).collect()
}

#[tokio::test]
async fn a_batch_that_succeeds_but_for_poison_resumes_nothing() {
    let orders = Typed(Orders::default());
    let response = kafka::process(&orders, LambdaEvent::new(sample(), Context::default()), &quiet()).await;
    assert!(response.batch_item_failures.is_empty(), "the poison record is permanent, not a resume point");
    let applied = orders.0.applied.lock().unwrap().clone();
    let offsets: Vec<i64> = applied.iter().map(|(_, offset)| *offset).collect();
    assert_eq!(offsets, [15, 16, 17, 9], "partition 0 in offset order, then partition 1");
}

/// A failing partition resumes at its first failed record; the records behind it in its group
/// are not started; another partition is committed whole.
#[tokio::test]
async fn a_failing_partition_resumes_at_its_first_record_not_durably_done() {
    let orders = Typed(Orders { retryable: vec!["ord_0002"], ..Orders::default() });
    let response = kafka::process(&orders, LambdaEvent::new(sample(), Context::default()), &quiet()).await;
    assert_eq!(resume_points(&response), [("orders-0".to_owned(), 16)]);
    let applied = orders.0.applied.lock().unwrap().clone();
    assert_eq!(applied, [("ord_0001".to_owned(), 15), ("ord_0003".to_owned(), 9)]);
    let json = serde_json::to_value(&response).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"batchItemFailures": [{"itemIdentifier": {"partition": "orders-0", "offset": 16}}]})
    );
}

/// The answer names every failing partition, each at its own first failure.
#[tokio::test]
async fn each_failing_partition_gets_its_own_resume_point() {
    let orders = Typed(Orders { retryable: vec!["ord_0001", "ord_0003"], ..Orders::default() });
    let response = kafka::process(&orders, LambdaEvent::new(sample(), Context::default()), &quiet()).await;
    assert_eq!(resume_points(&response), [("orders-0".to_owned(), 15), ("orders-1".to_owned(), 9)]);
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
    assert_eq!(error.retry, Retry::Permanent);
}
