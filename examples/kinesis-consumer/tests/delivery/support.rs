//! What the Kinesis consumer's tests share: a handler on tables of its own, Kinesis records as
//! Lambda hands them over, a delivery through the driver that parks its poison in a queue of its
//! own ([`park`]), and the effects read back (order items in the orders table; emails through the
//! local SES; the parcels parked).
#![allow(dead_code)]

pub mod park;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_dynamodb::Table;
use effectively_once_effects::testing::{emails_to, fresh_table, ses_sender, unique_name, KeyAttribute};
use effectively_once_effects::SesSender;
use std::sync::Mutex;

use effectively_once_lambda::events::{Context, KinesisEvent, KinesisEventRecord, LambdaEvent};
use effectively_once_lambda::kinesis::{self, Options};
use effectively_once_lambda::park::{Coordinates, Parcel};
use effectively_once_lambda::testing::kinesis::{Batch, Record};
use effectively_once_lambda::{Handler, RecordError, RecordResult, Typed};
use kinesis_consumer::Orders;
use park::ParkQueue;

/// The sender the tests confirm from (verified in the local SES).
pub const FROM: &str = "orders@example.com";

/// The consumer as `main` serves it (`Typed`: the data decoded first), on an idempotency table
/// and an orders table of its own.
pub async fn orders() -> Typed<Orders<SesSender>> {
    let (store, _) = fresh_store().await;
    let orders = fresh_table(store.client(), "kin-orders", KeyAttribute::string("pk"), None).await;
    Typed(Orders {
        sender: ses_sender(FROM).await,
        idempotency: Idempotency::new(store, Config::default()),
        orders: Table::new(orders, "pk"),
    })
}

/// A new order id, and the address its confirmation goes to (unique too, so `emails_to` sees
/// only this test's emails).
pub fn new_order() -> (String, String) {
    let id = unique_name("ord");
    let email = format!("{id}@example.com");
    (id, email)
}

/// An order's record data: JSON, as the producer puts it.
pub fn order_data(id: &str, email: &str, total_cents: i64) -> Vec<u8> {
    serde_json::json!({"order_id": id, "email": email, "total_cents": total_cents}).to_string().into_bytes()
}

/// A record as Lambda hands it over: `data` on `partition_key`, the `sequence`th of shard 0.
pub fn record(partition_key: &str, sequence: u64, data: &[u8]) -> KinesisEventRecord {
    Batch::new().sequence_from(sequence).record(Record::new(partition_key, data)).build().records.remove(0)
}

/// What one invocation came to: the answer's checkpoint (the sequence numbers it names, at
/// most one), every record that failed, permanently or not, by sequence number, and the parcels
/// the driver parked. A permanent failure is not in the answer (the driver parks it and goes
/// on), so a duplicate answered as one would pass unseen without the second list.
#[derive(Debug)]
pub struct Delivered {
    /// `batchItemFailures`.
    pub checkpoint: Vec<String>,
    /// The records the handler failed, in the order they finished.
    pub failed: Vec<(String, RecordError)>,
    /// The parcels in the invocation's park queue, read back after it, by sequence number.
    pub parked: Vec<Parcel>,
}

impl Delivered {
    /// Whether every record succeeded (an order applied, or answered as a duplicate).
    pub fn all_succeeded(&self) -> bool {
        self.checkpoint.is_empty() && self.failed.is_empty()
    }
}

/// A handler that keeps each record's failure on the way out.
pub struct Recording<H> {
    inner: H,
    failed: Mutex<Vec<(String, RecordError)>>,
}

impl<H> Recording<H> {
    pub fn new(inner: H) -> Self {
        Recording { inner, failed: Mutex::default() }
    }

    /// The failures so far, emptied.
    pub fn take(&self) -> Vec<(String, RecordError)> {
        std::mem::take(&mut *self.failed.lock().unwrap())
    }
}

impl<H: Handler<KinesisEventRecord>> Handler<KinesisEventRecord> for Recording<H> {
    async fn handle(&self, record: &KinesisEventRecord, context: &Context) -> RecordResult {
        let result = self.inner.handle(record, context).await;
        if let Err(error) = &result {
            self.failed.lock().unwrap().push((record.kinesis.sequence_number.clone(), error.clone()));
        }
        result
    }

    fn key(&self, record: &KinesisEventRecord) -> Option<String> {
        self.inner.key(record)
    }

    fn span(&self, record: &KinesisEventRecord) -> tracing::Span {
        self.inner.span(record)
    }
}

/// One invocation of the Kinesis driver with `records`, as `main` serves the handler: its
/// poison parked in a queue of the invocation's own, as `main` parks in `PARK_QUEUE_URL`.
pub async fn deliver<H: Handler<KinesisEventRecord>>(handler: &H, records: &[KinesisEventRecord]) -> Delivered {
    let park = ParkQueue::fresh("kinesis-park").await;
    deliver_parking_in(handler, records, park).await
}

/// [`deliver`], parking in `park`.
pub async fn deliver_parking_in<H: Handler<KinesisEventRecord>>(
    handler: &H,
    records: &[KinesisEventRecord],
    park: ParkQueue,
) -> Delivered {
    let mut event = KinesisEvent::default();
    event.records = records.to_vec();
    let options = Options { emit_metrics: false, ..Options::new("kinesis-consumer") }.park_in(park.destination());
    let recording = Recording::new(handler);
    let response = kinesis::process(&recording, LambdaEvent::new(event, Context::default()), &options).await;
    let checkpoint = response.batch_item_failures.iter().map(|f| f.item_identifier.clone().unwrap_or_default());
    let mut parked = park.drain().await;
    parked.sort_by_key(|p| p.coordinates.to_string());
    Delivered { checkpoint: checkpoint.collect(), failed: recording.take(), parked }
}

/// Asserts that `parcel` is `record`'s, parked exactly as delivered: the trigger, its shard and
/// sequence number, the record itself.
pub fn assert_parked_as_delivered(parcel: &Parcel, record: &KinesisEventRecord) {
    assert_eq!(parcel.trigger, "aws:kinesis");
    let shard = record.event_id.as_deref().and_then(|id| id.split_once(':')).map(|(shard, _)| shard).unwrap();
    let coordinates =
        Coordinates::Kinesis { shard_id: shard.to_owned(), sequence_number: record.kinesis.sequence_number.clone() };
    assert_eq!(parcel.coordinates, coordinates);
    assert_eq!(parcel.record, serde_json::to_value(record).unwrap(), "the record as delivered");
}

/// The order's item in the orders table: its `total_cents`, when there is one.
pub async fn stored_total(Typed(handler): &Typed<Orders<SesSender>>, order_id: &str) -> Option<String> {
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
        .expect("read the orders table");
    out.item().map(|item| item["total_cents"].as_n().cloned().unwrap_or_default())
}

/// How many items the orders table holds (a second item under another key would be a double).
pub async fn order_count(Typed(handler): &Typed<Orders<SesSender>>) -> usize {
    let client = handler.idempotency.store().client();
    let out = client.scan().table_name(handler.orders.name()).consistent_read(true).send().await.expect("scan");
    out.items().len()
}

/// The confirmations the local SES accepted for `email`.
pub fn confirmations(email: &str) -> usize {
    emails_to(email).len()
}

/// Asserts the order is stored once (one item, with its total) and confirmed once.
pub async fn assert_once(handler: &Typed<Orders<SesSender>>, order_id: &str, email: &str, total_cents: i64) {
    assert_eq!(stored_total(handler, order_id).await, Some(total_cents.to_string()), "order {order_id} stored");
    let sent = emails_to(email);
    assert_eq!(sent.len(), 1, "one confirmation of {order_id}: {sent:?}");
    assert!(sent[0]["subject"].as_str().is_some_and(|s| s.contains(order_id)), "{sent:?}");
}
