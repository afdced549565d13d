//! A handler that panics on one record: that record alone fails (SQS) or is the checkpoint
//! (Streams); the other records' effects happen, and the panic's message reaches no log with
//! an email address in it.

use std::io;
use std::process::Command;
use std::sync::{Arc, Mutex};

use crate::common::{checkpoint, eight_messages, failures, stream_event, PanicsOn};
use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::kafka::{KafkaEvent, KafkaRecord};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use effectively_once_lambda::{kafka, sqs, streams, Handled, RecordResult};
use lambda_runtime::tracing::subscriber::fmt::MakeWriter;
use lambda_runtime::{Context, LambdaEvent};

const ADDRESS: &str = "alice@example.com";
const REDACTED: &str = "a***@example.com";

/// Applies every record (records its event id) except the one with `panic_on`, where it panics
/// with a message that quotes the body, address and all, as careless handler code does.
impl PanicsOn {
    fn apply(&self, event_id: &str, body: &str) -> RecordResult {
        if event_id == self.panic_on {
            panic!("cannot post {body}");
        }
        self.record(event_id.to_owned());
        Ok(Handled::Applied)
    }
}

impl effectively_once_lambda::Handler<SqsMessage> for PanicsOn {
    async fn handle(&self, message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let body = message.body.as_deref().unwrap();
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        // An await first, so the panic comes from a later poll, not the first.
        tokio::task::yield_now().await;
        self.apply(json["event_id"].as_str().unwrap(), body)
    }
}

impl effectively_once_lambda::Handler<EventRecord> for PanicsOn {
    async fn handle(&self, record: &EventRecord, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let sequence = record.change.sequence_number.clone().unwrap();
        tokio::task::yield_now().await;
        self.apply(&sequence, &format!("{{\"receipt_email\": \"{ADDRESS}\"}}"))
    }
}

/// A Kafka record panics by its `topic-partition@offset`.
impl effectively_once_lambda::Handler<KafkaRecord> for PanicsOn {
    async fn handle(&self, record: &KafkaRecord, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let id = format!("{}@{}", kafka::topic_partition(record), record.offset);
        tokio::task::yield_now().await;
        self.apply(&id, &format!("{{\"receipt_email\": \"{ADDRESS}\"}}"))
    }
}

/// Two records of partition 0 of `payments`, at offsets 7 and 8.
fn kafka_event() -> KafkaEvent {
    let mut event = KafkaEvent::default();
    let records = (7..9)
        .map(|offset| {
            let mut record = KafkaRecord::default();
            record.topic = Some("payments".into());
            record.offset = offset;
            record
        })
        .collect();
    event.records.insert("payments-0".into(), records);
    event
}

/// Eight payments on a standard queue, `m-0` .. `m-7` carrying `pay_0` .. `pay_7`, each with a
/// receipt address.
fn standard_batch() -> SqsEvent {
    let mut event = eight_messages();
    for (i, m) in event.records.iter_mut().enumerate() {
        m.body = Some(format!(
            r#"{{"event_id": "pay_{i}", "account_id": "acct_1", "amount_cents": 100, "currency": "USD", "receipt_email": "{ADDRESS}"}}"#
        ));
    }
    event
}

fn quiet(concurrency: usize) -> sqs::Options {
    sqs::Options { concurrency, emit_metrics: false, ..sqs::Options::new("t") }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_record_fails_alone_at_every_concurrency() {
    for concurrency in [1, 3, 10] {
        let handler = PanicsOn::new("pay_3");
        let event = LambdaEvent::new(standard_batch(), Context::default());
        let response = sqs::process(&handler, event, &quiet(concurrency)).await;
        assert_eq!(failures(&response), ["m-3"], "concurrency {concurrency}");
        let mut applied = handler.applied();
        applied.sort();
        assert_eq!(
            applied,
            ["pay_0", "pay_1", "pay_2", "pay_4", "pay_5", "pay_6", "pay_7"],
            "concurrency {concurrency}"
        );
    }
}

#[tokio::test]
async fn a_panic_in_a_fifo_group_holds_back_the_rest_of_that_group_only() {
    let handler = PanicsOn::new("pay_3002"); // fifo-a-2
    let event: SqsEvent = serde_json::from_slice(include_bytes!("../../../../events/sqs-fifo.json")).unwrap();
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &quiet(10)).await;
    assert_eq!(failures(&response), ["fifo-a-2", "fifo-a-3"], "a-3 is not started after a-2 panicked");
    let applied = handler.applied();
    let group_a: Vec<_> = applied.iter().filter(|e| e.starts_with("pay_30")).collect();
    let group_b: Vec<_> = applied.iter().filter(|e| e.starts_with("pay_31")).collect();
    assert_eq!(group_a, ["pay_3001"]);
    assert_eq!(group_b, ["pay_3101", "pay_3102", "pay_3103"], "the other group goes on, in order");
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

impl<'a> MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap().lines().map(str::to_owned).collect()
    }
}

/// Runs `child_panic_logs` alone in a child process: a thread-local subscriber misses events now
/// and then while other tests in this binary hit the same callsites on other threads (tracing's
/// per-callsite interest is cached process-wide), which made this test flaky.
#[test]
fn the_panic_is_logged_at_error_with_the_record_id_and_no_address() {
    let (output, stdout, stderr) = run_child("child_panic_logs", LOGS_CHILD);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "the child ran its checks: {stdout}");
}

/// Runs this binary's test `name` alone in a child process, with `env` set on the child only;
/// its exit status, standard output and standard error.
fn run_child(name: &str, env: &str) -> (std::process::Output, String, String) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", crate::common::test_path(module_path!(), name).as_str(), "--nocapture", "--test-threads=1"])
        .env(env, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

const LOGS_CHILD: &str = "TRIGGERS_PANIC_LOGS_CHILD";

// Current thread: the subscriber is this thread's default, and every record is polled here.
#[tokio::test]
async fn child_panic_logs() {
    if std::env::var_os(LOGS_CHILD).is_none() {
        return;
    }
    let logs = Logs::default();
    let subscriber = lambda_runtime::tracing::subscriber::fmt().with_writer(logs.clone()).finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let handler = PanicsOn::new("pay_3");
    sqs::process(&handler, LambdaEvent::new(standard_batch(), Context::default()), &quiet(10)).await;
    let options = streams::Options { emit_metrics: false, ..streams::Options::new("t") };
    let stream_handler = PanicsOn::new("111000000000000000000001");
    streams::process(&stream_handler, LambdaEvent::new(stream_event(), Context::default()), &options).await;
    let options = kafka::Options { emit_metrics: false, ..kafka::Options::new("t") };
    let kafka_handler = PanicsOn::new("payments-0@7");
    kafka::process(&kafka_handler, LambdaEvent::new(kafka_event(), Context::default()), &options).await;

    let lines = logs.lines();
    let errors: Vec<_> = lines.iter().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 3, "{lines:#?}");
    assert!(errors[2].contains("id=payments-0@7") && errors[2].contains("panicked"), "{}", errors[2]);
    assert!(errors[0].contains("message_id=\"m-3\"") && errors[0].contains("panicked"), "{}", errors[0]);
    assert!(
        errors[1].contains("sequence=\"111000000000000000000001\"") && errors[1].contains("panicked"),
        "{}",
        errors[1]
    );
    for error in &errors {
        assert!(error.contains(REDACTED), "the message is kept, redacted: {error}");
    }
    assert!(lines.iter().all(|l| !l.contains(ADDRESS)), "{lines:#?}");
    assert!(lines.iter().all(|l| !l.contains("WARN")), "one line per panic, at error: {lines:#?}");
}

#[tokio::test]
async fn a_panicking_stream_record_is_the_checkpoint() {
    let options = streams::Options { emit_metrics: false, ..streams::Options::new("t") };

    let handler = PanicsOn::new("111000000000000000000003");
    let response = streams::process(&handler, LambdaEvent::new(stream_event(), Context::default()), &options).await;
    assert_eq!(checkpoint(&response), [Some("111000000000000000000003".to_owned())]);
    assert_eq!(handler.applied(), ["111000000000000000000001"], "the record before it is done");

    let handler = PanicsOn::new("111000000000000000000001");
    let response = streams::process(&handler, LambdaEvent::new(stream_event(), Context::default()), &options).await;
    assert_eq!(checkpoint(&response), [Some("111000000000000000000001".to_owned())]);
    assert!(handler.applied().is_empty(), "nothing after the checkpoint");
}

const CHILD: &str = "TRIGGERS_PANIC_CHILD";

/// Run by `the_process_output_is_redacted_and_counts_the_panic` in a child process (with
/// `TRIGGERS_PANIC_CHILD` set on the child alone), so the panic hook's standard error and the
/// metrics line on standard output can be read; does nothing otherwise.
#[tokio::test]
async fn child_batch_with_a_panic() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let handler = PanicsOn::new("pay_3");
    let response =
        sqs::process(&handler, LambdaEvent::new(standard_batch(), Context::default()), &sqs::Options::new("t")).await;
    println!("RESPONSE {}", serde_json::to_string(&response).unwrap());
}

#[test]
fn the_process_output_is_redacted_and_counts_the_panic() {
    let (output, stdout, stderr) = run_child("child_batch_with_a_panic", CHILD);
    assert!(output.status.success(), "the process lives on\n{stdout}\n{stderr}");
    assert!(stderr.contains("panicked at") && stderr.contains(REDACTED), "the hook still reports the panic: {stderr}");
    assert!(!stdout.contains(ADDRESS) && !stderr.contains(ADDRESS), "no address anywhere\n{stdout}\n{stderr}");

    // The harness may print the test's name on the same line, before it.
    let metrics = stdout.lines().find_map(|l| l.find("{\"_aws\"").map(|i| &l[i..])).expect("an EMF line");
    let metrics: serde_json::Value = serde_json::from_str(metrics).unwrap();
    assert_eq!((metrics["Applied"].as_u64(), metrics["Failed"].as_u64()), (Some(7), Some(1)), "{metrics}");

    let response = stdout.lines().find_map(|l| l.split_once("RESPONSE ")).expect("a batch response").1;
    let response: SqsBatchResponse = serde_json::from_str(response).unwrap();
    assert_eq!(failures(&response), ["m-3"]);
}

/// The catch needs unwinding: under `panic = "abort"` a panicking record still ends the
/// process (and its whole batch). Test builds always unwind, so the release profile is read.
#[test]
fn the_release_profile_unwinds() {
    let manifest = include_str!("../../../../Cargo.toml");
    let release = manifest.split("[profile.release]").nth(1).expect("a release profile");
    let release = release.split("\n[").next().unwrap();
    let settings: Vec<_> = release.lines().map(|l| l.split('#').next().unwrap().replace(' ', "")).collect();
    assert!(!settings.iter().any(|s| s == "panic=\"abort\""), "[profile.release] must not abort on panic");
}
