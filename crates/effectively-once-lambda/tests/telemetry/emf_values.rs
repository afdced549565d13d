//! Every value on an EMF line is one CloudWatch takes (0, or magnitudes 2^-360 to 2^360): one it
//! does not (serde_json writes NaN, an infinity or an infinite sum as `null`), or a directive
//! past EMF's 100 metrics, makes the whole line unreadable, as `Metrics::add_with_unit`
//! documents.
//!
//! A handler's own metric never makes the invocation's line invalid: a value or a sum outside
//! that range is dropped alone, so the driver's counts on the line (`Failed`, ...), which the
//! alarms read, are kept. Run in a child process, as `emitted_lines.rs` does: the EMF line is
//! printed on stdout. And `Emf::line` is public (the receipts relay writes its alert lines with
//! it) and, since it dedupes names and keeps properties apart, is the line's last guard: whatever
//! metrics a caller hands it, the line it returns is one CloudWatch reads.

use std::process::Command;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use effectively_once_lambda::metrics::{Emf, Metrics, Unit};
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
        .args([
            "--exact",
            crate::common::test_path(module_path!(), "child_prints_two_lines").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
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

/// The names of the metrics a line's directive defines.
fn definitions(line: &Value) -> Vec<String> {
    line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn emf_line_writes_only_values_cloudwatch_takes_and_at_most_100_metrics() {
    let emf = Emf::named("relay");
    let limit = 2f64.powi(360);

    // Non-finite and out-of-range values next to a good one.
    let text = emf.line(
        1,
        [
            ("Good", 1.0, Unit::Count),
            ("NotANumber", f64::NAN, Unit::Count),
            ("Infinite", f64::INFINITY, Unit::Count),
            ("Huge", 1e200, Unit::Count),
        ],
    );
    let line: Value = serde_json::from_str(&text).unwrap();
    let bad: Vec<String> = definitions(&line)
        .into_iter()
        .filter(|name| !matches!(line[name.as_str()].as_f64(), Some(v) if v == 0.0 || (v.abs() <= limit && v.abs() >= limit.recip())))
        .map(|name| format!("{name} = {}", line[name.as_str()]))
        .collect();
    assert!(bad.is_empty(), "values CloudWatch cannot read on the line: {bad:?}\n{text}");

    // More metrics than one EMF directive takes.
    let names: Vec<String> = (0..150).map(|i| format!("M{i}")).collect();
    let text = emf.line(2, names.iter().map(|n| (n.as_str(), 1.0, Unit::Count)));
    let line: Value = serde_json::from_str(&text).unwrap();
    assert!(definitions(&line).len() <= 100, "{} metrics in one directive", definitions(&line).len());
}
