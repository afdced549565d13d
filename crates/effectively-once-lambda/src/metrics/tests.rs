//! The metrics' unit tests: the invocation's line (counts, cold start, custom metrics) and the
//! environment's namespace, function and service, read from the text a line becomes.

use super::*;
use crate::{Handled, RecordError};
use serde_json::{json, Value};

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap()
}

#[test]
fn every_disposition_is_counted_and_printed_with_the_cold_start() {
    let mut c = Counts::default();
    for r in [
        Ok(Handled::Applied),
        Ok(Handled::Duplicate),
        Ok(Handled::Duplicate),
        Ok(Handled::Rejected),
        Ok(Handled::Skipped),
        Err(RecordError::in_progress_elsewhere("x")),
        Err(RecordError::permanent("bad")),
        Err(RecordError::retryable("later")),
    ] {
        c.add(&r);
    }
    let metrics = Metrics::new(Emf::named("payments"));
    let line = parse(&metrics.invocation_line(&c, true, "req-1", 1));
    let expected = [
        ("ColdStart", 1),
        ("Applied", 1),
        ("Duplicate", 2),
        ("Rejected", 1),
        ("Skipped", 1),
        ("InProgressElsewhere", 1),
        ("Failed", 2),
        ("PermanentFailures", 1),
    ];
    for (name, value) in expected {
        assert_eq!(line[name], value, "{name}");
    }
    let directive = &line["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], NAMESPACE);
    assert_eq!(directive["Dimensions"], json!([["Function"]]));
    let names: Vec<&str> =
        directive["Metrics"].as_array().unwrap().iter().map(|m| m["Name"].as_str().unwrap()).collect();
    assert_eq!(names, DRIVER_METRICS);
    assert_eq!(
        (&line["Function"], &line["service"], &line["request_id"]),
        (&json!("payments"), &json!("payments"), &json!("req-1"))
    );
    assert_eq!(parse(&metrics.invocation_line(&Counts::default(), false, "req-2", 2))["ColdStart"], 0);
}

#[test]
fn the_environment_names_the_namespace_the_function_and_the_service() {
    let env = |name: &str| {
        Some(
            match name {
                NAMESPACE_VAR => "Shop",
                FUNCTION_NAME_VAR => "shop-prod-payments",
                SERVICE_VAR => "payments",
                FUNCTION_VERSION_VAR => "7",
                _ => return None,
            }
            .to_owned(),
        )
    };
    let emf = Emf::from_env_with("payments-consumer", env);
    assert_eq!(
        (emf.namespace(), emf.function(), emf.service(), emf.version()),
        ("Shop", "shop-prod-payments", "payments", Some("7"))
    );
    let line = parse(&emf.line(5, [("EmailBlocked", 1.0, Unit::Count)]));
    assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Shop");
    assert_eq!(line["Function"], "shop-prod-payments");
    assert_eq!(line["function_version"], "7");
    assert_eq!(line["EmailBlocked"], 1);
    // Empty values are unset.
    let emf = Emf::from_env_with("relay", |_| Some(" ".into()));
    assert_eq!((emf.namespace(), emf.function(), emf.service(), emf.version()), (NAMESPACE, "relay", "relay", None));
}

#[test]
fn a_line_names_each_metric_once_and_never_a_property() {
    let emf = Emf::named("orders");
    let text = emf.line(9, [("Sent", 1.0, Unit::Count), ("service", 5.0, Unit::Count), ("Sent", 2.0, Unit::Count)]);
    assert_eq!(text.matches("\"Sent\"").count(), 2, "one definition and one value: {text}");
    let line = parse(&text);
    assert_eq!((&line["Sent"], &line["service"]), (&json!(1), &json!("orders")));
    let names: Vec<&str> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Sent"]);
    assert_eq!(line["_aws"]["Timestamp"], 9);
    assert_eq!(parse(&emf.line(1, [("Ratio", 0.25, Unit::Percent)]))["Ratio"], 0.25);
}

#[test]
fn custom_metrics_are_summed_and_emptied_each_invocation_and_reserved_names_dropped() {
    let metrics = Metrics::new(Emf::named("orders"));
    let handle = metrics.clone();
    handle.add("OrdersPlaced", 1);
    handle.add("OrdersPlaced", 2);
    handle.add_with_unit("Latency", 1.5, Unit::Milliseconds);
    handle.add("Applied", 100);
    handle.add("request_id", 1);
    handle.add("", 1);
    handle.add("Nan", f64::NAN);
    let line = parse(&metrics.invocation_line(&Counts::default(), false, "r", 1));
    assert_eq!(line["OrdersPlaced"], 3);
    assert_eq!(line["Latency"], 1.5);
    assert_eq!(line["Applied"], 0, "a custom metric cannot overwrite the driver's");
    assert_eq!(line["request_id"], "r");
    let units: Vec<_> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .skip(DRIVER_METRICS.len())
        .cloned()
        .collect();
    assert_eq!(
        units,
        [json!({"Name": "Latency", "Unit": "Milliseconds"}), json!({"Name": "OrdersPlaced", "Unit": "Count"})]
    );
    let next = parse(&metrics.invocation_line(&Counts::default(), false, "r", 2));
    assert!(next.get("OrdersPlaced").is_none(), "emptied by the flush");
    for i in 0..200 {
        metrics.add(&format!("M{i}"), 1);
    }
    let full = parse(&metrics.invocation_line(&Counts::default(), false, "r", 3));
    assert_eq!(full["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap().len(), MAX_METRICS);
}
