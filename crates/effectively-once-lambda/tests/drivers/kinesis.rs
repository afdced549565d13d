//! The Kinesis driver: partition keys concurrently, in order within a key; the checkpoint is the
//! first record a later delivery may still make take effect; a permanent failure is not it; the
//! batch path calls the handler once per round, one record per group.

use crate::common::kinesis_batch;
use std::sync::Mutex;
use std::time::Duration;

use effectively_once_lambda::events::{Context, KinesisEventRecord, KinesisEventResponse, LambdaEvent};
use effectively_once_lambda::kinesis::{self, Options};
use effectively_once_lambda::{BatchHandler, Handled, Handler, RecordError, RecordResult};

/// Answers each record by the text of its data (`ok`, `retry`, `permanent`, `panic`, `slow`),
/// recording the order it started and finished records in; its key is the data's part after
/// `:` when there is one.
#[derive(Default)]
struct Script {
    started: Mutex<Vec<String>>,
    finished: Mutex<Vec<String>>,
    calls: Mutex<Vec<Vec<String>>>,
}

fn data(record: &KinesisEventRecord) -> String {
    String::from_utf8(record.kinesis.data.0.clone()).unwrap()
}

impl Script {
    async fn answer(&self, record: &KinesisEventRecord) -> RecordResult {
        let seq = record.kinesis.sequence_number.clone();
        self.started.lock().unwrap().push(seq.clone());
        let text = data(record);
        let verb = text.split(':').next().unwrap().to_owned();
        if verb == "slow" {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let result = match verb.as_str() {
            "retry" => Err(RecordError::retryable("throttled")),
            "permanent" => Err(RecordError::permanent("not an order")),
            "panic" => panic!("cannot handle {seq}"),
            _ => Ok(Handled::Applied),
        };
        self.finished.lock().unwrap().push(seq);
        result
    }
}

impl Handler<KinesisEventRecord> for Script {
    async fn handle(&self, record: &KinesisEventRecord, _context: &Context) -> RecordResult {
        self.answer(record).await
    }

    fn key(&self, record: &KinesisEventRecord) -> Option<String> {
        data(record).split_once(':').map(|(_, key)| key.to_owned())
    }
}

impl BatchHandler<KinesisEventRecord> for Script {
    async fn handle_batch(&self, records: &[&KinesisEventRecord], _context: &Context) -> Vec<RecordResult> {
        self.calls.lock().unwrap().push(records.iter().map(|r| r.kinesis.sequence_number.clone()).collect());
        let mut out = Vec::new();
        for record in records {
            out.push(self.answer(record).await);
        }
        out
    }
}

/// Poison dropped by name: these tests pin checkpoints; parking is pinned in `park.rs`.
fn quiet() -> Options {
    Options { emit_metrics: false, ..Options::new("t") }.drop_poison()
}

fn checkpoint(response: &KinesisEventResponse) -> Vec<Option<String>> {
    response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect()
}

async fn process(script: &Script, records: &[(&str, &str)]) -> Vec<Option<String>> {
    checkpoint(&kinesis::process(script, LambdaEvent::new(kinesis_batch(records), Context::default()), &quiet()).await)
}

async fn process_batch(script: &Script, records: &[(&str, &str)]) -> Vec<Option<String>> {
    checkpoint(
        &kinesis::process_batch(script, LambdaEvent::new(kinesis_batch(records), Context::default()), &quiet()).await,
    )
}

#[tokio::test]
async fn a_batch_that_succeeds_reports_nothing() {
    let script = Script::default();
    assert!(process(&script, &[("a", "ok"), ("b", "ok"), ("a", "ok")]).await.is_empty());
    assert_eq!(script.finished.lock().unwrap().len(), 3);
}

/// Records of one partition key run in order even when the first is slow and the others are
/// not; another key runs beside them.
#[tokio::test]
async fn one_partition_key_runs_in_order_while_others_run_beside_it() {
    let script = Script::default();
    assert!(process(&script, &[("a", "slow"), ("b", "ok"), ("a", "ok"), ("a", "ok")]).await.is_empty());
    let finished = script.finished.lock().unwrap().clone();
    let of_a: Vec<&String> = finished.iter().filter(|s| ["1", "3", "4"].contains(&s.as_str())).collect();
    assert_eq!(of_a, ["1", "3", "4"], "key a in stream order: {finished:?}");
    assert_eq!(finished[0], "2", "key b did not wait for key a's slow record: {finished:?}");
}

/// The checkpoint is the first record, in stream order, a later delivery may still make take
/// effect; the rest of its key is not started; other keys go on.
#[tokio::test]
async fn the_checkpoint_is_the_earliest_retryable_failure_and_its_key_waits() {
    let script = Script::default();
    let answer = process(&script, &[("a", "ok"), ("b", "slow"), ("b", "retry"), ("a", "retry"), ("b", "ok")]).await;
    assert_eq!(answer, [Some("3".to_owned())], "3 comes before 4 in the shard");
    let started = script.started.lock().unwrap().clone();
    assert!(!started.contains(&"5".to_owned()), "b's record behind its failure was not started: {started:?}");
    assert!(started.contains(&"4".to_owned()), "key a went on beside b: {started:?}");
}

#[tokio::test]
async fn a_permanent_failure_is_not_the_checkpoint() {
    let script = Script::default();
    assert!(process(&script, &[("a", "permanent"), ("a", "ok"), ("b", "ok")]).await.is_empty());
    assert_eq!(script.finished.lock().unwrap().len(), 3, "the key went on past its permanent failure");
    let script = Script::default();
    let answer = process(&script, &[("a", "permanent"), ("b", "ok"), ("a", "retry")]).await;
    assert_eq!(answer, [Some("3".to_owned())]);
}

#[tokio::test]
async fn a_panicking_record_is_the_checkpoint_and_its_key_waits() {
    let script = Script::default();
    let answer = process(&script, &[("a", "ok"), ("b", "panic"), ("b", "ok"), ("c", "ok")]).await;
    assert_eq!(answer, [Some("2".to_owned())]);
    let finished = script.finished.lock().unwrap().clone();
    assert!(finished.contains(&"4".to_owned()) && !finished.contains(&"3".to_owned()), "{finished:?}");
}

/// Two copies of one business event under different partition keys (a producer retry) run one
/// after the other, so the second finds the first done rather than in progress.
#[tokio::test]
async fn records_sharing_a_business_key_run_in_turn_across_partition_keys() {
    let script = Script::default();
    assert!(process(&script, &[("a", "slow:order-1"), ("b", "ok:order-1"), ("c", "ok")]).await.is_empty());
    let finished = script.finished.lock().unwrap().clone();
    let first = finished.iter().position(|s| s == "1").unwrap();
    let second = finished.iter().position(|s| s == "2").unwrap();
    assert!(first < second, "the retry copy ran after the first: {finished:?}");
}

#[tokio::test]
async fn records_not_started_before_the_deadline_are_the_checkpoint() {
    let script = Script::default();
    let mut context = Context::default();
    context.deadline =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 + 500;
    let event = LambdaEvent::new(kinesis_batch(&[("a", "ok"), ("b", "ok")]), context);
    let answer = checkpoint(&kinesis::process(&script, event, &quiet()).await);
    assert_eq!(answer, [Some("1".to_owned())], "within the 1 s margin nothing starts");
    assert!(script.started.lock().unwrap().is_empty());
}

/// The batch path: distinct keys in one call; a key's next record in the next round.
#[tokio::test]
async fn the_batch_path_calls_once_per_round_with_one_record_per_key() {
    let script = Script::default();
    assert!(process_batch(&script, &[("a", "ok"), ("b", "ok"), ("a", "ok"), ("c", "ok")]).await.is_empty());
    assert_eq!(*script.calls.lock().unwrap(), [vec!["1", "2", "4"], vec!["3"]]);
}

#[tokio::test]
async fn the_batch_path_checkpoints_at_the_first_record_not_durably_done() {
    let script = Script::default();
    let answer = process_batch(&script, &[("a", "ok"), ("b", "retry"), ("b", "ok"), ("a", "retry")]).await;
    assert_eq!(answer, [Some("2".to_owned())]);
    assert!(!script.started.lock().unwrap().contains(&"3".to_owned()), "b's next record was held back");
}

/// A batch call that panics is not trusted: each of its records is handled alone, and a record
/// that panics there too is the checkpoint.
#[tokio::test]
async fn a_panicking_batch_call_falls_back_to_one_record_at_a_time() {
    let script = Script::default();
    let answer = process_batch(&script, &[("a", "ok"), ("b", "panic"), ("c", "ok")]).await;
    assert_eq!(answer, [Some("2".to_owned())]);
    let finished = script.finished.lock().unwrap().clone();
    assert!(finished.contains(&"1".to_owned()) && finished.contains(&"3".to_owned()), "{finished:?}");
}
