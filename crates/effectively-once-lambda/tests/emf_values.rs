//! A handler's own metric never makes the invocation's EMF line invalid: a value or a sum
//! outside what CloudWatch takes (0, or magnitudes 2^-360 to 2^360; serde_json writes an
//! infinite sum as `null`) is dropped alone, so the driver's counts on the line (`Failed`, ...),
//! which the alarms read, are kept.
//!
//! Run in a child process, as `emitted_lines.rs` does: the EMF line is printed on stdout.

use std::process::Command;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use effectively_once_lambda::metrics::Metrics;
use effectively_once_lambda::{sqs, RecordError, RecordResult};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;

const CHILD: &str = "REVIEW_EMF_VALUES_CHILD";

/// Fails every record (the count the alarms watch), and adds a metric of its own: its body.
struct Measuring {
    metrics: Metrics,
}

impl effectively_once_lambda::Handler<SqsMessage> for Measuring {
    async fn handle(&self, message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let value: f64 = message.body.as_deref().unwrap().parse().unwrap();
        self.metrics.add("BytesSeen", value);
        Err(RecordError::permanent("malformed"))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn child_prints_two_lines() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let options = sqs::Options::new("orders");
    let handler = Measuring { metrics: options.metrics.clone() };
    // Two finite values whose sum is not; then one finite value beyond CloudWatch's range.
    for bodies in [&["1.5e308", "1.5e308"][..], &["1e200"][..]] {
        let mut batch = SqsEvent::default();
        batch.records = bodies
            .iter()
            .enumerate()
            .map(|(i, body)| {
                let mut m = SqsMessage::default();
                m.message_id = Some(format!("m-{i}"));
                m.body = Some(body.to_string());
                m
            })
            .collect();
        sqs::process(&handler, LambdaEvent::new(batch, Context::default()), &options).await;
    }
}

#[test]
fn every_value_on_the_line_is_one_cloudwatch_takes() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_prints_two_lines", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| l.contains("\"_aws\""))
        .filter_map(|l| l.find('{').map(|start| &l[start..]))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let limit = 2f64.powi(360);
    let mut bad = Vec::new();
    for line in &lines {
        assert!(line["Failed"].as_u64().unwrap() > 0, "the failures are on the line: {line}");
        for metric in line["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap() {
            let name = metric["Name"].as_str().unwrap();
            match line[name].as_f64() {
                Some(v) if v.abs() <= limit => {}
                _ => bad.push(format!("{name} = {}", line[name])),
            }
        }
    }
    assert!(bad.is_empty(), "values CloudWatch refuses, which invalidate the whole line (Failed included): {bad:?}");
}
