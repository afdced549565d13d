//! What the drivers log of a record's own text has its addresses redacted: a handler's reason
//! (it may quote the record), and a Kinesis partition key (the producer's text: keying a stream
//! by customer, by the customer's address, is common). The drivers run in a child process of
//! this test binary with Lambda's JSON log format at DEBUG, and the lines are read from its
//! standard output, as in `emitted_lines.rs`.
//!
//! The redaction keeps no part of a local part the payment contract accepts, whatever
//! characters it holds (`valid_email` refuses only whitespace, control characters, a second `@`
//! and an undotted domain).

use std::process::Command;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use effectively_once_lambda::{kinesis, streams, Handled, Options, RecordError, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

const CHILD: &str = "LOGS_REDACT_CHILD";
const ADDRESS: &str = "alice@example.com";

/// Kinesis records are applied; stream records fail permanently with a reason naming the
/// record's address, as an outbox relay's might.
struct Script;

impl effectively_once_lambda::Handler<KinesisEventRecord> for Script {
    async fn handle(&self, _record: &KinesisEventRecord, _context: &Context) -> RecordResult {
        Ok(Handled::Applied)
    }
}

impl effectively_once_lambda::Handler<EventRecord> for Script {
    async fn handle(&self, _record: &EventRecord, _context: &Context) -> RecordResult {
        Err(RecordError::permanent(format!("no outbox row for {ADDRESS}'s payment")))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn child_runs_a_kinesis_and_a_stream_batch() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    lambda_runtime::tracing::init_default_subscriber();
    let options = Options { emit_metrics: false, ..Options::new("orders-consumer") }.drop_poison();
    let mut event: KinesisEvent =
        serde_json::from_slice(include_bytes!("../../../../events/kinesis-orders.json")).unwrap();
    event.records.truncate(1);
    event.records[0].kinesis.partition_key = ADDRESS.to_owned();
    let response = kinesis::process(&Script, LambdaEvent::new(event, Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty());

    let mut event: Event =
        serde_json::from_slice(include_bytes!("../../../../events/dynamodb-stream-outbox.json")).unwrap();
    event.records.truncate(1);
    let response = streams::process(&Script, LambdaEvent::new(event, Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty(), "a permanent failure is not the checkpoint");
}

#[test]
fn a_partition_key_and_a_reason_are_logged_with_their_addresses_redacted() {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        .args([
            "--exact",
            crate::common::test_path(module_path!(), "child_runs_a_kinesis_and_a_stream_batch").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .envs([
            ("AWS_LAMBDA_FUNCTION_NAME", "orders-consumer"),
            ("AWS_LAMBDA_FUNCTION_VERSION", "1"),
            ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
            // Debug: a record done (the Kinesis record, its partition key in its span) logs
            // at debug only.
            ("AWS_LAMBDA_LOG_LEVEL", "DEBUG"),
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("record done"), "the Kinesis record's outcome is logged at DEBUG:\n{stdout}");
    assert!(stdout.contains("record failed permanently"), "the permanent failure is logged:\n{stdout}");
    assert!(stdout.contains("a***@example.com"), "both are kept, redacted:\n{stdout}");
    assert!(!stdout.contains(ADDRESS), "an address in the logs:\n{stdout}");
}

/// Addresses `PaymentEvent::parse` accepts as `receipt_email`, and the local part each must lose.
const ACCEPTED: [(&str, &str); 4] = [
    // RFC 5322 atext: apostrophe, vertical bar, braces.
    ("o'brien@example.com", "o'"),
    ("john|doe@example.com", "john"),
    ("{jdoe}@example.com", "jdoe"),
    // A quoted local part: nothing before the `@` is seen as an address at all.
    ("\"john.smith\"@example.com", "john.smith"),
];

#[test]
fn a_panic_message_quoting_an_accepted_address_keeps_no_local_part() {
    let mut leaks = Vec::new();
    for (address, local) in ACCEPTED {
        // What the SQS driver logs for a handler that panics quoting the body.
        let logged = effectively_once_lambda::redact_emails(&format!(
            r#"cannot post {{"event_id":"pay_1","receipt_email":"{}"}}"#,
            address.replace('"', "\\\"")
        ));
        let plain = effectively_once_lambda::redact_emails(&format!("Email address is not verified: {address}"));
        for text in [logged, plain] {
            if text.contains(local) {
                leaks.push(text);
            }
        }
    }
    assert!(leaks.is_empty(), "local parts survive redaction:\n{}", leaks.join("\n"));
}
