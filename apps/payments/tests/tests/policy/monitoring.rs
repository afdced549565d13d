//! What an operator sees: the EMF alarms on the deployed function names, an alarm for every
//! condition an operator must act on, the receipts' configuration set and its reputation alarms,
//! the API's alarms, and the dashboards showing the records, the backlogs and every alarm.

use receipts_relay::Alert;
use serde_json::{json, Value};

use crate::cfn::{function_name, sub_string};
use crate::iam::{allows, statements, Request};
use crate::{list, record_functions, template, FUNCTIONS, KAFKA_FUNCTION, RELAY, SWEEPER_FUNCTION, TABLES};

/// The alarms of the template: their `Properties`.
pub(crate) fn alarms(t: &Value) -> Vec<&Value> {
    let resources = t["Resources"].as_object().expect("template has resources");
    resources.values().filter(|r| r["Type"] == "AWS::CloudWatch::Alarm").map(|r| &r["Properties"]).collect()
}

/// The metrics an alarm reads, each as `{"Namespace", "MetricName", "Dimensions"}`: its own, or
/// those of its metric math (`Metrics[].MetricStat.Metric`).
pub(crate) fn alarm_metrics(alarm: &Value) -> Vec<Value> {
    if alarm.get("MetricName").is_some() {
        return vec![json!({
            "Namespace": alarm["Namespace"], "MetricName": alarm["MetricName"], "Dimensions": alarm["Dimensions"]
        })];
    }
    list(&alarm["Metrics"]).iter().map(|m| m["MetricStat"]["Metric"].clone()).filter(|m| !m.is_null()).collect()
}

/// The alarm that reads `metric` in `namespace` with exactly these dimensions.
pub(crate) fn alarm_on<'a>(t: &'a Value, namespace: &Value, metric: &str, dimensions: Value) -> Option<&'a Value> {
    alarms(t).into_iter().find(|a| {
        alarm_metrics(a)
            .iter()
            .any(|m| &m["Namespace"] == namespace && m["MetricName"] == metric && m["Dimensions"] == dimensions)
    })
}

/// The EMF metrics' namespace: the parameter, passed to each function that emits EMF.
pub(crate) fn metrics_namespace() -> Value {
    json!({"Ref": "MetricsNamespace"})
}

pub(crate) fn alarm_actions() -> Value {
    json!({"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]})
}

/// The EMF metrics are in the namespace the stack passes to the functions and carry the deployed
/// function name (`AWS_LAMBDA_FUNCTION_NAME`), so two stacks in one account do not share a
/// metric: every alarm on them reads that namespace and that name, never a constant.
#[test]
fn the_emf_alarms_read_the_namespace_parameter_and_the_deployed_function_names() {
    let t = template();
    let parameter = &t["Parameters"]["MetricsNamespace"];
    assert_eq!(
        parameter["Default"],
        effectively_once_lambda::metrics::NAMESPACE,
        "the template's default namespace is the code's"
    );
    for function in record_functions().map(|(f, ..)| f).chain([SWEEPER_FUNCTION]) {
        let env = &t["Resources"][function]["Properties"]["Environment"]["Variables"];
        assert_eq!(env["POWERTOOLS_METRICS_NAMESPACE"], metrics_namespace(), "{function}'s namespace");
    }
    let names: Vec<Value> =
        record_functions().map(|(f, ..)| f).chain([SWEEPER_FUNCTION]).map(|f| function_name(&t, f)).collect();
    let mut emf = 0;
    for alarm in alarms(&t) {
        for metric in alarm_metrics(alarm) {
            if metric["Namespace"].as_str().is_some_and(|ns| ns.starts_with("AWS/")) {
                continue;
            }
            emf += 1;
            assert_eq!(metric["Namespace"], metrics_namespace(), "{}: a constant namespace", metric["MetricName"]);
            let dimensions = list(&metric["Dimensions"]);
            assert_eq!(dimensions.len(), 1, "{}: the Function dimension only", metric["MetricName"]);
            assert_eq!(dimensions[0]["Name"], "Function");
            assert!(
                names.contains(&dimensions[0]["Value"]),
                "{}: Function = {}, not a deployed function name",
                metric["MetricName"],
                dimensions[0]["Value"]
            );
        }
    }
    // Failed for the three functions, the relay's two alerts and its PermanentFailures.
    assert!(emf >= 6, "only {emf} alarms on EMF metrics");
}

/// What an on-call engineer is paged for: a stuck queue, a held stream or topic, a failing or
/// throttled function, records failing, a throttled table, a payment in the DLQ, a receipt or a
/// Kafka batch given up on, SES refusing to send, a receipt in doubt.
#[test]
fn every_condition_an_operator_must_see_has_an_alarm() {
    let t = template();
    let aws = |namespace: &str| json!(namespace);
    let dimension = |name: &str, value: Value| json!([{"Name": name, "Value": value}]);
    let queue = |logical: &str| dimension("QueueName", json!({"Fn::GetAtt": [logical, "QueueName"]}));
    let mut required: Vec<(Value, &str, Value)> = vec![
        (aws("AWS/SQS"), "ApproximateAgeOfOldestMessage", queue("PaymentsQueue")),
        (aws("AWS/SQS"), "ApproximateNumberOfMessagesVisible", queue("PaymentsDeadLetterQueue")),
        (aws("AWS/SQS"), "ApproximateNumberOfMessagesVisible", queue("ReceiptsFailureQueue")),
        (aws("AWS/Lambda"), "IteratorAge", dimension("FunctionName", json!({"Ref": "ReceiptsRelayFunction"}))),
        (aws("AWS/SQS"), "ApproximateNumberOfMessagesVisible", queue("KafkaFailureQueue")),
        (aws("AWS/Lambda"), "OffsetLag", dimension("FunctionName", json!({"Ref": "KafkaConsumerFunction"}))),
    ];
    for (function, _, _, _) in record_functions() {
        for metric in ["Errors", "Throttles"] {
            required.push((aws("AWS/Lambda"), metric, dimension("FunctionName", json!({"Ref": function}))));
        }
        required.push((metrics_namespace(), "Failed", dimension("Function", function_name(&t, function))));
    }
    let relay = dimension("Function", function_name(&t, "ReceiptsRelayFunction"));
    for alert in [Alert::EmailBlocked, Alert::EmailAmbiguous, Alert::ReceiptRefused, Alert::ReceiptRateLimited] {
        required.push((metrics_namespace(), alert.metric(), relay.clone()));
    }
    required.push((metrics_namespace(), "PermanentFailures", relay.clone()));
    for table in TABLES {
        for metric in ["ReadThrottleEvents", "WriteThrottleEvents"] {
            required.push((aws("AWS/DynamoDB"), metric, dimension("TableName", json!({"Ref": table}))));
        }
    }
    for (namespace, metric, dimensions) in &required {
        let alarm = alarm_on(&t, namespace, metric, dimensions.clone())
            .unwrap_or_else(|| panic!("no alarm on {namespace} {metric} {dimensions}"));
        assert_eq!(alarm["AlarmActions"], alarm_actions(), "{metric}: actions only when AlarmTopicArn is set");
        assert_eq!(alarm["ComparisonOperator"], "GreaterThanThreshold", "{metric}");
        // No data is no event: an idle stack is not in alarm.
        assert_eq!(alarm["TreatMissingData"], "notBreaching", "{metric}");
        assert!(alarm["AlarmDescription"].as_str().is_some_and(|d| d.len() > 40), "{metric}: say what it means");
    }
    // Every alarm notifies the same way, the new ones as the old.
    for alarm in alarms(&t) {
        assert_eq!(alarm["AlarmActions"], alarm_actions(), "{}", alarm["AlarmDescription"]);
    }
    // A payment that keeps failing goes to the DLQ after maxReceiveCount receives, one visibility
    // timeout apart: the age alarm waits longer than that, or one bad message pages twice.
    let age = alarm_on(&t, &aws("AWS/SQS"), "ApproximateAgeOfOldestMessage", queue("PaymentsQueue")).unwrap();
    let receives = t["Resources"]["PaymentsQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"].as_u64().unwrap();
    let visibility = t["Parameters"]["QueueVisibilityTimeoutSeconds"]["Default"].as_u64().unwrap();
    assert!(age["Threshold"].as_u64().unwrap() > receives * visibility, "the age alarm fires on one poison message");
}

/// The relay sends under the stack's SES configuration set, whose reputation metrics (bounce and
/// complaint rates) page an operator before SES pauses the account; its grants for the receipt
/// rules are as narrow as the rules: the counters' prefix, and one attribute of the ledger.
#[test]
fn receipts_go_out_under_a_configuration_set_with_bounce_and_complaint_alarms() {
    let t = template();
    let set = &t["Resources"]["ReceiptsConfigurationSet"];
    assert_eq!(set["Type"], "AWS::SES::ConfigurationSet");
    assert_eq!(set["Properties"]["ReputationOptions"]["ReputationMetricsEnabled"], true, "no rates without it");
    let env = t["Resources"]["ReceiptsRelayFunction"]["Properties"]["Environment"]["Variables"].clone();
    assert_eq!(env["RECEIPT_CONFIGURATION_SET"], json!({"Ref": "ReceiptsConfigurationSet"}));
    // The names the template writes are the ones the relay reads.
    let sample = |name: &str| match name {
        "RECEIPT_CONFIGURATION_SET" => Some("stack-receipts".to_owned()),
        "RECEIPT_ALLOWED_RECIPIENTS" => Some("example.com".to_owned()),
        "RECEIPT_RATE_PER_ACCOUNT" => Some("10".to_owned()),
        "RECEIPT_RATE_WINDOW_SECONDS" => Some("3600".to_owned()),
        other => env.get(other).map(|_| "x".to_owned()),
    };
    let read = receipts_relay::Env::from_env_with(sample).unwrap();
    assert_eq!(read.configuration_set.as_deref(), Some("stack-receipts"));
    assert!(read.allowed.is_some_and(|list| list.allows("a@example.com")));
    assert_eq!(read.rate.map(|r| r.per_window), Some(10));
    assert_eq!(read.ledger_table.as_deref(), Some("x"), "profiles are read from the ledger the stack passes");
    for (parameter, variable) in [
        ("ReceiptAllowedRecipients", "RECEIPT_ALLOWED_RECIPIENTS"),
        ("ReceiptRatePerAccount", "RECEIPT_RATE_PER_ACCOUNT"),
        ("ReceiptRateWindowSeconds", "RECEIPT_RATE_WINDOW_SECONDS"),
    ] {
        assert_eq!(env[variable], json!({"Ref": parameter}));
    }
    // Off by default: the payment contract's "exactly one receipt per event with an address".
    assert_eq!(t["Parameters"]["ReceiptAllowedRecipients"]["Default"], "");
    assert_eq!(t["Parameters"]["ReceiptRatePerAccount"]["Default"], 0);

    let dimension = json!([{"Name": "ses:configuration-set", "Value": {"Ref": "ReceiptsConfigurationSet"}}]);
    for (metric, threshold) in [("Reputation.BounceRate", 0.05), ("Reputation.ComplaintRate", 0.001)] {
        let alarm = alarm_on(&t, &json!("AWS/SES"), metric, dimension.clone())
            .unwrap_or_else(|| panic!("no alarm on {metric} of the receipts' configuration set"));
        assert_eq!(alarm["Threshold"], json!(threshold), "{metric}");
        assert_eq!(alarm["ComparisonOperator"], "GreaterThanThreshold");
        assert_eq!(alarm["AlarmActions"], alarm_actions(), "{metric}");
    }

    // SES authorises a send under a configuration set on the set too: granted on this one only.
    let send = statements(&t, RELAY).into_iter().find(|s| s["Sid"] == "SendFromReceiptIdentity").unwrap();
    let resources = list(&send["Resource"]);
    assert_eq!(resources.len(), 2, "{resources:?}");
    assert!(resources
        .iter()
        .any(|r| r["Fn::Sub"].as_str().is_some_and(|a| a.ends_with("configuration-set/${ReceiptsConfigurationSet}"))));

    let now_ms = 1_795_000_000_000;
    let (counter, _) =
        payments::RateLimit::from_env_values(Some("5"), None).unwrap().unwrap().counter("acct_42", now_ms);
    assert!(allows(&t, RELAY, Request { action: "dynamodb:UpdateItem", table: "IdempotencyTable", key: &counter }));
    for action in ["dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &counter };
        assert!(!allows(&t, RELAY, request), "the relay needs only UpdateItem on its counters, not {action}");
    }
    let profile = Request { action: "dynamodb:GetItem", table: "LedgerTable", key: "account#acct_42" };
    assert!(allows(&t, RELAY, profile), "the relay reads the account's profile");
    let read = statements(&t, RELAY).into_iter().find(|s| s["Sid"] == "AccountProfileReceiptAddress").unwrap();
    assert_eq!(
        read["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"],
        json!(["pk", "sk", "receipt_email"]),
        "of the ledger, the relay reads the receipt address alone (no balance, no entry); DynamoDB's \
         fine-grained access control needs the key attributes listed beside it"
    );
    assert_eq!(read["Condition"]["StringEqualsIfExists"]["dynamodb:Select"], "SPECIFIC_ATTRIBUTES");
}

/// The API's alarms, as the other functions': failed and throttled invocations, and its URL's
/// 5xx answers (a 503 is an answer, not a failed invocation, so Errors alone would miss a
/// failing table or queue).
#[test]
fn the_api_has_the_alarms_of_a_function() {
    let t = template();
    let function = json!([{"Name": "FunctionName", "Value": {"Ref": "PaymentsApiFunction"}}]);
    for metric in ["Errors", "Throttles", "Url5xxCount"] {
        let alarm = alarm_on(&t, &json!("AWS/Lambda"), metric, function.clone())
            .unwrap_or_else(|| panic!("no alarm on the API's {metric}"));
        assert_eq!(alarm["AlarmActions"], alarm_actions(), "{metric}");
        assert_eq!((&alarm["ComparisonOperator"], &alarm["Threshold"]), (&json!("GreaterThanThreshold"), &json!(0)));
        assert_eq!(alarm["TreatMissingData"], "notBreaching", "{metric}");
        assert!(alarm["AlarmDescription"].as_str().is_some_and(|d| d.len() > 40), "{metric}: say what it means");
    }
}

/// The dashboards: the stack's, and the Kafka consumer's under its condition (a dashboard
/// cannot name a resource that may not exist).
const DASHBOARDS: [&str; 2] = ["OperationsDashboard", "KafkaDashboard"];

/// A dashboard's body: a JSON string under `Fn::Sub`, so `${...}` stand for parameters,
/// resources (`${Queue.QueueName}`, `${Alarm.Arn}`) and pseudo parameters.
fn dashboard(t: &Value, id: &str) -> (Value, String) {
    let resources = t["Resources"].as_object().unwrap();
    let mut boards: Vec<&str> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Dashboard")
        .map(|(id, _)| id.as_str())
        .collect();
    boards.sort_unstable();
    let mut expected = DASHBOARDS;
    expected.sort_unstable();
    assert_eq!(boards, expected, "the dashboards");
    let body = t["Resources"][id]["Properties"]["DashboardBody"]["Fn::Sub"].as_str();
    let body = body.expect("the body is a Fn::Sub string");
    (serde_json::from_str(body).expect("the dashboard body is JSON"), body.to_owned())
}

/// A dashboard's metrics, each as namespace, name and dimensions.
fn widget_metrics(body: &Value) -> Vec<WidgetMetric> {
    let widgets = list(&body["widgets"]);
    widgets.iter().flat_map(|w| list(&w["properties"]["metrics"])).map(|m| widget_metric(&m)).collect()
}

/// Asserts the metrics show `name` in `namespace` with the one dimension `dimension`.
fn shows(metrics: &[WidgetMetric], namespace: &str, name: &str, dimension: (&str, &str)) {
    let wanted = vec![(dimension.0.to_owned(), dimension.1.to_owned())];
    assert!(
        metrics.iter().any(|(ns, n, d)| ns == namespace && n == name && *d == wanted),
        "no dashboard widget shows {namespace} {name} {dimension:?}"
    );
}

/// A dashboard metric: namespace, name, `(dimension, value)` pairs.
type WidgetMetric = (String, String, Vec<(String, String)>);

/// A widget metric `[namespace, name, dimension, value, ..., {options}]`.
fn widget_metric(m: &Value) -> WidgetMetric {
    let parts: Vec<String> = list(m).iter().filter_map(|p| p.as_str().map(str::to_owned)).collect();
    let dimensions = parts[2..].chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
    (parts[0].clone(), parts[1].clone(), dimensions)
}

/// The picture an on-call engineer opens first: per function what its records came to, how far
/// behind the queue, the stream and the topic are, what waits in the DLQ and the failure queues,
/// and the state of every alarm: on the stack's dashboard, or the Kafka consumer's on its own,
/// which exists when the consumer does.
#[test]
fn the_dashboard_shows_the_records_the_backlogs_and_every_alarm() {
    let t = template();
    let (body, _) = dashboard(&t, "OperationsDashboard");
    let (kafka_body, _) = dashboard(&t, "KafkaDashboard");
    let (metrics, kafka_metrics) = (widget_metrics(&body), widget_metrics(&kafka_body));
    // The same string as the function's name, so the widget reads what the function emits.
    let name = |function: &str| sub_string(&t["Resources"][function]["Properties"]["FunctionName"]).to_owned();
    for (function, _, _, _) in FUNCTIONS {
        for metric in ["Applied", "Duplicate", "Rejected", "Failed"] {
            shows(&metrics, "${MetricsNamespace}", metric, ("Function", &name(function)));
        }
    }
    shows(&metrics, "AWS/SQS", "ApproximateAgeOfOldestMessage", ("QueueName", "${PaymentsQueue.QueueName}"));
    shows(&metrics, "AWS/Lambda", "IteratorAge", ("FunctionName", &name("ReceiptsRelayFunction")));
    for queue in ["PaymentsDeadLetterQueue", "ReceiptsFailureQueue"] {
        let queue = format!("${{{queue}.QueueName}}");
        shows(&metrics, "AWS/SQS", "ApproximateNumberOfMessagesVisible", ("QueueName", &queue));
    }
    let kafka = name(KAFKA_FUNCTION.0);
    for metric in ["Applied", "Duplicate", "Rejected", "Failed"] {
        shows(&kafka_metrics, "${MetricsNamespace}", metric, ("Function", &kafka));
    }
    shows(&kafka_metrics, "AWS/Lambda", "OffsetLag", ("FunctionName", &kafka));
    let failures = ("QueueName", "${KafkaFailureQueue.QueueName}");
    shows(&kafka_metrics, "AWS/SQS", "ApproximateNumberOfMessagesVisible", failures);

    // Every alarm's state, on the dashboard that exists when the alarm does.
    let resources = t["Resources"].as_object().unwrap();
    for board in DASHBOARDS {
        let (body, text) = dashboard(&t, board);
        let condition = &resources[board]["Condition"];
        let widgets = list(&body["widgets"]);
        let shown: Vec<Value> =
            widgets.iter().filter(|w| w["type"] == "alarm").flat_map(|w| list(&w["properties"]["alarms"])).collect();
        let alarms = resources.iter().filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm");
        for (id, _) in alarms.filter(|(_, r)| r["Condition"] == *condition) {
            assert!(shown.contains(&json!(format!("${{{id}.Arn}}"))), "{board} does not show {id}");
        }
        // Every `${...}` names something the stack has whenever the dashboard exists: a
        // parameter, a pseudo parameter, or a resource under no condition or the dashboard's.
        for reference in text.split("${").skip(1).map(|s| s.split('}').next().unwrap()) {
            let target = reference.split('.').next().unwrap();
            let resource = resources.get(target).filter(|r| r["Condition"].is_null() || r["Condition"] == *condition);
            assert!(
                target.starts_with("AWS::") || t["Parameters"].get(target).is_some() || resource.is_some(),
                "{board} refers to {reference}, which the stack may not have"
            );
        }
    }
}
