//! The Streams driver goes past a permanent failure: retrying cannot change a permanent answer,
//! and a checkpoint there would hold every record behind it (under MaximumRetryAttempts -1 for
//! the record age limit, 24 h, after which the batch is discarded with them).

use std::sync::Mutex;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use effectively_once_lambda::{streams, Disposition, RecordError, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

/// Fails the records listed (permanently or retryably), applies the others; records what ran.
struct Script {
    permanent: &'static [&'static str],
    retryable: &'static [&'static str],
    seen: Mutex<Vec<String>>,
}

impl effectively_once_lambda::Handler<EventRecord> for Script {
    async fn handle(&self, record: &EventRecord, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let seq = record.change.sequence_number.clone().unwrap();
        self.seen.lock().unwrap().push(seq.clone());
        if self.permanent.contains(&seq.as_str()) {
            return Err(RecordError::permanent("no outbox row for alice@example.com's payment"));
        }
        if self.retryable.contains(&seq.as_str()) {
            return Err(RecordError::retryable("SES throttled"));
        }
        Ok(Disposition::Applied)
    }
}

/// Four inserts, sequence numbers 1 to 4.
fn inserts() -> Event {
    let mut event: Event =
        serde_json::from_slice(include_bytes!("../../../events/dynamodb-stream-outbox.json")).unwrap();
    let insert = event.records[0].clone();
    event.records = (1..=4)
        .map(|i| {
            let mut r = insert.clone();
            r.change.sequence_number = Some(i.to_string());
            r
        })
        .collect();
    event
}

fn run(script: &Script) -> Vec<Option<String>> {
    let options = streams::Options { emit_metrics: false, ..streams::Options::new("t") };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let response =
        runtime.block_on(streams::process(script, LambdaEvent::new(inserts(), Context::default()), &options));
    response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()
}

#[test]
fn a_permanent_failure_is_not_the_checkpoint() {
    let script = Script { permanent: &["2"], retryable: &[], seen: Mutex::default() };
    assert!(run(&script).is_empty(), "acked: nothing to retry");
    assert_eq!(*script.seen.lock().unwrap(), ["1", "2", "3", "4"], "the records behind it ran");
}

#[test]
fn a_retryable_failure_behind_a_permanent_one_is_the_checkpoint() {
    let script = Script { permanent: &["1"], retryable: &["3"], seen: Mutex::default() };
    assert_eq!(run(&script), [Some("3".to_owned())]);
    assert_eq!(*script.seen.lock().unwrap(), ["1", "2", "3"], "nothing after the checkpoint");
}
