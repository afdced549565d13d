//! Review finding: the DynamoDB Streams driver logs a permanent failure's reason unredacted.
//!
//! Before the drivers moved onto `driver.rs`, `streams::process` logged a permanent failure as
//! `reason = %redact_emails(&error.reason)`, and `streams::process` still documents it so ("it
//! is logged at error with its sequence number and reason (redacted)"). The shared `driver::log`
//! now writes `reason = %error.reason` as it is, for every trigger: a stream handler whose
//! permanent reason names the record's address (the reason `streams_permanent.rs` scripts: "no
//! outbox row for alice@example.com's payment") puts it in CloudWatch Logs verbatim, at ERROR,
//! which the INFO log level ships. The redaction the streams driver applied as a last line of
//! defence, under the handler's own, is gone.
//!
//! The driver runs in a child process of this test binary with Lambda's JSON log format, and the
//! lines are read from its standard output, as in `emitted_lines.rs`.

use std::process::Command;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use effectively_once_lambda::{streams, RecordError, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

const CHILD: &str = "STREAMS_PERMANENT_REASON_CHILD";
const ADDRESS: &str = "alice@example.com";

/// The environment of a deployed function logging JSON at INFO.
const ENV: [(&str, &str); 4] = [
    ("AWS_LAMBDA_FUNCTION_NAME", "receipts-relay"),
    ("AWS_LAMBDA_FUNCTION_VERSION", "1"),
    ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
    ("AWS_LAMBDA_LOG_LEVEL", "INFO"),
];

/// Fails every record permanently with a reason naming the record's address, as the outbox
/// relay in `streams_permanent.rs` does.
struct Relay;

impl effectively_once_lambda::Handler<EventRecord> for Relay {
    async fn handle(&self, _record: &EventRecord, _context: &Context) -> RecordResult {
        Err(RecordError::permanent(format!("no outbox row for {ADDRESS}'s payment")))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn child_runs_a_stream_batch_with_a_permanent_failure() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    lambda_runtime::tracing::init_default_subscriber();
    let options = streams::Options { emit_metrics: false, ..streams::Options::new("receipts-relay") };
    let mut event: Event =
        serde_json::from_slice(include_bytes!("../../../events/dynamodb-stream-outbox.json")).unwrap();
    // The sample's INSERT alone: its image holds `receipt_email: alice@example.com`.
    event.records.truncate(1);
    assert_eq!(event.records[0].event_name, "INSERT");
    let response = streams::process(&Relay, LambdaEvent::new(event, Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty(), "a permanent failure is not the checkpoint");
}

#[test]
fn a_streams_permanent_failure_logs_its_reason_redacted() {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        .args(["--exact", "child_runs_a_stream_batch_with_a_permanent_failure", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(ENV)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        stdout.contains("record failed permanently"),
        "the permanent failure is logged:\n{stdout}"
    );
    assert!(!stdout.contains(ADDRESS), "the address in the permanent failure's reason, unredacted:\n{stdout}");
}
