//! `Emf::line` is public (the receipts relay writes its alert lines with it) and, since it
//! dedupes names and keeps properties apart, is the line's last guard: whatever metrics a
//! caller hands it, the line it returns must be one CloudWatch reads. One value CloudWatch does
//! not take (`null` for NaN or infinity, a magnitude past 2^360), or a directive past EMF's 100
//! metrics, makes the whole line unreadable, as `Metrics::add_with_unit` documents.

use effectively_once_lambda::metrics::{Emf, Unit};
use serde_json::Value;

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
