//! The DynamoDB Streams driver: inserts handled and other event names skipped (and counted),
//! the checkpoint at the first record not durably done; on the batch path, one call per round
//! with the next record of every item, an item's changes in stream order.

use std::sync::Mutex;

use crate::common::{checkpoint, stream_event};
use effectively_once_lambda::events::{Context, DynamoDbEvent, EventRecord, LambdaEvent};
use effectively_once_lambda::{streams, BatchHandler, Handled, Handler, Options, RecordError, RecordResult};

/// Fails the sequence numbers listed retryably; records what ran and each call's records.
#[derive(Default)]
struct Script {
    retryable: Vec<&'static str>,
    seen: Mutex<Vec<String>>,
    calls: Mutex<Vec<Vec<String>>>,
}

impl Script {
    fn answer(&self, record: &EventRecord) -> RecordResult {
        let seq = record.change.sequence_number.clone().unwrap();
        self.seen.lock().unwrap().push(seq.clone());
        if self.retryable.contains(&seq.as_str()) {
            return Err(RecordError::retryable("throttled"));
        }
        Ok(Handled::Applied)
    }
}

impl Handler<EventRecord> for Script {
    async fn handle(&self, record: &EventRecord, _context: &Context) -> RecordResult {
        self.answer(record)
    }
}

impl BatchHandler<EventRecord> for Script {
    async fn handle_batch(&self, records: &[&EventRecord], _context: &Context) -> Vec<RecordResult> {
        self.calls.lock().unwrap().push(records.iter().map(|r| r.change.sequence_number.clone().unwrap()).collect());
        records.iter().map(|record| self.answer(record)).collect()
    }
}

/// Records `(event name, item)`, sequence numbers 1, 2, ... in stream order.
fn event(records: &[(&str, &str)]) -> DynamoDbEvent {
    let mut event: DynamoDbEvent =
        serde_json::from_slice(include_bytes!("../../../../events/dynamodb-stream-outbox.json")).unwrap();
    let template = event.records[0].clone();
    event.records = records
        .iter()
        .enumerate()
        .map(|(i, (name, item))| {
            let mut record = template.clone();
            record.event_name = (*name).into();
            record.change.sequence_number = Some((i + 1).to_string());
            record.change.keys = serde_json::from_value(serde_json::json!({"pk": {"S": item}})).unwrap();
            record
        })
        .collect();
    event
}

fn quiet() -> Options {
    Options { emit_metrics: false, ..Options::new("t") }
}

async fn batch(script: &Script, records: &[(&str, &str)], options: &Options) -> Vec<Option<String>> {
    let response = streams::process_batch(script, LambdaEvent::new(event(records), Context::default()), options).await;
    response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()
}

#[tokio::test]
async fn distinct_items_are_one_call_and_one_items_changes_come_in_turn() {
    let script = Script::default();
    let options = Options { event_names: vec!["INSERT".into(), "MODIFY".into()], ..quiet() };
    let records = [("INSERT", "a"), ("INSERT", "b"), ("MODIFY", "a"), ("INSERT", "c"), ("MODIFY", "a")];
    assert!(batch(&script, &records, &options).await.is_empty());
    assert_eq!(*script.calls.lock().unwrap(), [vec!["1", "2", "4"], vec!["3"], vec!["5"]]);
}

#[tokio::test]
async fn the_checkpoint_is_the_first_record_not_durably_done() {
    let script = Script { retryable: vec!["2"], ..Script::default() };
    let records = [("INSERT", "a"), ("INSERT", "b"), ("INSERT", "c"), ("INSERT", "b")];
    assert_eq!(batch(&script, &records, &quiet()).await, [Some("2".to_owned())]);
    assert_eq!(*script.seen.lock().unwrap(), ["1", "2", "3"], "b's later change waits for it");
}

#[tokio::test]
async fn event_names_not_chosen_are_skipped_on_both_paths() {
    let records = [("INSERT", "a"), ("MODIFY", "a"), ("REMOVE", "b"), ("INSERT", "c")];
    let script = Script::default();
    assert!(batch(&script, &records, &quiet()).await.is_empty());
    assert_eq!(*script.seen.lock().unwrap(), ["1", "4"], "only INSERT by default");

    let script = Script::default();
    let options = Options { event_names: vec!["MODIFY".into(), "REMOVE".into()], ..quiet() };
    let response = streams::process(&script, LambdaEvent::new(event(&records), Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(*script.seen.lock().unwrap(), ["2", "3"], "the names chosen, and only them");
}

/// Fails the record with the given sequence number, succeeds on the others.
struct FailAt(Option<&'static str>, Mutex<Vec<String>>);

impl Handler<EventRecord> for FailAt {
    async fn handle(&self, record: &EventRecord, _context: &Context) -> RecordResult {
        let seq = record.change.sequence_number.clone().unwrap();
        self.1.lock().unwrap().push(seq.clone());
        if Some(seq.as_str()) == self.0 {
            return Err(RecordError::retryable("SES throttled"));
        }
        Ok(Handled::Applied)
    }
}

#[tokio::test]
async fn streams_handle_inserts_only_and_checkpoint_at_the_first_failure() {
    let options = streams::Options { emit_metrics: false, ..streams::Options::new("t") };
    let ok = FailAt(None, Mutex::default());
    let response = streams::process(&ok, LambdaEvent::new(stream_event(), Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(*ok.1.lock().unwrap(), ["111000000000000000000001", "111000000000000000000003"], "MODIFY skipped");

    let failing = FailAt(Some("111000000000000000000001"), Mutex::default());
    let response = streams::process(&failing, LambdaEvent::new(stream_event(), Context::default()), &options).await;
    assert_eq!(checkpoint(&response), [Some("111000000000000000000001".to_owned())]);
    assert_eq!(failing.1.lock().unwrap().len(), 1, "nothing after the checkpoint");
}
