//! Panics injected where the workload marks them ([`crate::workload::PANIC_ALWAYS`],
//! [`crate::workload::PANIC_ONCE`]) around the real handlers, so the demo and the chaos scenario
//! see the drivers catch a panic and fail that record alone.

use std::sync::Mutex;

use aws_lambda_events::event::kafka::KafkaRecord;
use aws_lambda_events::event::kinesis::KinesisEventRecord;
use aws_lambda_events::event::sqs::SqsMessage;
use effectively_once_lambda::{kafka, BatchHandler, Handler, OrderedBatch, OrderedBatchHandler, RecordResult};
use lambda_runtime::Context;

/// The payments handler with panics injected where the workload marks them: an event id holding
/// [`PANIC_ALWAYS`](crate::workload::PANIC_ALWAYS) panics on every delivery, one holding
/// [`PANIC_ONCE`](crate::workload::PANIC_ONCE) on its first. The real handler stays untouched;
/// the drivers must catch the panic and fail that record alone.
#[derive(Debug, Default)]
pub struct Panicking<H> {
    inner: H,
    panicked_once: Mutex<std::collections::HashSet<String>>,
}

impl<H> Panicking<H> {
    /// Wraps a handler.
    pub fn new(inner: H) -> Self {
        Panicking { inner, panicked_once: Mutex::default() }
    }

    /// The handler.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    /// In a batch call: marked always, or marked once and not yet panicked (not counted as its
    /// one panic: the record's own path still panics once).
    fn should_panic_in_batch(&self, id: Option<String>) -> bool {
        let Some(id) = id else { return false };
        id.contains(crate::workload::PANIC_ALWAYS)
            || (id.contains(crate::workload::PANIC_ONCE)
                && !self.panicked_once.lock().unwrap_or_else(|p| p.into_inner()).contains(&id))
    }

    /// Whether the record whose business id is `id` panics now (a panic once is spent here).
    fn should_panic(&self, id: Option<String>) -> bool {
        let Some(id) = id else { return false };
        id.contains(crate::workload::PANIC_ALWAYS)
            || (id.contains(crate::workload::PANIC_ONCE)
                && self.panicked_once.lock().unwrap_or_else(|p| p.into_inner()).insert(id))
    }
}

/// A batch call panics when any of its messages is marked: the driver then handles each alone,
/// where the marked one panics again (or, marked to panic once, goes through).
/// The event id a message's body holds, if any.
fn event_id(message: &SqsMessage) -> Option<String> {
    let body: serde_json::Value = serde_json::from_str(message.body.as_deref()?).ok()?;
    body["event_id"].as_str().map(str::to_owned)
}

/// The event id a Kafka record's value holds, if any (the consumer's own key).
fn kafka_event_id(record: &KafkaRecord) -> Option<String> {
    payments::PaymentEvent::event_id_of(&kafka::value_bytes(record)?)
}

/// The order id a Kinesis record's data holds, if any.
fn order_id(record: &KinesisEventRecord) -> Option<String> {
    let data: serde_json::Value = serde_json::from_slice(&record.kinesis.data).ok()?;
    data["order_id"].as_str().map(str::to_owned)
}

impl<H: BatchHandler<SqsMessage>> BatchHandler<SqsMessage> for Panicking<H> {
    async fn handle_batch(&self, messages: &[&SqsMessage], context: &Context) -> Vec<RecordResult> {
        if messages.iter().any(|message| self.should_panic_in_batch(event_id(message))) {
            panic!("injected panic: the workload marks one of this batch's event ids");
        }
        self.inner.handle_batch(messages, context).await
    }
}

impl<H: OrderedBatchHandler<SqsMessage>> OrderedBatchHandler<SqsMessage> for Panicking<H> {
    async fn handle_ordered(&self, batch: &OrderedBatch<'_, SqsMessage>, context: &Context) -> Vec<RecordResult> {
        if batch.records().iter().any(|message| self.should_panic_in_batch(event_id(message))) {
            panic!("injected panic: the workload marks one of this batch's event ids");
        }
        self.inner.handle_ordered(batch, context).await
    }
}

impl<H: Handler<SqsMessage>> Handler<SqsMessage> for Panicking<H> {
    async fn handle(&self, message: &SqsMessage, context: &Context) -> RecordResult {
        if self.should_panic(event_id(message)) {
            panic!("injected panic: the workload marks this record's event id");
        }
        self.inner.handle(message, context).await
    }

    fn key(&self, message: &SqsMessage) -> Option<String> {
        self.inner.key(message)
    }

    fn span(&self, message: &SqsMessage) -> tracing::Span {
        self.inner.span(message)
    }
}

/// Kinesis records panic the same way, by the order id in their data.
impl<H: Handler<KinesisEventRecord>> Handler<KinesisEventRecord> for Panicking<H> {
    async fn handle(&self, record: &KinesisEventRecord, context: &Context) -> RecordResult {
        if self.should_panic(order_id(record)) {
            panic!("injected panic: the workload marks this record's order id");
        }
        self.inner.handle(record, context).await
    }

    fn key(&self, record: &KinesisEventRecord) -> Option<String> {
        self.inner.key(record)
    }

    fn span(&self, record: &KinesisEventRecord) -> tracing::Span {
        self.inner.span(record)
    }
}

/// Kafka records panic the same way, by the event id in their value: a batch call panics when
/// any of its records is marked, and the driver then handles each alone, as for SQS.
impl<H: BatchHandler<KafkaRecord>> BatchHandler<KafkaRecord> for Panicking<H> {
    async fn handle_batch(&self, records: &[&KafkaRecord], context: &Context) -> Vec<RecordResult> {
        if records.iter().any(|record| self.should_panic_in_batch(kafka_event_id(record))) {
            panic!("injected panic: the workload marks one of this batch's event ids");
        }
        self.inner.handle_batch(records, context).await
    }
}

impl<H: OrderedBatchHandler<KafkaRecord>> OrderedBatchHandler<KafkaRecord> for Panicking<H> {
    async fn handle_ordered(&self, batch: &OrderedBatch<'_, KafkaRecord>, context: &Context) -> Vec<RecordResult> {
        if batch.records().iter().any(|record| self.should_panic_in_batch(kafka_event_id(record))) {
            panic!("injected panic: the workload marks one of this batch's event ids");
        }
        self.inner.handle_ordered(batch, context).await
    }
}

impl<H: Handler<KafkaRecord>> Handler<KafkaRecord> for Panicking<H> {
    async fn handle(&self, record: &KafkaRecord, context: &Context) -> RecordResult {
        if self.should_panic(kafka_event_id(record)) {
            panic!("injected panic: the workload marks this record's event id");
        }
        self.inner.handle(record, context).await
    }

    fn key(&self, record: &KafkaRecord) -> Option<String> {
        self.inner.key(record)
    }

    fn span(&self, record: &KafkaRecord) -> tracing::Span {
        self.inner.span(record)
    }
}
