//! The ordered batch path (`process_ordered`) on every trigger with a scripted handler: a batch
//! of several groups is one call in batch order with each record's lane and predecessors; its
//! answers equal the rounds' (`process_batch`) for every outcome, even when the handler breaks
//! the order (logged as a breach); panics and a wrong count fall back; near the deadline there
//! is no call, and a call still running at the margin is cut; a held permanent failure is not
//! parked.

use std::io;
use std::sync::{Arc, Mutex};

use crate::common::kinesis_batch;
use base64::Engine;
use effectively_once_lambda::events::{Context, DynamoDbEvent, EventRecord, KafkaEvent, KafkaRecord};
use effectively_once_lambda::events::{KinesisEventRecord, LambdaEvent, SqsEvent, SqsMessage};
use effectively_once_lambda::park::{Destination, Parcel, ParkFuture};
use effectively_once_lambda::{kafka, kinesis, sqs, streams, BatchHandler, Handled, Handler, Options};
use effectively_once_lambda::{OrderedBatch, OrderedBatchHandler, RecordError, RecordResult};
use serde_json::Value;

/// What the script reads of a record: its text (`verb` or `verb:key`) and its id.
trait Text: Sync {
    fn text(&self) -> String;
    fn id(&self) -> String;
}

impl Text for SqsMessage {
    fn text(&self) -> String {
        self.body.clone().unwrap_or_default()
    }

    fn id(&self) -> String {
        self.message_id.clone().unwrap_or_default()
    }
}

impl Text for KafkaRecord {
    fn text(&self) -> String {
        String::from_utf8(kafka::value_bytes(self).unwrap_or_default()).unwrap()
    }

    fn id(&self) -> String {
        format!("{}@{}", kafka::topic_partition(self), self.offset)
    }
}

impl Text for KinesisEventRecord {
    fn text(&self) -> String {
        String::from_utf8(self.kinesis.data.0.clone()).unwrap()
    }

    fn id(&self) -> String {
        self.kinesis.sequence_number.clone()
    }
}

impl Text for EventRecord {
    fn text(&self) -> String {
        let image = serde_json::to_value(&self.change.new_image).unwrap();
        image["t"]["S"].as_str().unwrap_or_default().to_owned()
    }

    fn id(&self) -> String {
        self.change.sequence_number.clone().unwrap_or_default()
    }
}

/// What an ordered call was handed of a record: its id, lane and predecessors.
type Handed = (String, Option<String>, Vec<usize>);

/// Answers a record by its verb: `retry`, `busy` (in progress elsewhere), `permanent`; anything
/// else is applied and remembered. In a batch call, `panic` panics it and `short` drops one
/// result; alone they are applied. Unless `breach` is set, the ordered call keeps the order
/// ([`OrderedBatch::waits`]); with it, every record is answered by its verb whatever precedes it.
#[derive(Default)]
struct Script {
    breach: bool,
    calls: Mutex<Vec<Vec<String>>>,
    handed: Mutex<Vec<Handed>>,
    alone: Mutex<Vec<String>>,
    applied: Mutex<Vec<String>>,
}

impl Script {
    fn breaching() -> Self {
        Script { breach: true, ..Script::default() }
    }

    fn answer(&self, record: &impl Text) -> RecordResult {
        let text = record.text();
        let result = match text.split(':').next().unwrap() {
            "retry" => Err(RecordError::retryable("throttled")),
            "busy" => Err(RecordError::in_progress_elsewhere("another attempt holds it")),
            "permanent" => Err(RecordError::permanent("not an order")),
            _ => Ok(Handled::Applied),
        };
        if result.is_ok() {
            self.applied.lock().unwrap().push(record.id());
        }
        result
    }

    fn calls(&self) -> Vec<Vec<String>> {
        self.calls.lock().unwrap().clone()
    }

    fn handed(&self) -> Vec<Handed> {
        self.handed.lock().unwrap().clone()
    }

    fn alone(&self) -> Vec<String> {
        self.alone.lock().unwrap().clone()
    }

    fn applied(&self) -> Vec<String> {
        let mut applied = self.applied.lock().unwrap().clone();
        applied.sort();
        applied
    }

    /// Notes a batch call's records; panics when one says `panic`.
    fn called<R: Text>(&self, records: &[&R]) {
        self.calls.lock().unwrap().push(records.iter().map(|r| r.id()).collect());
        if records.iter().any(|r| r.text() == "panic") {
            panic!("the batch call panics");
        }
    }

    fn shortened<R: Text>(records: &[&R], mut results: Vec<RecordResult>) -> Vec<RecordResult> {
        if records.iter().any(|r| r.text() == "short") {
            results.pop();
        }
        results
    }
}

impl<R: Text> Handler<R> for Script {
    async fn handle(&self, record: &R, _context: &Context) -> RecordResult {
        self.alone.lock().unwrap().push(record.id());
        self.answer(record)
    }

    fn key(&self, record: &R) -> Option<String> {
        record.text().split_once(':').map(|(_, key)| key.to_owned())
    }
}

impl<R: Text> BatchHandler<R> for Script {
    async fn handle_batch(&self, records: &[&R], _context: &Context) -> Vec<RecordResult> {
        self.called(records);
        Self::shortened(records, records.iter().map(|r| self.answer(*r)).collect())
    }
}

impl<R: Text> OrderedBatchHandler<R> for Script {
    async fn handle_ordered(&self, batch: &OrderedBatch<'_, R>, _context: &Context) -> Vec<RecordResult> {
        self.called(batch.records());
        if batch.records().iter().any(|r| r.text() == "slow") {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        }
        let mut answered = Vec::with_capacity(batch.len());
        for (at, record) in batch.records().iter().enumerate() {
            let lane = batch.lane(at).map(str::to_owned);
            self.handed.lock().unwrap().push((record.id(), lane, batch.after(at).to_vec()));
            let result = if batch.waits(at, &answered) && !self.breach {
                Err(RecordError::retryable("waits for an earlier record"))
            } else {
                self.answer(*record)
            };
            answered.push(result);
        }
        Self::shortened(batch.records(), answered)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Trigger {
    Fifo,
    Standard,
    Kafka,
    Kinesis,
    Streams,
}

use Trigger::*;

#[derive(Clone, Copy, Debug)]
enum Path {
    Rounds,
    Ordered,
}

/// SQS messages `m-0`, `m-1`, ... with the texts as bodies and the lanes as message groups
/// (none on a standard queue).
fn sqs_event(specs: &[(&str, &str)], fifo: bool) -> SqsEvent {
    let mut event = SqsEvent::default();
    for (i, (lane, text)) in specs.iter().enumerate() {
        let mut message = SqsMessage::default();
        message.message_id = Some(format!("m-{i}"));
        message.body = Some((*text).to_owned());
        if fifo {
            message.attributes.insert("MessageGroupId".into(), (*lane).to_owned());
        }
        event.records.push(message);
    }
    event
}

/// Kafka records of topic `orders`: lane `A` is partition 0, `B` partition 1, ...; the offset
/// is 10 plus the spec's position. Lambda (and the driver) order them by partition.
fn kafka_event(specs: &[(&str, &str)]) -> KafkaEvent {
    let mut event = KafkaEvent::default();
    for (i, (lane, text)) in specs.iter().enumerate() {
        let mut record = KafkaRecord::default();
        record.topic = Some("orders".into());
        record.partition = i64::from(lane.as_bytes()[0] - b'A');
        record.offset = 10 + i as i64;
        record.value = Some(base64::engine::general_purpose::STANDARD.encode(text));
        event.records.entry(kafka::topic_partition(&record)).or_default().push(record);
    }
    event
}

/// DynamoDB Streams records, sequence numbers 1, 2, ..., the lane as the item's `pk`, the text in
/// `NewImage.t`; a text starting with `skip` is a `MODIFY`, which the default options skip.
fn streams_event(specs: &[(&str, &str)]) -> DynamoDbEvent {
    let mut event: DynamoDbEvent =
        serde_json::from_slice(include_bytes!("../../../../events/dynamodb-stream-outbox.json")).unwrap();
    let template = event.records[0].clone();
    event.records = specs
        .iter()
        .enumerate()
        .map(|(i, (lane, text))| {
            let mut record = template.clone();
            record.event_name = if text.starts_with("skip") { "MODIFY" } else { "INSERT" }.into();
            record.change.sequence_number = Some((i + 1).to_string());
            record.change.keys = serde_json::from_value(serde_json::json!({"pk": {"S": lane}})).unwrap();
            record.change.new_image = serde_json::from_value(serde_json::json!({"t": {"S": text}})).unwrap();
            record
        })
        .collect();
    event
}

/// Poison dropped by name: parking is pinned below and in `park.rs`.
fn quiet() -> Options {
    Options { emit_metrics: false, ..Options::new("t") }.drop_poison()
}

/// Runs `specs` `(lane, text)` through `trigger`'s entry point for `path`; its answer as JSON.
async fn run(trigger: Trigger, path: Path, script: &Script, specs: &[(&str, &str)], options: &Options) -> Value {
    run_in(trigger, path, script, specs, options, Context::default()).await
}

async fn run_in(
    trigger: Trigger,
    path: Path,
    script: &Script,
    specs: &[(&str, &str)],
    options: &Options,
    context: Context,
) -> Value {
    let ordered = matches!(path, Path::Ordered);
    let answer = match trigger {
        Fifo | Standard => {
            let event = LambdaEvent::new(sqs_event(specs, trigger == Fifo), context);
            let response = if ordered {
                sqs::process_ordered(script, event, options).await
            } else {
                sqs::process_batch(script, event, options).await
            };
            serde_json::to_value(response)
        }
        Kafka => {
            let event = LambdaEvent::new(kafka_event(specs), context);
            let response = if ordered {
                kafka::process_ordered(script, event, options).await
            } else {
                kafka::process_batch(script, event, options).await
            };
            serde_json::to_value(response)
        }
        Kinesis => {
            let event = LambdaEvent::new(kinesis_batch(specs), context);
            let response = if ordered {
                kinesis::process_ordered(script, event, options).await
            } else {
                kinesis::process_batch(script, event, options).await
            };
            serde_json::to_value(response)
        }
        Streams => {
            let event = LambdaEvent::new(streams_event(specs), context);
            let response = if ordered {
                streams::process_ordered(script, event, options).await
            } else {
                streams::process_batch(script, event, options).await
            };
            serde_json::to_value(response)
        }
    };
    answer.unwrap()
}

/// Three groups of several records each, interleaved.
const SEVERAL_GROUPS: [(&str, &str); 8] =
    [("A", "ok"), ("B", "ok"), ("A", "ok"), ("C", "ok"), ("B", "ok"), ("A", "ok"), ("C", "ok"), ("B", "ok")];

/// The id of `specs[i]` on `trigger`.
fn id_of(trigger: Trigger, specs: &[(&str, &str)], i: usize) -> String {
    match trigger {
        Fifo | Standard => format!("m-{i}"),
        Kafka => format!("orders-{}@{}", specs[i].0.as_bytes()[0] - b'A', 10 + i),
        Kinesis | Streams => (i + 1).to_string(),
    }
}

/// The ids of `specs` in the order the trigger's driver sees them (Kafka: partition by partition).
fn ids_in_batch_order(trigger: Trigger, specs: &[(&str, &str)]) -> Vec<String> {
    let mut order: Vec<usize> = (0..specs.len()).collect();
    if trigger == Kafka {
        order.sort_by_key(|&i| specs[i].0);
    }
    order.into_iter().map(|i| id_of(trigger, specs, i)).collect()
}

#[tokio::test]
async fn a_batch_of_several_groups_is_one_call_in_batch_order_on_every_trigger() {
    for trigger in [Fifo, Kafka, Kinesis, Streams] {
        // Spawned: the batch future is `Send`.
        let (answer, script) = tokio::spawn(async move {
            let script = Script::default();
            (run(trigger, Path::Ordered, &script, &SEVERAL_GROUPS, &quiet()).await, script)
        })
        .await
        .unwrap();
        assert_eq!(script.calls(), [ids_in_batch_order(trigger, &SEVERAL_GROUPS)], "{trigger:?}");
        assert!(script.alone().is_empty(), "{trigger:?}");
        let rounds = Script::default();
        assert_eq!(answer, run(trigger, Path::Rounds, &rounds, &SEVERAL_GROUPS, &quiet()).await, "{trigger:?}");
        assert!(rounds.calls().len() > 1, "the rounds take one call per position: {trigger:?}");
    }
}

/// Each record comes with its lane and the previous record of its lane and of its key.
#[tokio::test]
async fn each_record_comes_with_its_lane_and_predecessors() {
    let script = Script::default();
    let specs = [("A", "ok:k"), ("B", "ok"), ("A", "ok"), ("B", "ok:k")];
    run(Fifo, Path::Ordered, &script, &specs, &quiet()).await;
    let lane = |l: &str| Some(l.to_owned());
    // A FIFO queue orders by message group alone: the key joins nothing.
    let expected = [
        ("m-0", lane("A"), vec![]),
        ("m-1", lane("B"), vec![]),
        ("m-2", lane("A"), vec![0]),
        ("m-3", lane("B"), vec![1]),
    ];
    assert_eq!(script.handed(), expected.map(|(id, lane, after)| (id.to_owned(), lane, after)));

    let script = Script::default();
    run(Kinesis, Path::Ordered, &script, &specs, &quiet()).await;
    let expected =
        [("1", lane("A"), vec![]), ("2", lane("B"), vec![]), ("3", lane("A"), vec![0]), ("4", lane("B"), vec![0, 1])];
    assert_eq!(script.handed(), expected.map(|(id, lane, after)| (id.to_owned(), lane, after)));
}

/// The outcomes a record may have, for the exhaustive check.
const VERBS: [&str; 4] = ["ok", "retry", "permanent", "busy"];

/// Two lanes, interleaved, and a key shared across them (the second of `A` and of `B`).
const LANES: [(&str, Option<&str>); 6] =
    [("A", None), ("A", Some("k")), ("B", None), ("A", None), ("B", Some("k")), ("B", None)];

/// Every assignment of outcomes to a six-record batch on every trigger: the ordered path answers
/// as the rounds do; the script that keeps the order applies what the rounds apply; one that
/// breaks it (applying records behind a failure) still gets the rounds' answer.
#[tokio::test]
async fn ordered_answers_equal_the_rounds_for_every_outcome() {
    for trigger in [Fifo, Standard, Kafka, Kinesis, Streams] {
        for assignment in 0..VERBS.len().pow(LANES.len() as u32) {
            let texts: Vec<String> = (0..LANES.len())
                .map(|i| {
                    let verb = VERBS[assignment / VERBS.len().pow(i as u32) % VERBS.len()];
                    LANES[i].1.map_or(verb.to_owned(), |key| format!("{verb}:{key}"))
                })
                .collect();
            let specs: Vec<(&str, &str)> =
                LANES.iter().zip(&texts).map(|((lane, _), text)| (*lane, text.as_str())).collect();
            let (rounds, ordered, breaching) = (Script::default(), Script::default(), Script::breaching());
            let expected = run(trigger, Path::Rounds, &rounds, &specs, &quiet()).await;
            let answer = run(trigger, Path::Ordered, &ordered, &specs, &quiet()).await;
            assert_eq!(answer, expected, "{trigger:?} {specs:?}");
            assert_eq!(ordered.applied(), rounds.applied(), "{trigger:?} {specs:?}");
            assert_eq!(ordered.calls().len(), 1, "{trigger:?} {specs:?}");
            let answer = run(trigger, Path::Ordered, &breaching, &specs, &quiet()).await;
            assert_eq!(answer, expected, "breaching: {trigger:?} {specs:?}");
        }
    }
}

/// A call that panics, or answers for another number of records, is trusted with none of them:
/// the batch runs again one record at a time, its hold-back exact.
#[tokio::test]
async fn a_panic_or_a_wrong_count_falls_back_to_one_record_at_a_time() {
    for trigger in [Fifo, Kafka, Kinesis, Streams] {
        for bad in ["panic", "short"] {
            let specs = [("A", "retry"), ("B", bad), ("A", "ok"), ("B", "ok")];
            let script = Script::default();
            let answer = run(trigger, Path::Ordered, &script, &specs, &quiet()).await;
            assert_eq!(script.calls().len(), 1, "{trigger:?} {bad}");
            // All but the record behind A's failure, handled alone.
            let mut expected = vec![id_of(trigger, &specs, 0), id_of(trigger, &specs, 1), id_of(trigger, &specs, 3)];
            expected.sort();
            let mut alone = script.alone();
            alone.sort();
            assert_eq!(alone, expected, "{trigger:?} {bad}");
            if bad == "panic" {
                assert_eq!(script.applied(), expected[1..], "nothing applied before the panic: {trigger:?}");
            }
            let rounds = run(trigger, Path::Rounds, &Script::default(), &specs, &quiet()).await;
            assert_eq!(answer, rounds, "{trigger:?} {bad}");
        }
    }
}

/// Within the deadline margin there is no call: every record is reported not started.
#[tokio::test]
async fn near_the_deadline_there_is_no_call() {
    for trigger in [Fifo, Standard, Kafka, Kinesis, Streams] {
        let script = Script::default();
        let mut context = Context::default();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        context.deadline = now + 200;
        let answer = run_in(trigger, Path::Ordered, &script, &SEVERAL_GROUPS, &quiet(), context.clone()).await;
        assert!(script.calls().is_empty() && script.alone().is_empty(), "{trigger:?}");
        let rounds = Script::default();
        assert_eq!(answer, run_in(trigger, Path::Rounds, &rounds, &SEVERAL_GROUPS, &quiet(), context).await);
    }
}

/// A call still running at the deadline margin is cut there: the answer comes before the
/// deadline and is the one a batch not started at all gets (every lane from its first record),
/// whatever the call did, so Lambda never ends the invocation with no answer.
#[tokio::test]
async fn a_call_still_running_at_the_deadline_margin_answers_every_record_not_done() {
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let specs = [("A", "ok"), ("B", "slow"), ("A", "ok"), ("C", "ok")];
    for trigger in [Fifo, Standard, Kafka, Kinesis, Streams] {
        let script = Script::default();
        let mut context = Context::default();
        context.deadline = now() + 1_500;
        let answer = run_in(trigger, Path::Ordered, &script, &specs, &quiet(), context.clone()).await;
        assert!(now() < context.deadline, "{trigger:?}: answered before the deadline");
        assert_eq!(script.calls().len(), 1, "{trigger:?}: the call was made");
        let late = Script::default();
        context.deadline = now() + 200;
        let not_started = run_in(trigger, Path::Rounds, &late, &specs, &quiet(), context).await;
        assert_eq!(answer, not_started, "{trigger:?}: every record delivered again");
    }
}

/// A standard queue orders nothing: one call, no lanes, no predecessors, and a failure holds
/// nothing back, even one the handler answers after it.
#[tokio::test]
async fn a_standard_queue_is_one_call_with_nothing_held() {
    let script = Script::breaching();
    let specs = [("A", "retry:k"), ("A", "ok:k"), ("A", "busy"), ("A", "ok")];
    let answer = run(Standard, Path::Ordered, &script, &specs, &quiet()).await;
    assert_eq!(script.calls(), [["m-0", "m-1", "m-2", "m-3"]]);
    assert!(script.handed().iter().all(|(_, lane, after)| lane.is_none() && after.is_empty()), "{:?}", script.handed());
    assert_eq!(
        answer,
        serde_json::json!({"batchItemFailures": [{"itemIdentifier": "m-0"}, {"itemIdentifier": "m-2"}]})
    );
    assert_eq!(script.applied(), ["m-1", "m-3"]);
}

/// A record skipped between two changes of one item is not handed over, and the later change
/// still follows the earlier one: held behind its failure, whatever the handler answers.
#[tokio::test]
async fn a_skipped_stream_record_keeps_its_items_chain() {
    let specs = [("a", "retry"), ("a", "skip"), ("b", "ok"), ("a", "ok")];
    for script in [Script::default(), Script::breaching()] {
        let answer = run(Streams, Path::Ordered, &script, &specs, &quiet()).await;
        assert_eq!(script.calls(), [["1", "3", "4"]]);
        let after: Vec<Vec<usize>> = script.handed().into_iter().map(|(_, _, after)| after).collect();
        assert_eq!(after, [vec![], vec![], vec![0]], "4 follows 1 through the skipped 2");
        assert_eq!(answer, serde_json::json!({"batchItemFailures": [{"itemIdentifier": "1"}]}));
        assert_eq!(answer, run(Streams, Path::Rounds, &Script::default(), &specs, &quiet()).await);
    }
}

/// A destination that keeps what it is given.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<Parcel>>>);

impl Destination for Kept {
    fn park<'a>(&'a self, parcels: &'a [Parcel]) -> ParkFuture<'a> {
        Box::pin(async move {
            self.0.lock().unwrap().extend_from_slice(parcels);
            parcels.iter().map(|_| Ok(())).collect()
        })
    }
}

/// A permanent answer behind a held record is reported not started before poison is parked: it
/// is not parked (the position must not pass it), while a permanent failure nothing holds is.
#[tokio::test]
async fn a_held_permanent_failure_is_not_parked() {
    for script in [Script::default(), Script::breaching()] {
        let kept = Kept::default();
        let options = Options { emit_metrics: false, ..Options::new("t") }.park_in(kept.clone());
        let specs = [("A", "retry"), ("A", "permanent"), ("B", "permanent"), ("B", "ok")];
        let answer = run(Kafka, Path::Ordered, &script, &specs, &options).await;
        let parked: Vec<String> =
            kept.0.lock().unwrap().iter().map(|p| serde_json::to_string(&p.coordinates).unwrap()).collect();
        assert_eq!(parked, [r#"{"topic_partition":"orders-1","offset":12}"#], "only B's poison");
        let named = serde_json::json!({"batchItemFailures": [
            {"itemIdentifier": {"partition": "orders-0", "offset": 10}},
            {"itemIdentifier": {"partition": "orders-0", "offset": 11}},
        ]});
        assert_eq!(answer, named);
    }
}

/// Log lines, as a `tracing` subscriber on this thread writes them.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> lambda_runtime::tracing::subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

const BREACH_CHILD: &str = "ORDERED_BREACH_LOGS_CHILD";

/// Runs `child_breach_logs` alone in a child process: a thread-local subscriber can miss events
/// while other tests hit the same callsites on other threads (see `panics.rs`).
#[test]
fn a_breach_is_logged_at_error_in_the_records_span() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            crate::common::test_path(module_path!(), "child_breach_logs").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(BREACH_CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("1 passed"), "the child ran its checks: {stdout}");
}

#[tokio::test]
async fn child_breach_logs() {
    if std::env::var_os(BREACH_CHILD).is_none() {
        return;
    }
    let logs = Logs::default();
    let subscriber = lambda_runtime::tracing::subscriber::fmt().with_writer(logs.clone()).finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let script = Script::breaching();
    let specs = [("A", "retry"), ("A", "ok"), ("B", "ok"), ("A", "busy")];
    let answer = run(Fifo, Path::Ordered, &script, &specs, &quiet()).await;
    assert_eq!(answer, run(Fifo, Path::Rounds, &Script::default(), &specs, &quiet()).await);
    assert_eq!(script.applied(), ["m-1", "m-2"], "the script applied m-1 behind m-0's failure");

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let breaches: Vec<&str> = text.lines().filter(|l| l.contains("order breach")).collect();
    assert_eq!(breaches.len(), 1, "m-3 was not applied, so no breach: {text}");
    assert!(breaches[0].contains("ERROR") && breaches[0].contains("message_id=\"m-1\""), "{}", breaches[0]);
    assert!(breaches[0].contains("record m-0"), "it names the failure it waits for: {}", breaches[0]);
}
