//! Typed payloads: a `BodyHandler` gets the body decoded into its own type; a payload that does
//! not decode fails its record alone, permanently, with an address-free reason, on every trigger
//! and on the batch path.

use std::sync::Mutex;

use effectively_once_lambda::events::{
    Context, DynamoDbEvent, EventRecord, KinesisEvent, KinesisEventRecord, LambdaEvent, SqsEvent, SqsMessage,
};
use effectively_once_lambda::{
    kinesis, sqs, streams, BodyBatchHandler, BodyHandler, Handled, Handler, Options, RecordResult, Retry, Typed,
};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Order {
    order_id: String,
    total_cents: i64,
}

/// Applies every order it is given, recording its id; a negative total is a business rejection.
#[derive(Default)]
struct Orders {
    seen: Mutex<Vec<String>>,
    batches: Mutex<Vec<usize>>,
}

impl Orders {
    fn apply(&self, order: Order) -> RecordResult {
        self.seen.lock().unwrap().push(order.order_id);
        Ok(if order.total_cents < 0 { Handled::Rejected } else { Handled::Applied })
    }
}

impl<R: Sync> BodyHandler<R> for Orders {
    type Body = Order;

    async fn handle(&self, order: Order, _record: &R, _context: &Context) -> RecordResult {
        self.apply(order)
    }
}

impl<R: Sync> BodyBatchHandler<R> for Orders {
    async fn handle_batch(&self, bodies: Vec<(Order, &R)>, _context: &Context) -> Vec<RecordResult> {
        self.batches.lock().unwrap().push(bodies.len());
        bodies.into_iter().map(|(order, _)| self.apply(order)).collect()
    }
}

const BAD_TYPE: &str = r#"{"order_id": "o-2", "total_cents": "alice@example.com"}"#;

/// Poison dropped by name: these tests pin decoding; parking is pinned in `park.rs`.
fn quiet() -> Options {
    Options { emit_metrics: false, ..Options::new("t") }.drop_poison()
}

fn sqs_batch(bodies: &[&str]) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let mut message = SqsMessage::default();
            message.message_id = Some(format!("m-{i}"));
            message.body = Some((*body).into());
            message
        })
        .collect();
    event
}

fn kinesis_batch(data: &[&str]) -> KinesisEvent {
    let mut event = KinesisEvent::default();
    event.records = data
        .iter()
        .enumerate()
        .map(|(i, data)| {
            let mut record = KinesisEventRecord::default();
            record.kinesis.partition_key = format!("p-{i}");
            record.kinesis.sequence_number = (i + 1).to_string();
            *record.kinesis.data = data.as_bytes().to_vec();
            record
        })
        .collect();
    event
}

#[tokio::test]
async fn an_sqs_body_that_is_not_the_type_fails_alone_and_permanently() {
    let orders = Typed(Orders::default());
    let event = sqs_batch(&[
        r#"{"order_id": "o-1", "total_cents": 5}"#,
        BAD_TYPE,
        "not json",
        r#"{"order_id": "o-4", "total_cents": -1}"#,
    ]);
    let response = sqs::process(&orders, LambdaEvent::new(event.clone(), Context::default()), &quiet()).await;
    let failed: Vec<_> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, ["m-1", "m-2"]);
    assert_eq!(*orders.0.seen.lock().unwrap(), ["o-1", "o-4"]);

    let error = orders.handle(&event.records[1], &Context::default()).await.unwrap_err();
    assert_eq!(error.retry, Retry::Never);
    assert!(error.reason.contains("Order") && !error.reason.contains("alice@example.com"), "{}", error.reason);
    assert!(error.reason.contains("a***@example.com"), "the reason keeps its shape, redacted: {}", error.reason);
}

/// On a stream a payload that does not decode is permanent, no checkpoint: a retry cannot change it.
#[tokio::test]
async fn kinesis_data_that_is_not_the_type_is_not_the_checkpoint() {
    let orders = Typed(Orders::default());
    let event = kinesis_batch(&["{", r#"{"order_id": "o-2", "total_cents": 5}"#]);
    let response = kinesis::process(&orders, LambdaEvent::new(event, Context::default()), &quiet()).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(*orders.0.seen.lock().unwrap(), ["o-2"]);
}

/// The batch path hands the handler only what decoded, and answers each record in place.
#[tokio::test]
async fn the_batch_path_leaves_out_what_does_not_decode_and_keeps_each_answer_in_place() {
    let orders = Typed(Orders::default());
    let event = sqs_batch(&[
        "[]",
        r#"{"order_id": "o-1", "total_cents": 5}"#,
        BAD_TYPE,
        r#"{"order_id": "o-3", "total_cents": -5}"#,
    ]);
    let response = sqs::process_batch(&orders, LambdaEvent::new(event.clone(), Context::default()), &quiet()).await;
    let failed: Vec<_> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, ["m-0", "m-2"]);
    assert_eq!(*orders.0.batches.lock().unwrap(), [2]);
    let records: Vec<&SqsMessage> = event.records.iter().collect();
    let results = effectively_once_lambda::BatchHandler::handle_batch(&orders, &records, &Context::default()).await;
    assert_eq!(results[1], Ok(Handled::Applied));
    assert_eq!(results[3], Ok(Handled::Rejected));
    assert_eq!(results[0].as_ref().unwrap_err().retry, Retry::Never);
}

/// A stream record's body is its NewImage, read through serde_dynamo; a REMOVE has none.
#[tokio::test]
async fn a_stream_records_body_is_its_new_image() {
    #[derive(Deserialize)]
    struct Receipt {
        event_id: String,
        amount_cents: i64,
    }
    struct Receipts(Mutex<Vec<(String, i64)>>);
    impl BodyHandler<EventRecord> for Receipts {
        type Body = Receipt;
        async fn handle(&self, receipt: Receipt, _record: &EventRecord, _context: &Context) -> RecordResult {
            self.0.lock().unwrap().push((receipt.event_id, receipt.amount_cents));
            Ok(Handled::Applied)
        }
    }
    let event: DynamoDbEvent =
        serde_json::from_slice(include_bytes!("../../../../events/dynamodb-stream-outbox.json")).unwrap();
    let receipts = Typed(Receipts(Mutex::default()));
    let response = streams::process(&receipts, LambdaEvent::new(event.clone(), Context::default()), &quiet()).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(*receipts.0 .0.lock().unwrap(), [("pay_0001".to_owned(), 1250)]);

    let mut remove = event.records[0].clone();
    remove.event_name = "REMOVE".into();
    remove.change.new_image = Default::default();
    let error = receipts.handle(&remove, &Context::default()).await.unwrap_err();
    assert_eq!(error.retry, Retry::Never);
    assert!(error.reason.contains("no NewImage"), "{}", error.reason);
}
