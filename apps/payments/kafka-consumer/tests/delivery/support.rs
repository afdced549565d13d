//! What the Kafka consumer's tests share: the ledger's tables on the local AWS (fresh per test),
//! the consumer on them, Kafka records and events as Lambda hands them over, a delivery through
//! the driver (the ordered path, the batch path or one record at a time) that parks its poison
//! in a queue of its own and reads back what it parked and how many calls the handler took, and
//! the ledger read back.
//!
//! The tests through a broker (the Kafka event source emulator) build their handler with
//! [`Tables`] too, so both kinds read the same ledger the same way.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use effectively_once_dynamodb::{DynamoDbStore, RequestCounter};
use effectively_once_lambda::events::{Context, KafkaEvent, KafkaRecord, LambdaEvent};
use effectively_once_lambda::kafka::{self, KafkaEventResponse, Options};
use effectively_once_lambda::park::{Coordinates, Parcel};
use effectively_once_lambda::{BatchHandler, Handler, OrderedBatch, OrderedBatchHandler, RecordError, RecordResult};
use kafka_consumer::Payments;
use local::park::ParkQueue;
use local::Clients;
use payments::Ledger;

/// The topic the tests' records come from.
pub const TOPIC: &str = "payments";

/// The ledger's tables, new for each test: the idempotency table and the ledger table; an
/// outbox table only on request ([`Tables::with_outbox`]).
#[derive(Clone)]
pub struct Tables {
    /// The idempotency table's store (its client reaches the local AWS).
    pub store: DynamoDbStore,
    /// The ledger table's name.
    pub ledger: String,
    /// The outbox table's name, when there is one.
    pub outbox: Option<String>,
    /// The requests the store's client (the ledger's too) sent.
    pub requests: RequestCounter,
}

impl Tables {
    /// An idempotency table and a ledger table of this test's own, and no outbox table: a
    /// payment that asks for a receipt then fails retryably (a deployment fault: no outbox).
    pub async fn fresh() -> Tables {
        let (store, requests) = fresh_store().await;
        let ledger = unique_name("kafka-ledger");
        payments::tables::create_ledger_table(store.client(), &ledger).await.expect("the ledger table");
        requests.reset();
        Tables { store, ledger, outbox: None, requests }
    }

    /// The same tables, and an outbox table (new, or the one already made): the fix for a
    /// payment that asks for a receipt.
    pub async fn with_outbox(&self) -> Tables {
        if self.outbox.is_some() {
            return self.clone();
        }
        let outbox = unique_name("kafka-outbox");
        payments::tables::create_outbox_table(self.store.client(), &outbox).await.expect("the outbox table");
        self.requests.reset();
        Tables { outbox: Some(outbox), ..self.clone() }
    }

    /// The consumer as `main` builds it, on these tables (a sandbox of its own: it remembers
    /// no answers of another).
    pub fn payments(&self) -> Payments {
        Payments::new(Ledger::new(self.store.clone(), &self.ledger, self.outbox.clone()))
    }
}

/// A payment event of the contract, as a producer writes the value (USD).
pub fn payment(event_id: &str, account_id: &str, amount_cents: i64) -> String {
    serde_json::json!({
        "event_id": event_id, "account_id": account_id, "amount_cents": amount_cents, "currency": "USD"
    })
    .to_string()
}

/// The same, asking for a receipt to `email`.
pub fn payment_with_receipt(event_id: &str, account_id: &str, amount_cents: i64, email: &str) -> String {
    serde_json::json!({
        "event_id": event_id, "account_id": account_id, "amount_cents": amount_cents, "currency": "USD",
        "receipt_email": email
    })
    .to_string()
}

/// A record of [`TOPIC`] as Lambda hands it over: `value` base64-encoded, keyed by nothing.
pub fn record(partition: i64, offset: i64, value: &str) -> KafkaRecord {
    raw_record(partition, offset, Some(base64::engine::general_purpose::STANDARD.encode(value)))
}

/// A record whose value is exactly `value` as Lambda would send it (`None`: no value; any text:
/// taken as the base64 field itself).
pub fn raw_record(partition: i64, offset: i64, value: Option<String>) -> KafkaRecord {
    let mut record = KafkaRecord::default();
    record.topic = Some(TOPIC.into());
    record.partition = partition;
    record.offset = offset;
    record.timestamp_type = Some("CREATE_TIME".into());
    record.value = value;
    record
}

/// The cluster [`event`]'s records come from.
pub const CLUSTER_ARN: &str = "arn:aws:kafka:us-east-1:000000000000:cluster/payments/test-1";

/// An MSK event holding `records`, under their topic-partitions.
pub fn event(records: &[KafkaRecord]) -> KafkaEvent {
    let mut event = KafkaEvent::default();
    event.event_source = Some("aws:kafka".into());
    event.event_source_arn = Some(CLUSTER_ARN.into());
    for record in records {
        event.records.entry(kafka::topic_partition(record)).or_default().push(record.clone());
    }
    event
}

/// What one invocation came to: the records the answer names for delivery again, every record
/// that failed, permanently or not, as `topic-partition@offset`, and the parcels the driver
/// parked. A permanent failure is not in the answer (the driver parks it and goes on), so it is
/// seen here.
#[derive(Debug)]
pub struct Delivered {
    /// The answer.
    pub response: KafkaEventResponse,
    /// `batchItemFailures`, as `(topic-partition, offset)`.
    pub named: Vec<(String, i64)>,
    /// The records the handler failed.
    pub failed: Vec<(String, RecordError)>,
    /// The parcels in the invocation's park queue, read back after it, sorted by coordinates.
    pub parked: Vec<Parcel>,
    /// How many calls the handler took (`handle`, `handle_batch` and `handle_ordered` alike).
    pub calls: usize,
}

impl Delivered {
    /// Whether every record succeeded (a payment applied, rejected, or answered as a duplicate).
    pub fn all_succeeded(&self) -> bool {
        self.named.is_empty() && self.failed.is_empty()
    }

    /// The records that failed, by `topic-partition@offset`.
    pub fn failed_records(&self) -> Vec<&str> {
        self.failed.iter().map(|(id, _)| id.as_str()).collect()
    }

    /// The records parked, as `(topic-partition@offset, reason)`, by coordinates.
    pub fn parked_records(&self) -> Vec<(String, &str)> {
        self.parked.iter().map(|p| (p.coordinates.to_string(), p.reason.as_str())).collect()
    }
}

/// Asserts that `parcel` is `record`'s, parked from [`event`] exactly as delivered: the
/// trigger, the cluster, its coordinates, the record itself.
pub fn assert_parked_as_delivered(parcel: &Parcel, record: &KafkaRecord) {
    assert_eq!(parcel.trigger, "aws:kafka");
    assert_eq!(parcel.event_source_arn.as_deref(), Some(CLUSTER_ARN));
    let coordinates = Coordinates::Kafka { topic_partition: kafka::topic_partition(record), offset: record.offset };
    assert_eq!(parcel.coordinates, coordinates);
    assert_eq!(parcel.record, serde_json::to_value(record).unwrap(), "the record as delivered");
}

/// A handler that keeps each record's failure on the way out, and counts its calls, on every
/// path.
struct Recording<'h> {
    inner: &'h Payments,
    failed: Mutex<Vec<(String, RecordError)>>,
    calls: AtomicUsize,
}

impl<'h> Recording<'h> {
    fn new(inner: &'h Payments) -> Self {
        Recording { inner, failed: Mutex::default(), calls: AtomicUsize::new(0) }
    }

    fn keep(&self, record: &KafkaRecord, result: &RecordResult) {
        if let Err(error) = result {
            let id = format!("{}@{}", kafka::topic_partition(record), record.offset);
            self.failed.lock().unwrap().push((id, error.clone()));
        }
    }
}

impl Handler<KafkaRecord> for Recording<'_> {
    async fn handle(&self, record: &KafkaRecord, context: &Context) -> RecordResult {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let result = self.inner.handle(record, context).await;
        self.keep(record, &result);
        result
    }

    fn key(&self, record: &KafkaRecord) -> Option<String> {
        self.inner.key(record)
    }

    fn span(&self, record: &KafkaRecord) -> tracing::Span {
        self.inner.span(record)
    }
}

impl BatchHandler<KafkaRecord> for Recording<'_> {
    async fn handle_batch(&self, records: &[&KafkaRecord], context: &Context) -> Vec<RecordResult> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let results = self.inner.handle_batch(records, context).await;
        for (record, result) in records.iter().zip(&results) {
            self.keep(record, result);
        }
        results
    }
}

impl OrderedBatchHandler<KafkaRecord> for Recording<'_> {
    async fn handle_ordered(&self, batch: &OrderedBatch<'_, KafkaRecord>, context: &Context) -> Vec<RecordResult> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let results = self.inner.handle_ordered(batch, context).await;
        for (record, result) in batch.records().iter().zip(&results) {
            self.keep(record, result);
        }
        results
    }
}

/// A park queue of the invocation's own, on the local AWS, as `main` parks in `PARK_QUEUE_URL`.
async fn park_queue() -> ParkQueue {
    ParkQueue::fresh(&Clients::local().await, "kafka-park").await.expect("a park queue on the local AWS")
}

fn options(park: &ParkQueue) -> Options {
    Options { emit_metrics: false, ..Options::new(kafka_consumer::FUNCTION) }.park_in(park.destination())
}

async fn delivered(response: KafkaEventResponse, recording: Recording<'_>, park: ParkQueue) -> Delivered {
    let named = response.batch_item_failures.iter();
    let named = named.map(|f| (f.item_identifier.partition.clone(), f.item_identifier.offset)).collect();
    let mut parked = park.drain().await.expect("the park queue read back");
    parked.sort_by_key(|p| p.coordinates.to_string());
    let calls = recording.calls.load(Ordering::SeqCst);
    Delivered { response, named, failed: recording.failed.into_inner().unwrap(), parked, calls }
}

/// One invocation with `records` through the batch path (`kafka::run_batch`): one call a round.
pub async fn deliver(payments: &Payments, records: &[KafkaRecord]) -> Delivered {
    let (recording, park) = (Recording::new(payments), park_queue().await);
    let invocation = LambdaEvent::new(event(records), Context::default());
    let response = kafka::process_batch(&recording, invocation, &options(&park)).await;
    delivered(response, recording, park).await
}

/// One invocation with `records`, one record at a time (`kafka::run`).
pub async fn deliver_one_by_one(payments: &Payments, records: &[KafkaRecord]) -> Delivered {
    let (recording, park) = (Recording::new(payments), park_queue().await);
    let invocation = LambdaEvent::new(event(records), Context::default());
    let response = kafka::process(&recording, invocation, &options(&park)).await;
    delivered(response, recording, park).await
}

/// One invocation with `records` through the ordered path (`kafka::run_ordered`): the whole
/// batch in one call.
pub async fn deliver_ordered(payments: &Payments, records: &[KafkaRecord]) -> Delivered {
    let (recording, park) = (Recording::new(payments), park_queue().await);
    let invocation = LambdaEvent::new(event(records), Context::default());
    let response = kafka::process_ordered(&recording, invocation, &options(&park)).await;
    delivered(response, recording, park).await
}

/// An account's balance and entry count, `None` before its first applied payment.
pub async fn balance(payments: &Payments, account_id: &str) -> Option<(i64, u64)> {
    let balance = payments.ledger().balance(account_id).await.expect("read the balance");
    balance.map(|b| (b.balance_cents, b.entry_count))
}

/// An account's entries as `(event_id, amount_cents)`, in key order.
pub async fn entries(payments: &Payments, account_id: &str) -> Vec<(String, i64)> {
    payments.ledger().entries(account_id).await.expect("read the entries")
}

/// Every item of the ledger table, keyed by `pk` and `sk`, with its attributes but the time of
/// posting (`posted_at`): two ledgers that posted the same payments compare equal.
pub async fn ledger_items(payments: &Payments) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    let client = payments.ledger().client();
    let mut pages =
        client.scan().table_name(payments.ledger().table()).consistent_read(true).into_paginator().items().send();
    let text = |value: &AttributeValue| match value {
        AttributeValue::S(s) | AttributeValue::N(s) => s.clone(),
        other => format!("{other:?}"),
    };
    let mut items = BTreeMap::new();
    while let Some(item) = pages.next().await {
        let item = item.expect("scan the ledger");
        let key = (text(&item["pk"]), text(&item["sk"]));
        let attributes = item.iter().filter(|(name, _)| !["pk", "sk", "posted_at"].contains(&name.as_str()));
        items.insert(key, attributes.map(|(name, value)| (name.clone(), text(value))).collect());
    }
    items
}
