//! Sample events and handler parts the driver tests share, and the name a test that runs
//! another in a child process gives it. Each test binary uses part of it.
#![allow(dead_code)]

use std::sync::Mutex;

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_lambda_events::event::streams::DynamoDbEventResponse;

/// The sample outbox stream (an INSERT, a MODIFY) and a second INSERT after them.
pub fn stream_event() -> Event {
    let mut event: Event =
        serde_json::from_slice(include_bytes!("../../../../events/dynamodb-stream-outbox.json")).unwrap();
    let mut second_insert = event.records[0].clone();
    second_insert.change.sequence_number = Some("111000000000000000000003".into());
    event.records.push(second_insert);
    event
}

/// Eight copies of the sample payment message, `m-0` .. `m-7`.
pub fn eight_messages() -> SqsEvent {
    let mut event: SqsEvent = serde_json::from_slice(include_bytes!("../../../../events/sqs-payment.json")).unwrap();
    let template = event.records[0].clone();
    event.records = (0..8)
        .map(|i| {
            let mut m = template.clone();
            m.message_id = Some(format!("m-{i}"));
            m
        })
        .collect();
    event
}

/// The message ids an SQS batch response reports failed.
pub fn failures(response: &SqsBatchResponse) -> Vec<&str> {
    response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect()
}

/// The sequence numbers a Streams batch response reports (the checkpoint).
pub fn checkpoint(response: &DynamoDbEventResponse) -> Vec<Option<String>> {
    response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect()
}

/// A handler's state that panics on the record `panic_on` and records the ids it applied, in
/// the order it applied them; the panic tests implement the drivers' handlers on it.
pub struct PanicsOn {
    pub panic_on: &'static str,
    applied: Mutex<Vec<String>>,
}

impl PanicsOn {
    pub fn new(panic_on: &'static str) -> Self {
        PanicsOn { panic_on, applied: Mutex::default() }
    }

    pub fn record(&self, id: String) {
        self.applied.lock().unwrap().push(id);
    }

    pub fn applied(&self) -> Vec<String> {
        self.applied.lock().unwrap().clone()
    }
}

/// Kinesis records `(partition key, data)` on shard `shardId-000000000001` of stream `orders`,
/// sequence numbers 1, 2, ... in batch order, as Lambda delivers them.
pub fn kinesis_batch(records: &[(&str, &str)]) -> KinesisEvent {
    let mut event = KinesisEvent::default();
    event.records = records
        .iter()
        .enumerate()
        .map(|(i, (partition, data))| {
            let mut record = KinesisEventRecord::default();
            record.kinesis.partition_key = (*partition).into();
            record.kinesis.sequence_number = (i + 1).to_string();
            *record.kinesis.data = data.as_bytes().to_vec();
            record.event_id = Some(format!("shardId-000000000001:{}", i + 1));
            record.event_source = Some("aws:kinesis".into());
            record.event_source_arn = Some("arn:aws:kinesis:us-east-1:123456789012:stream/orders".into());
            record
        })
        .collect();
    event
}

/// The harness's name of test `name` in the module whose `module_path!()` is `module`: the
/// module's path without the binary's crate name, then the test's, as `--exact` wants it for
/// a test run alone in a child process.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}
