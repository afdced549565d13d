//! The lines a deployed function prints, read back and parsed: the EMF metrics (namespace,
//! `Function` dimension and service from the environment, `ColdStart`, every disposition, a
//! handler's own metric) and the JSON log lines (request id, function name and version, cold
//! start, the record's X-Ray trace id).
//!
//! The drivers run in a child process of this test binary, with the environment Lambda and the
//! template give a function and Lambda's JSON log format, and the lines are read from its
//! standard output as CloudWatch Logs would receive them: the environment, standard output and
//! the cold start are the process's own, which a test in this process could not set apart.

use std::collections::HashMap;
use std::process::Command;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use effectively_once_lambda::metrics::Metrics;
use effectively_once_lambda::{sqs, streams, Handled, RecordError, RecordResult};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;

const CHILD: &str = "EMITTED_LINES_CHILD";
const TRACE_ROOT: &str = "1-5759e988-bd862e3fe1be46a994272793";

/// The environment of the deployed function (its log level is each test's: `child_lines`).
const ENV: [(&str, &str); 5] = [
    ("AWS_LAMBDA_FUNCTION_NAME", "stack-b-PaymentsConsumer-1X2Y"),
    ("AWS_LAMBDA_FUNCTION_VERSION", "7"),
    ("POWERTOOLS_METRICS_NAMESPACE", "StackB"),
    ("POWERTOOLS_SERVICE_NAME", "payments"),
    ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
];

/// Answers what each message's body names, and counts the orders it applied in a metric of its own.
struct Scripted {
    metrics: Metrics,
}

fn answer(name: &str) -> RecordResult {
    match name {
        "applied" => Ok(Handled::Applied),
        "duplicate" => Ok(Handled::Duplicate),
        "rejected" => Ok(Handled::Rejected),
        "skipped" => Ok(Handled::Skipped),
        "in-progress" => Err(RecordError::in_progress_elsewhere("held by another attempt")),
        "permanent" => Err(RecordError::permanent("malformed")),
        _ => Err(RecordError::retryable("throttled")),
    }
}

impl effectively_once_lambda::Handler<SqsMessage> for Scripted {
    /// Field names are the handler's: `order_id`, not a payment's `event_id`.
    fn span(&self, _message: &SqsMessage) -> tracing::Span {
        tracing::info_span!("order", order_id = tracing::field::Empty)
    }

    async fn handle(&self, message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let body: Value = serde_json::from_str(message.body.as_deref().unwrap()).unwrap();
        tracing::Span::current().record("order_id", format!("order-{}", message.message_id.as_deref().unwrap()));
        let result = answer(body["answer"].as_str().unwrap());
        if result == Ok(Handled::Applied) {
            self.metrics.add("OrdersPlaced", 1);
        }
        result
    }
}

impl effectively_once_lambda::Handler<EventRecord> for Scripted {
    async fn handle(&self, record: &EventRecord, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        answer(if record.change.sequence_number.as_deref() == Some("2") { "permanent" } else { "applied" })
    }
}

fn message(id: &str, answer: &str, trace: bool) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    // The body holds an address: no log line may show it.
    m.body = Some(serde_json::json!({"answer": answer, "receipt_email": "alice@example.com"}).to_string());
    if trace {
        m.attributes.insert("AWSTraceHeader".into(), format!("Root={TRACE_ROOT};Parent=53995c3f42cd8ad8;Sampled=1"));
    }
    m
}

fn context(request_id: &str) -> Context {
    let mut context = Context::default();
    context.request_id = request_id.into();
    context
}

/// The child: three invocations as one sandbox would run them.
#[tokio::test(flavor = "current_thread")]
async fn child_runs_three_invocations() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    lambda_runtime::tracing::init_default_subscriber();
    let options = sqs::Options::new("payments-consumer");
    let handler = Scripted { metrics: options.metrics.clone() };
    let mut batch = SqsEvent::default();
    batch.records = ["applied", "applied", "duplicate", "rejected", "skipped", "in-progress", "permanent", "retryable"]
        .iter()
        .enumerate()
        .map(|(i, answer)| message(&format!("m-{i}"), answer, i == 0))
        .collect();
    sqs::process(&handler, LambdaEvent::new(batch, context("req-1")), &options).await;
    let mut batch = SqsEvent::default();
    batch.records = vec![message("m-next", "applied", false)];
    sqs::process(&handler, LambdaEvent::new(batch, context("req-2")), &options).await;

    let options = streams::Options::new("receipts-relay").park_in(Accepts);
    let mut event: Event =
        serde_json::from_slice(include_bytes!("../../../../events/dynamodb-stream-outbox.json")).unwrap();
    let insert = event.records[0].clone();
    event.records = (1..=3)
        .map(|i| {
            let mut r = insert.clone();
            r.change.sequence_number = Some(i.to_string());
            if i == 3 {
                r.event_name = "MODIFY".into();
            }
            r
        })
        .collect();
    streams::process(&handler, LambdaEvent::new(event, context("req-3")), &options).await;
}

/// A park destination that takes every parcel.
struct Accepts;

impl effectively_once_lambda::park::Destination for Accepts {
    fn park<'a>(
        &'a self,
        parcels: &'a [effectively_once_lambda::park::Parcel],
    ) -> effectively_once_lambda::park::ParkFuture<'a> {
        Box::pin(async move { parcels.iter().map(|_| Ok(())).collect() })
    }
}

#[test]
fn the_emf_and_log_lines_a_function_prints() {
    let lines = child_lines("DEBUG");
    let (emf, logs): (Vec<&Value>, Vec<&Value>) = lines.iter().partition(|l| l.get("_aws").is_some());
    check_metrics(&emf);
    check_logs(&logs);
}

/// At info, a batch prints one line of counts and each failure's own line with its reason, and
/// no line per record done (those are at debug).
#[test]
fn at_info_a_batch_logs_its_counts_and_each_failure_with_its_reason() {
    let lines = child_lines("INFO");
    let logs: Vec<&Value> = lines.iter().filter(|l| l.get("_aws").is_none()).collect();
    let message = |l: &Value| l["fields"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(logs.iter().all(|l| message(l) != "record done"), "a record done at info");
    let batches: Vec<&Value> = logs.iter().copied().filter(|l| message(l) == "batch done").collect();
    assert_eq!(batches.len(), 3, "one line per invocation");
    let counts = |line: &Value| {
        ["applied", "rejected", "duplicate", "in_progress", "failed", "permanent", "parked", "skipped"]
            .map(|name| line["fields"][name].as_u64().unwrap_or_else(|| panic!("{name} missing: {line}")))
    };
    assert!(batches.iter().all(|l| l["level"] == "INFO"));
    assert_eq!(counts(batches[0]), [2, 1, 1, 1, 2, 1, 0, 1], "the first invocation's counts");
    assert_eq!(counts(batches[1]), [1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(counts(batches[2]), [1, 0, 0, 0, 1, 1, 1, 1], "the stream's: its poison parked");
    assert_eq!(batches[0]["spans"][0]["request_id"], "req-1", "in the invocation's span");
    // Each failure: its own line, in its record's span, with its reason.
    let reason = |id: &str| {
        let line = logs
            .iter()
            .find(|l| l["spans"].as_array().is_some_and(|s| s.iter().any(|s| s["message_id"] == id)))
            .unwrap_or_else(|| panic!("no line for {id}"));
        (line["level"].as_str().unwrap().to_owned(), line["fields"]["reason"].as_str().unwrap().to_owned())
    };
    assert_eq!(reason("m-6"), ("ERROR".to_owned(), "malformed".to_owned()));
    assert_eq!(reason("m-7"), ("WARN".to_owned(), "throttled".to_owned()));
    assert_eq!(reason("m-5"), ("WARN".to_owned(), "held by another attempt".to_owned()));
}

/// The JSON lines the child's three invocations print at `level`; none carries an address.
fn child_lines(level: &str) -> Vec<Value> {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        .args([
            "--exact",
            crate::common::test_path(module_path!(), "child_runs_three_invocations").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .envs(ENV)
        .env("AWS_LAMBDA_LOG_LEVEL", level)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(!stdout.contains("alice@example.com"), "an address in the output:\n{stdout}");
    // The harness prints `test emitted_lines::child_runs_three_invocations ... ` before the test's first line.
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| l.find('{').map(|start| &l[start..]))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let emf = lines.iter().filter(|l| l.get("_aws").is_some()).count();
    // One EMF line per invocation.
    assert_eq!(emf, 3, "{stdout}");
    lines
}

/// One EMF line per invocation, in the environment's namespace, under `Function` alone, with
/// each invocation's counts.
fn check_metrics(emf: &[&Value]) {
    for line in emf {
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "StackB");
        assert_eq!(directive["Dimensions"], serde_json::json!([["Function"]]));
        assert_eq!(line["service"], "payments");
        assert_eq!(line["function_version"], "7");
        assert_eq!(line["Function"], "stack-b-PaymentsConsumer-1X2Y");
        // Every metric declared has its value on the line, and every count is declared.
        let declared: Vec<&str> =
            directive["Metrics"].as_array().unwrap().iter().map(|m| m["Name"].as_str().unwrap()).collect();
        for name in &declared {
            assert!(line[name].is_number(), "{name} declared without a value");
        }
        for name in effectively_once_lambda::metrics::DRIVER_METRICS {
            assert!(declared.contains(&name), "{name} not published");
        }
    }
    let count = |line: &Value, name: &str| line[name].as_u64().unwrap_or_else(|| panic!("{name} missing"));
    let first = HashMap::from([
        ("ColdStart", 1),
        ("Applied", 2),
        ("Duplicate", 1),
        ("Rejected", 1),
        ("Skipped", 1),
        ("InProgressElsewhere", 1),
        ("Failed", 2),
        ("PermanentFailures", 1),
        ("OrdersPlaced", 2),
    ]);
    for (name, value) in &first {
        assert_eq!(count(emf[0], name), *value, "first invocation's {name}");
    }
    assert_eq!(emf[0]["request_id"], "req-1");
    assert_eq!((count(emf[1], "ColdStart"), count(emf[1], "Applied"), count(emf[1], "OrdersPlaced")), (0, 1, 1));
    assert_eq!(emf[1]["request_id"], "req-2");
    // The stream: 1 applied, 2 failed for good (parked, gone past), 3 a MODIFY, skipped.
    let stream = emf[2];
    assert_eq!(
        ["ColdStart", "Applied", "Failed", "PermanentFailures", "Parked", "Skipped"].map(|n| count(stream, n)),
        [0, 1, 1, 1, 1, 1]
    );
    assert!(stream.get("OrdersPlaced").is_none(), "the custom metric was emptied by the last flush");
}

/// Log lines: each in the invocation's span (request id, function name and version, cold start).
fn check_logs(logs: &[&Value]) {
    let span = |log: &Value, name: &str| -> Value {
        log["spans"].as_array().unwrap().iter().find(|s| s["name"] == name).cloned().unwrap_or(Value::Null)
    };
    let done = |field: &str| {
        logs.iter().filter(|l| l["fields"]["message"] == "record done" && !span(l, "record")[field].is_null()).count()
    };
    assert!(logs.iter().filter(|l| l["fields"]["message"] == "record done").all(|l| l["level"] == "DEBUG"));
    assert_eq!(done("message_id"), 6, "five messages done in the first invocation, one in the second");
    // The stream's INSERT at 1 is done; 2 failed permanently; the MODIFY at 3 is skipped, at debug.
    assert_eq!(done("sequence"), 1, "a stream record done says so, as a message does");
    for log in logs {
        if log["level"] == "INFO" {
            assert!(!log.to_string().contains('@'), "an address at info: {log}");
        }
    }
    for log in logs.iter().filter(|l| !span(l, "invocation").is_null()) {
        let invocation = span(log, "invocation");
        assert_eq!(invocation["function_name"], "stack-b-PaymentsConsumer-1X2Y", "{log}");
        assert_eq!(invocation["function_version"], "7", "{log}");
        let expected_cold = invocation["request_id"] == "req-1";
        assert_eq!(invocation["cold_start"], expected_cold, "{log}");
    }
    let by_message = |id: &str| {
        logs.iter().find(|l| span(l, "record")["message_id"] == id).unwrap_or_else(|| panic!("no line for {id}"))
    };
    let traced = by_message("m-0");
    // The outcome line is in the handler's span too, with the field it recorded.
    assert_eq!(span(traced, "order")["order_id"], "order-m-0", "{traced}");
    assert!(logs.iter().all(|l| span(l, "record").get("event_id").is_none()), "no payment field in the driver");
    assert_eq!(span(traced, "record")["xray_trace_id"], TRACE_ROOT);
    assert_eq!(span(traced, "invocation")["request_id"], "req-1");
    assert_eq!(span(traced, "invocation")["cold_start"], true);
    assert!(span(by_message("m-1"), "record").get("xray_trace_id").is_none(), "no header, no trace id");
    let later = by_message("m-next");
    assert_eq!(
        (&span(later, "invocation")["request_id"], &span(later, "invocation")["cold_start"]),
        (&"req-2".into(), &false.into())
    );
    let permanent =
        logs.iter().find(|l| span(l, "record")["sequence"] == "2").expect("the stream's permanent failure is logged");
    assert_eq!(permanent["level"], "ERROR");
    assert_eq!(span(permanent, "invocation")["request_id"], "req-3");
}

#[test]
fn the_trace_header_root_is_the_trace_id() {
    assert_eq!(sqs::trace_id(&format!("Root={TRACE_ROOT};Parent=53995c3f42cd8ad8;Sampled=1")), Some(TRACE_ROOT));
    assert_eq!(sqs::trace_id(&format!("Sampled=0; Root={TRACE_ROOT}")), Some(TRACE_ROOT));
    assert_eq!(sqs::trace_id("Parent=53995c3f42cd8ad8;Sampled=1"), None);
    assert_eq!(sqs::trace_id("Root="), None);
}
