//! Review finding: the Kinesis driver logs each record's partition key verbatim at INFO.
//!
//! `kinesis.rs` puts `partition_key` on the driver's `record` span, and every line of the
//! record (its `record done` at INFO among them) carries the span's fields. A partition key is
//! the producer's data, not an AWS identifier: any Unicode string up to 256 bytes, and keying a
//! stream by customer (the sample event's `customer-alice`) is the common choice, by the
//! customer's email address included. The other drivers' spans hold only identifiers AWS mints
//! (a message id, an X-Ray trace id, an event name and a sequence number; a stream record's item
//! `Keys` are deliberately not on its span), and every text of the record's own that the drivers
//! log (a panic's message, a body that does not decode) goes through `redact_emails`. The
//! partition key does not, so an address used as one lands in CloudWatch Logs on every record.
//!
//! The driver runs in a child process of this test binary with Lambda's JSON log format, and the
//! lines are read from its standard output, as in `emitted_lines.rs`.

use std::process::Command;

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use effectively_once_lambda::{kinesis, Disposition, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

const CHILD: &str = "KINESIS_PARTITION_KEY_CHILD";
const ADDRESS: &str = "alice@example.com";

/// The environment of a deployed function logging JSON at INFO.
const ENV: [(&str, &str); 4] = [
    ("AWS_LAMBDA_FUNCTION_NAME", "orders-consumer"),
    ("AWS_LAMBDA_FUNCTION_VERSION", "1"),
    ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
    ("AWS_LAMBDA_LOG_LEVEL", "INFO"),
];

/// Applies every record.
struct Orders;

impl effectively_once_lambda::Handler<KinesisEventRecord> for Orders {
    async fn handle(&self, _record: &KinesisEventRecord, _context: &Context) -> RecordResult {
        Ok(Disposition::Applied)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn child_runs_a_kinesis_batch_keyed_by_customer_address() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    lambda_runtime::tracing::init_default_subscriber();
    let options = kinesis::Options { emit_metrics: false, ..kinesis::Options::new("orders-consumer") };
    let mut event: KinesisEvent =
        serde_json::from_slice(include_bytes!("../../../events/kinesis-orders.json")).unwrap();
    event.records.truncate(1);
    // The producer keys the stream by customer, the customer being their address. The data is
    // the handler's business only: this handler does not read it.
    event.records[0].kinesis.partition_key = ADDRESS.to_owned();
    event.records[0].kinesis.data = serde_json::from_value(serde_json::json!("e30=")).unwrap();
    let response = kinesis::process(&Orders, LambdaEvent::new(event, Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty());
}

#[test]
fn a_kinesis_record_span_logs_its_partition_key_redacted() {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        .args(["--exact", "child_runs_a_kinesis_batch_keyed_by_customer_address", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(ENV)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("record done"), "the record's outcome is logged at INFO:\n{stdout}");
    assert!(!stdout.contains(ADDRESS), "the partition key's address at INFO, unredacted:\n{stdout}");
}
