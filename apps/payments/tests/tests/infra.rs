//! What the deployment template's policies mean, checked against the keys the code writes.
//! cfn-lint proves the template is well formed; it cannot tell that the relay's role may delete a
//! recorded payment rejection, or that a FIFO payments queue got a standard dead-letter queue.
//! This reads `apps/payments/template.json` with a small evaluator of the IAM forms the template uses.

use base64::Engine;
use payments::{ledger, outbox};
use receipts_relay::Alert;
use serde_json::{json, Value};

const TEMPLATE: &str = include_str!("../../template.json");

fn template() -> Value {
    serde_json::from_str(TEMPLATE).expect("apps/payments/template.json is JSON")
}

/// A string or an array of strings as a list.
fn list(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items.clone(),
        Value::Null => Vec::new(),
        other => vec![other.clone()],
    }
}

/// IAM's `StringLike`: `*` any run, `?` one character.
fn like(pattern: &str, value: &str) -> bool {
    let (p, v): (Vec<char>, Vec<char>) = (pattern.chars().collect(), value.chars().collect());
    let (mut pi, mut vi, mut star, mut mark) = (0, 0, None, 0);
    while vi < v.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == v[vi]) {
            pi += 1;
            vi += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = vi;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            vi = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// One item request: `action` on the item whose partition key is `key` in table `table`
/// (a logical id).
#[derive(Debug, Clone, Copy)]
struct Request<'a> {
    action: &'a str,
    table: &'a str,
    key: &'a str,
}

fn statements(t: &Value, role: &str) -> Vec<Value> {
    let policies = t["Resources"][role]["Properties"]["Policies"].as_array().expect("role has inline policies");
    policies.iter().flat_map(|p| list(&p["PolicyDocument"]["Statement"])).collect()
}

fn action_matches(statement: &Value, action: &str) -> bool {
    // Action names are case-insensitive in IAM.
    list(&statement["Action"]).iter().filter_map(Value::as_str).any(|a| like(&a.to_lowercase(), &action.to_lowercase()))
}

/// Whether a statement's resource may be `table`. An allow is read generously (anything that is
/// not plainly another resource counts), a deny strictly: the test must not lean on a deny it
/// cannot read.
fn resource_matches(statement: &Value, table: &str, generous: bool) -> bool {
    list(&statement["Resource"]).iter().any(|r| match r {
        Value::String(s) => s == "*" || generous,
        Value::Object(o) => match o.get("Fn::GetAtt") {
            Some(att) => att[0] == table && att[1] == "Arn",
            None => generous,
        },
        _ => generous,
    })
}

/// Whether a statement's conditions hold for the request. Conditions on `dynamodb:LeadingKeys`
/// are evaluated; any other condition is taken as holding, so a grant hidden behind one counts.
fn conditions_hold(statement: &Value, request: Request<'_>) -> bool {
    let Some(conditions) = statement["Condition"].as_object() else { return true };
    conditions.iter().all(|(operator, keys)| {
        let Some(values) = keys.get("dynamodb:LeadingKeys") else { return true };
        let patterns: Vec<String> = list(values).iter().filter_map(|v| v.as_str().map(str::to_owned)).collect();
        let base = operator.trim_start_matches("ForAllValues:").trim_start_matches("ForAnyValue:");
        match base {
            "StringLike" => patterns.iter().any(|p| like(p, request.key)),
            "StringEquals" => patterns.iter().any(|p| p == request.key),
            // Null "false": the key is present, which it is for every item action.
            "Null" => patterns == ["false"],
            "StringNotLike" => !patterns.iter().any(|p| like(p, request.key)),
            "StringNotEquals" => !patterns.iter().any(|p| p == request.key),
            other => panic!("the test cannot read condition {other} on dynamodb:LeadingKeys; extend it"),
        }
    })
}

/// Whether the role's inline policies allow the request: an allow matches and no deny does.
fn allows(t: &Value, role: &str, request: Request<'_>) -> bool {
    let statements = statements(t, role);
    let applies = |s: &Value, generous: bool| {
        action_matches(s, request.action) && resource_matches(s, request.table, generous) && conditions_hold(s, request)
    };
    let allowed = statements.iter().any(|s| s["Effect"] == "Allow" && applies(s, true));
    let denied = statements.iter().any(|s| s["Effect"] == "Deny" && applies(s, false));
    allowed && !denied
}

const CONSUMER: &str = "PaymentsConsumerRole";
const RELAY: &str = "ReceiptsRelayRole";
const SWEEPER: &str = "OutboxSweeperRole";
const KAFKA: &str = "KafkaConsumerRole";
const WRITES: [&str; 4] =
    ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"];

fn payment_record() -> String {
    format!("{}#pay_0001", ledger::PREFIX)
}

fn email_marker() -> String {
    payments::receipt_key("pay_0001").expect("a valid key").as_str().to_owned()
}

#[test]
fn the_relay_cannot_touch_payment_records_and_the_consumer_cannot_touch_email_markers() {
    let t = template();
    let (payment, marker) = (payment_record(), email_marker());
    for action in WRITES {
        let (on_payment, on_marker) = (
            Request { action, table: "IdempotencyTable", key: &payment },
            Request { action, table: "IdempotencyTable", key: &marker },
        );
        assert!(
            !allows(&t, RELAY, on_payment),
            "the relay may {action} {payment}: it could erase a recorded rejection"
        );
        assert!(
            !allows(&t, CONSUMER, on_marker),
            "the consumer may {action} {marker}: it could overwrite an email marker"
        );
    }
    // Nor under any other prefix a function does not own: the grants are by prefix, not by
    // "anything but the other's".
    for role in [CONSUMER, RELAY] {
        let stranger = Request { action: "dynamodb:PutItem", table: "IdempotencyTable", key: "other#pay_0001" };
        assert!(!allows(&t, role, stranger), "{role} may write a key no function owns");
    }
}

#[test]
fn each_function_keeps_what_it_needs_on_its_own_keys() {
    let t = template();
    let (payment, marker, row) = (payment_record(), email_marker(), outbox::row_key("pay_0001"));
    // The consumer's transaction: the record, the entry, the balance, the outbox row; and a read
    // of its record when a cancellation carries no item.
    for action in ["dynamodb:PutItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &payment };
        assert!(allows(&t, CONSUMER, request), "the consumer needs {action} on {payment}");
    }
    assert!(allows(&t, CONSUMER, Request { action: "dynamodb:PutItem", table: "OutboxTable", key: &row }));
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem"] {
        let request = Request { action, table: "LedgerTable", key: "account#acct_42" };
        assert!(allows(&t, CONSUMER, request), "the consumer needs {action} on the ledger");
    }
    // The relay: claim, complete, release and read a marker; mark a row.
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &marker };
        assert!(allows(&t, RELAY, request), "the relay needs {action} on {marker}");
    }
    assert!(allows(&t, RELAY, Request { action: "dynamodb:UpdateItem", table: "OutboxTable", key: &row }));
    // And nothing more on the rows: the consumer never rewrites one, the relay never makes one.
    let consumer_update = Request { action: "dynamodb:UpdateItem", table: "OutboxTable", key: &row };
    assert!(!allows(&t, CONSUMER, consumer_update), "the consumer may rewrite a receipt row");
    for action in ["dynamodb:PutItem", "dynamodb:DeleteItem"] {
        assert!(
            !allows(&t, RELAY, Request { action, table: "OutboxTable", key: &row }),
            "the relay may {action} a row"
        );
    }
    for action in WRITES {
        let ledger_write = Request { action, table: "LedgerTable", key: "account#acct_42" };
        assert!(!allows(&t, RELAY, ledger_write), "the relay may {action} on the ledger");
    }
}

#[test]
fn the_evaluator_reads_the_old_table_wide_grant_as_a_grant() {
    // The policy before keys were scoped: the same evaluator must call it unsafe, or the tests
    // above prove nothing.
    let t = json!({"Resources": {"R": {"Properties": {"Policies": [{"PolicyDocument": {"Statement": [{
        "Effect": "Allow",
        "Action": ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem"],
        "Resource": {"Fn::GetAtt": ["IdempotencyTable", "Arn"]}
    }]}}]}}}});
    let payment = payment_record();
    assert!(allows(&t, "R", Request { action: "dynamodb:DeleteItem", table: "IdempotencyTable", key: &payment }));
    assert!(like("payments#*", "payments#pay_1") && !like("payments#*", "email#pay_1") && like("a?c*", "abcde"));
}

#[test]
fn every_queue_denies_requests_without_tls() {
    let t = template();
    let resources = t["Resources"].as_object().unwrap();
    let queues: Vec<&String> =
        resources.iter().filter(|(_, r)| r["Type"] == "AWS::SQS::Queue").map(|(id, _)| id).collect();
    assert_eq!(queues.len(), 6, "the payments queue, its DLQ, and the relay's and Kafka's failure and park queues");
    for queue in queues {
        let arn = json!({"Fn::GetAtt": [queue, "Arn"]});
        let denies_plain_http = resources.values().filter(|r| r["Type"] == "AWS::SQS::QueuePolicy").any(|p| {
            list(&p["Properties"]["Queues"]).contains(&json!({"Ref": queue}))
                && list(&p["Properties"]["PolicyDocument"]["Statement"]).iter().any(|s| {
                    s["Effect"] == "Deny"
                        && (s["Principal"] == "*" || s["Principal"] == json!({"AWS": "*"}))
                        && list(&s["Action"]).contains(&json!("sqs:*"))
                        && (list(&s["Resource"]).contains(&arn) || s["Resource"] == "*")
                        && matches!(&s["Condition"]["Bool"]["aws:SecureTransport"], v if *v == "false" || *v == false)
                })
        });
        assert!(denies_plain_http, "{queue} has no policy denying requests without TLS");
    }
}

#[test]
fn email_is_sent_only_from_the_receipt_sender() {
    let t = template();
    for role in [CONSUMER, RELAY, SWEEPER] {
        for s in statements(&t, role).iter().filter(|s| s["Effect"] == "Allow") {
            let ses = list(&s["Action"]).iter().filter_map(Value::as_str).any(|a| a.to_lowercase().starts_with("ses:"));
            if !ses {
                continue;
            }
            assert_ne!(role, CONSUMER, "the payments consumer sends no email");
            assert_eq!(
                s["Condition"]["StringEquals"]["ses:FromAddress"],
                json!({"Ref": "ReceiptFrom"}),
                "{role}'s SES grant {} is not conditioned on the sender",
                s["Sid"]
            );
        }
    }
    // Each sends from the parameter its grant is conditioned on: the relay and the sweeper their
    // receipts.
    let env = |function: &str| t["Resources"][function]["Properties"]["Environment"]["Variables"].clone();
    assert_eq!(env("ReceiptsRelayFunction")["RECEIPT_FROM"], json!({"Ref": "ReceiptFrom"}));
    assert_eq!(env("OutboxSweeperFunction")["RECEIPT_FROM"], json!({"Ref": "ReceiptFrom"}));
}

/// The Kafka consumer posts payments as the SQS consumer does, so it holds the same keys: a
/// payment's record `payments#` (the ledger's prefix: an event id takes effect once whichever
/// way it came), put in the posting transaction and read back when a cancellation carries none;
/// the ledger's entry and balance; the receipt row `receipt#`, inserted only. Nothing else in
/// any table: not an email marker, an order's keys, the API's records.
#[test]
fn the_kafka_consumer_is_scoped_to_the_payment_and_receipt_keys() {
    let t = template();
    let (payment, row) = (payment_record(), outbox::row_key("pay_0001"));
    for action in ["dynamodb:PutItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &payment };
        assert!(allows(&t, KAFKA, request), "the Kafka consumer needs {action} on {payment}");
    }
    for action in ["dynamodb:UpdateItem", "dynamodb:DeleteItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &payment };
        assert!(!allows(&t, KAFKA, request), "the Kafka consumer may {action} {payment}: it could erase a rejection");
    }
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem"] {
        let request = Request { action, table: "LedgerTable", key: "account#acct_42" };
        assert!(allows(&t, KAFKA, request), "the Kafka consumer needs {action} on the ledger");
    }
    assert!(allows(&t, KAFKA, Request { action: "dynamodb:PutItem", table: "OutboxTable", key: &row }));
    for action in ["dynamodb:UpdateItem", "dynamodb:DeleteItem"] {
        let request = Request { action, table: "OutboxTable", key: &row };
        assert!(!allows(&t, KAFKA, request), "the Kafka consumer may {action} a receipt row");
    }
    // Keys no payments function owns (an order's, as another application's would be).
    let strangers = [email_marker(), "order#ord_1".to_owned(), "order-email#ord_1".to_owned(), api_record()];
    let strangers = strangers.into_iter().chain(["other#pay_0001".to_owned()]).collect::<Vec<_>>();
    for key in strangers.iter().map(String::as_str).chain(["payments", "receipt#pay_0001"]) {
        for action in WRITES {
            let request = Request { action, table: "IdempotencyTable", key };
            assert!(!allows(&t, KAFKA, request), "the Kafka consumer may {action} {key}");
        }
    }
    // Its environment names the tables its role reaches, as the SQS consumer's does.
    let env = |function: &str| t["Resources"][function]["Properties"]["Environment"]["Variables"].clone();
    for variable in ["IDEMPOTENCY_TABLE", "LEDGER_TABLE", "OUTBOX_TABLE"] {
        assert_eq!(env("KafkaConsumerFunction")[variable], env("PaymentsConsumerFunction")[variable], "{variable}");
    }
}

/// `value` with `Fn::Sub` (its variables' `Fn::Select` of `Fn::Split` included), `Ref` and plain
/// strings resolved for a stack `stack` given `cluster` and `topic`.
fn resolve_arn(value: &Value, cluster: &str, topic: &str, stack: &str) -> String {
    let parameter = |name: &str| match name {
        "KafkaClusterArn" => cluster.to_owned(),
        "KafkaTopic" => topic.to_owned(),
        "AWS::StackName" => stack.to_owned(),
        other => panic!("cannot resolve {other}"),
    };
    match value {
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("Ref") => parameter(o["Ref"].as_str().unwrap()),
        Value::Object(o) if o.contains_key("Fn::Select") => {
            let (index, split) = (o["Fn::Select"][0].as_u64().unwrap() as usize, &o["Fn::Select"][1]["Fn::Split"]);
            let whole = resolve_arn(&split[1], cluster, topic, stack);
            whole.split(split[0].as_str().unwrap()).nth(index).expect("the index exists").to_owned()
        }
        Value::Object(o) if o.contains_key("Fn::Sub") => {
            let (text, variables) = match &o["Fn::Sub"] {
                Value::Array(parts) => (parts[0].as_str().unwrap().to_owned(), parts[1].clone()),
                other => (other.as_str().unwrap().to_owned(), json!({})),
            };
            let mut out = String::new();
            let mut rest = text.as_str();
            while let Some(start) = rest.find("${") {
                let end = start + rest[start..].find('}').unwrap();
                out.push_str(&rest[..start]);
                let name = &rest[start + 2..end];
                out.push_str(&match variables.get(name) {
                    Some(variable) => resolve_arn(variable, cluster, topic, stack),
                    None => parameter(name),
                });
                rest = &rest[end + 1..];
            }
            out + rest
        }
        other => panic!("cannot resolve {other}"),
    }
}

/// What the Kafka mapping needs of the cluster (IAM access control), and no more: the cluster's
/// metadata and a connection on the cluster, describe and read on its topic, describe and alter
/// (commit offsets) on its own consumer group, never a write to a topic; network interfaces in
/// the cluster's VPC (on `*`, as Lambda's AWSLambdaMSKExecutionRole grants them: creating one
/// names no resource of this stack); the send to its failure queue. Nothing else on `*` but
/// X-Ray.
#[test]
fn the_kafka_consumer_reads_its_topic_in_its_own_group_and_sends_to_its_failure_queue_only() {
    let t = template();
    let grants = statements(&t, KAFKA);
    let on = |action: &str| -> Vec<&Value> {
        grants.iter().filter(|s| s["Effect"] == "Allow" && action_matches(s, action)).collect()
    };
    let (cluster, topic, stack) = ("arn:aws:kafka:eu-west-1:123456789012:cluster/shop/8c1f-4d2e-1", "payments", "prod");
    let at = |action: &str| -> Vec<String> {
        let allowed = on(action);
        assert!(!allowed.is_empty(), "{KAFKA} cannot {action}");
        allowed.iter().flat_map(|s| list(&s["Resource"])).map(|r| resolve_arn(&r, cluster, topic, stack)).collect()
    };
    for action in ["kafka:DescribeCluster", "kafka:DescribeClusterV2", "kafka:GetBootstrapBrokers"] {
        assert_eq!(at(action), [cluster], "{action}");
    }
    for action in ["kafka-cluster:Connect", "kafka-cluster:DescribeClusterDynamicConfiguration"] {
        assert_eq!(at(action), [cluster], "{action}");
    }
    for action in ["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"] {
        assert_eq!(at(action), ["arn:aws:kafka:eu-west-1:123456789012:topic/shop/8c1f-4d2e-1/payments"], "{action}");
    }
    let group = t["Resources"]["KafkaEventSourceMapping"]["Properties"]["AmazonManagedKafkaEventSourceConfig"]
        ["ConsumerGroupId"]
        .clone();
    let group = resolve_arn(&group, cluster, topic, stack);
    assert_eq!(group, "prod-kafka-consumer", "the stack's own consumer group");
    for action in ["kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup"] {
        assert_eq!(at(action), [format!("arn:aws:kafka:eu-west-1:123456789012:group/shop/8c1f-4d2e-1/{group}")]);
    }
    for action in ["kafka-cluster:WriteData", "kafka-cluster:CreateTopic", "kafka-cluster:AlterCluster", "kafka:*"] {
        assert!(on(action).is_empty(), "{KAFKA} may {action}");
    }
    let send: Vec<&Value> = on("sqs:SendMessage").iter().map(|s| &s["Resource"]).collect();
    let failures = json!({"Fn::GetAtt": ["KafkaFailureQueue", "Arn"]});
    let park = json!({"Fn::GetAtt": ["KafkaParkQueue", "Arn"]});
    assert_eq!(send, [&failures, &park], "{KAFKA} sends to its failure and park queues only");
    let network = [
        "ec2:CreateNetworkInterface",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeVpcs",
        "ec2:DeleteNetworkInterface",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
    ];
    for action in network {
        assert!(!on(action).is_empty(), "{KAFKA} cannot {action}: the mapping cannot reach the cluster's VPC");
    }
    for s in grants.iter().filter(|s| s["Resource"] == "*") {
        let actions = list(&s["Action"]);
        let allowed =
            |a: &str| network.contains(&a) || ["xray:PutTraceSegments", "xray:PutTelemetryRecords"].contains(&a);
        assert!(actions.iter().all(|a| a.as_str().is_some_and(allowed)), "{KAFKA} grants {actions:?} on *");
    }
}

/// The Kafka mapping: partial batch responses on (each failing partition resumes at its first
/// record not durably done), a batch that keeps failing bisected, retried a few times and
/// discarded to its failure queue within the hour rather than holding its partition for the
/// topic's retention; from the start of the topic, in a consumer group of the stack's own. Kafka
/// event source mappings take these error handling controls in provisioned mode only.
#[test]
fn the_kafka_mapping_reports_batch_item_failures_and_discards_to_its_failure_queue() {
    let t = template();
    let mapping = &t["Resources"]["KafkaEventSourceMapping"]["Properties"];
    assert_eq!(mapping["EventSourceArn"], json!({"Ref": "KafkaClusterArn"}));
    assert_eq!(mapping["FunctionName"], json!({"Ref": "KafkaConsumerFunction.Alias"}));
    assert_eq!(mapping["Topics"], json!([{"Ref": "KafkaTopic"}]));
    assert_eq!(mapping["StartingPosition"], "TRIM_HORIZON");
    assert_eq!(mapping["FunctionResponseTypes"], json!(["ReportBatchItemFailures"]));
    assert_eq!(mapping["BisectBatchOnFunctionError"], true);
    let failures = json!({"Fn::GetAtt": ["KafkaFailureQueue", "Arn"]});
    assert_eq!(mapping["DestinationConfig"]["OnFailure"]["Destination"], failures);
    let retries = mapping["MaximumRetryAttempts"].as_i64().unwrap();
    assert!((0..=10).contains(&retries), "a finite retry count, not {retries}");
    let age = mapping["MaximumRecordAgeInSeconds"].as_i64().unwrap();
    assert!((60..=3600).contains(&age), "records are discarded within the hour, not after {age} s");
    let pollers = &mapping["ProvisionedPollerConfig"];
    assert!(pollers["MinimumPollers"].as_i64().is_some_and(|n| n >= 1), "provisioned mode: {pollers}");
    assert!(pollers["MaximumPollers"].as_i64() >= pollers["MinimumPollers"].as_i64());
    let group = &mapping["AmazonManagedKafkaEventSourceConfig"]["ConsumerGroupId"];
    assert_eq!(group, &t["Resources"]["KafkaConsumerFunction"]["Properties"]["FunctionName"], "named as the function");
    let queue = &t["Resources"]["KafkaFailureQueue"]["Properties"];
    assert_eq!(queue["MessageRetentionPeriod"], 14 * 86_400, "an operator has two weeks to replay");
    // The failure queue is watched: a discarded batch pages someone.
    let dimensions = json!([{"Name": "QueueName", "Value": {"Fn::GetAtt": ["KafkaFailureQueue", "QueueName"]}}]);
    let alarm = alarm_on(&t, &json!("AWS/SQS"), "ApproximateNumberOfMessagesVisible", dimensions)
        .expect("an alarm on the Kafka failure queue");
    assert_eq!((&alarm["Threshold"], &alarm["EvaluationPeriods"]), (&json!(0), &json!(1)), "the first message");
    assert_eq!(alarm["AlarmActions"], alarm_actions());
}

/// Every logical id a value refers to: `Ref` (an alias `X.Alias` is `X`'s), `Fn::GetAtt`, and
/// `${X}` or `${X.Attr}` in `Fn::Sub`.
fn references(value: &Value, out: &mut std::collections::BTreeSet<String>) {
    match value {
        Value::Object(o) => {
            for (key, inner) in o {
                match key.as_str() {
                    "Ref" => {
                        out.insert(inner.as_str().unwrap_or_default().split('.').next().unwrap().to_owned());
                    }
                    "Fn::GetAtt" => {
                        out.insert(inner[0].as_str().unwrap_or_default().to_owned());
                    }
                    "Fn::Sub" => {
                        let text = inner.as_str().or_else(|| inner[0].as_str()).unwrap_or_default();
                        for name in text.split("${").skip(1).filter_map(|s| s.split('}').next()) {
                            out.insert(name.split('.').next().unwrap().to_owned());
                        }
                        references(&inner[1], out);
                    }
                    _ => references(inner, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, out)),
        _ => {}
    }
}

/// The stack does not own the MSK cluster: with `KafkaClusterArn` empty (the default) nothing of
/// the Kafka consumer is created, and with it set all of it is: its function, role, log group,
/// mapping, failure queue, alarms and dashboard carry the condition, and nothing created without
/// it refers to any of them (CloudFormation refuses a reference to a resource it did not make).
#[test]
fn the_kafka_resources_exist_only_when_a_cluster_is_given() {
    let t = template();
    assert_eq!(t["Parameters"]["KafkaClusterArn"]["Default"], "");
    assert_eq!(
        t["Conditions"][KAFKA_CONDITION],
        json!({"Fn::Not": [{"Fn::Equals": [{"Ref": "KafkaClusterArn"}, ""]}]})
    );
    let resources = t["Resources"].as_object().unwrap();
    let conditional: Vec<&str> =
        resources.iter().filter(|(_, r)| r["Condition"] == KAFKA_CONDITION).map(|(id, _)| id.as_str()).collect();
    let kafka: Vec<&str> = resources.keys().map(String::as_str).filter(|id| id.starts_with("Kafka")).collect();
    assert_eq!(conditional, kafka, "the Kafka resources, and only they, are conditional");
    for id in [
        "KafkaConsumerFunction",
        "KafkaConsumerRole",
        "KafkaConsumerLogGroup",
        "KafkaEventSourceMapping",
        "KafkaFailureQueue",
        "KafkaFailureQueuePolicy",
        "KafkaFailureAlarm",
        "KafkaOffsetLagAlarm",
        "KafkaDashboard",
    ] {
        assert!(conditional.contains(&id), "{id} is not created under {KAFKA_CONDITION}");
    }
    // Whatever refers to a Kafka resource or parameter exists only with it, outputs included.
    let outputs = t["Outputs"].as_object().unwrap();
    for (id, item) in resources.iter().chain(outputs) {
        let mut named = std::collections::BTreeSet::new();
        references(item, &mut named);
        let needs_kafka = named.iter().any(|n| n.starts_with("Kafka"));
        if needs_kafka {
            assert_eq!(item["Condition"], KAFKA_CONDITION, "{id} refers to {named:?} without the condition");
        }
    }
    let kafka_outputs = outputs.iter().filter(|(_, o)| o["Condition"] == KAFKA_CONDITION).count();
    assert!(kafka_outputs >= 2, "the function and the failure queue are named in the outputs");
}

/// The template with `Fn::If` on `IsFifo` resolved.
fn resolve(v: &Value, fifo: bool) -> Option<Value> {
    resolve_condition(v, "IsFifo", fifo)
}

/// `v` with each `Fn::If` on `condition` resolved as `holds` says, `AWS::NoValue` left out.
fn resolve_condition(v: &Value, condition: &str, holds: bool) -> Option<Value> {
    let resolve = |v: &Value| resolve_condition(v, condition, holds);
    match v {
        Value::Object(o) => {
            if let Some(args) = o.get("Fn::If").and_then(Value::as_array).filter(|a| a[0] == condition) {
                return resolve(&args[if holds { 1 } else { 2 }]);
            }
            if o.get("Ref") == Some(&json!("AWS::NoValue")) {
                return None;
            }
            Some(Value::Object(o.iter().filter_map(|(k, v)| Some((k.clone(), resolve(v)?))).collect()))
        }
        Value::Array(items) => Some(Value::Array(items.iter().filter_map(resolve).collect())),
        other => Some(other.clone()),
    }
}

#[test]
fn the_queue_type_switches_the_payments_queue_its_dlq_and_the_mapping_together() {
    let t = template();
    assert_eq!(t["Parameters"]["QueueType"]["Default"], "Standard");
    assert_eq!(t["Conditions"]["IsFifo"], json!({"Fn::Equals": [{"Ref": "QueueType"}, "Fifo"]}));
    for fifo in [false, true] {
        let r = resolve(&t["Resources"], fifo).unwrap();
        let queue = &r["PaymentsQueue"]["Properties"];
        let dlq = &r["PaymentsDeadLetterQueue"]["Properties"];
        let mapping = &r["PaymentsEventSourceMapping"]["Properties"];
        let name = queue["QueueName"]["Fn::Sub"].as_str().unwrap();
        let source = dlq["RedriveAllowPolicy"]["sourceQueueArns"][0]["Fn::Sub"].as_str().unwrap();
        // The DLQ names the source queue by ARN: it must be the queue's own name.
        assert!(source.ends_with(&format!(":{name}")), "{source} does not name {name}");
        if fifo {
            assert!(name.ends_with(".fifo"), "a FIFO queue's name ends in .fifo");
            assert_eq!(queue["FifoQueue"], true);
            assert_eq!(queue["DeduplicationScope"], "messageGroup");
            // A FIFO queue's dead-letter queue must be FIFO too.
            assert_eq!(dlq["FifoQueue"], true);
            assert!(dlq["QueueName"]["Fn::Sub"].as_str().unwrap().ends_with(".fifo"));
            // Lambda: "Batching window is not supported for FIFO queues".
            assert!(mapping.get("MaximumBatchingWindowInSeconds").is_none());
        } else {
            assert!(!name.ends_with(".fifo"));
            assert!(
                queue.get("FifoQueue").is_none() && dlq.get("FifoQueue").is_none() && dlq.get("QueueName").is_none()
            );
            assert_eq!(mapping["MaximumBatchingWindowInSeconds"], 1);
        }
    }
}

/// The payments consumer and the receipts relay: logical id of the function, of its role, of its event source mapping, and
/// the binary (the `BuildProperties.Binary` SAM builds).
const FUNCTIONS: [(&str, &str, &str, &str); 2] = [
    ("PaymentsConsumerFunction", CONSUMER, "PaymentsEventSourceMapping", "payments-consumer"),
    ("ReceiptsRelayFunction", RELAY, "ReceiptsEventSourceMapping", "receipts-relay"),
];

/// The Kafka payments consumer, in the same form: it exists only when the stack is given an MSK
/// cluster ([`KAFKA_CONDITION`]), and its role also reaches the cluster and its VPC.
const KAFKA_FUNCTION: (&str, &str, &str, &str) =
    ("KafkaConsumerFunction", KAFKA, "KafkaEventSourceMapping", "kafka-consumer");

/// The outbox sweeper: a scheduled function (no event source mapping) of the relay's package.
const SWEEPER_FUNCTION: &str = "OutboxSweeperFunction";

/// The condition the Kafka consumer's resources are created under.
const KAFKA_CONDITION: &str = "HasKafkaCluster";

/// The functions that report each record's disposition in EMF metrics, and are alarmed and
/// configured alike: the two above and the Kafka consumer.
fn record_functions() -> impl Iterator<Item = (&'static str, &'static str, &'static str, &'static str)> {
    FUNCTIONS.into_iter().chain([KAFKA_FUNCTION])
}
const TABLES: [&str; 3] = ["IdempotencyTable", "LedgerTable", "OutboxTable"];

/// The alarms of the template: their `Properties`.
fn alarms(t: &Value) -> Vec<&Value> {
    let resources = t["Resources"].as_object().expect("template has resources");
    resources.values().filter(|r| r["Type"] == "AWS::CloudWatch::Alarm").map(|r| &r["Properties"]).collect()
}

/// The metrics an alarm reads, each as `{"Namespace", "MetricName", "Dimensions"}`: its own, or
/// those of its metric math (`Metrics[].MetricStat.Metric`).
fn alarm_metrics(alarm: &Value) -> Vec<Value> {
    if alarm.get("MetricName").is_some() {
        return vec![json!({
            "Namespace": alarm["Namespace"], "MetricName": alarm["MetricName"], "Dimensions": alarm["Dimensions"]
        })];
    }
    list(&alarm["Metrics"]).iter().map(|m| m["MetricStat"]["Metric"].clone()).filter(|m| !m.is_null()).collect()
}

/// The alarm that reads `metric` in `namespace` with exactly these dimensions.
fn alarm_on<'a>(t: &'a Value, namespace: &Value, metric: &str, dimensions: Value) -> Option<&'a Value> {
    alarms(t).into_iter().find(|a| {
        alarm_metrics(a)
            .iter()
            .any(|m| &m["Namespace"] == namespace && m["MetricName"] == metric && m["Dimensions"] == dimensions)
    })
}

/// The deployed name of a function: `AWS_LAMBDA_FUNCTION_NAME` at run time, the EMF `Function`
/// dimension.
fn function_name(t: &Value, function: &str) -> Value {
    let name = t["Resources"][function]["Properties"]["FunctionName"].clone();
    assert!(name.is_object(), "{function} has an explicit FunctionName");
    name
}

/// The EMF metrics' namespace: the parameter, passed to each function that emits EMF.
fn metrics_namespace() -> Value {
    json!({"Ref": "MetricsNamespace"})
}

fn alarm_actions() -> Value {
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

/// A blocked SES account is retryable (the marker is released), so the outbox stream holds the
/// batch until the condition clears: with 5 retries it was spent in seconds and the receipts went
/// to the failure queue with their rows PENDING. -1 retries until `MaximumRecordAgeInSeconds`
/// (Lambda: "When MaximumRetryAttempts is infinite, Lambda retries failed records until the record
/// expires in the event source", <https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html>).
/// A held shard is seen by an operator through the relay's alerts and the iterator age. The age
/// limit is 6 h, well inside the stream's 24 h retention: a batch discarded at 24 h named records
/// the stream was trimming, which no replay of the on-failure destination could read.
#[test]
fn the_receipts_stream_retries_until_the_record_age_limit_and_every_hold_is_alarmed() {
    let t = template();
    let mapping = &t["Resources"]["ReceiptsEventSourceMapping"]["Properties"];
    assert_eq!(mapping["MaximumRetryAttempts"], -1, "retry until the record age limit");
    assert_eq!(mapping["MaximumRecordAgeInSeconds"], 21_600, "6 h: 18 h of the stream's 24 h left to replay");
    assert_eq!(mapping["BisectBatchOnFunctionError"], true, "a failing record is isolated from its batch");
    let relay = json!([{"Name": "Function", "Value": function_name(&t, "ReceiptsRelayFunction")}]);
    for alert in [Alert::EmailBlocked, Alert::EmailAmbiguous] {
        let alarm = alarm_on(&t, &metrics_namespace(), alert.metric(), relay.clone())
            .unwrap_or_else(|| panic!("no alarm on {}", alert.metric()));
        // One occurrence in a minute is enough: each is a receipt held or in doubt.
        assert_eq!((&alarm["Statistic"], &alarm["Threshold"]), (&json!("Sum"), &json!(0)), "{}", alert.metric());
    }
    let relay_function = json!([{"Name": "FunctionName", "Value": {"Ref": "ReceiptsRelayFunction"}}]);
    let iterator_age = alarm_on(&t, &json!("AWS/Lambda"), "IteratorAge", relay_function)
        .expect("an alarm on the relay's iterator age");
    assert_eq!(iterator_age["Statistic"], "Maximum");
    // It fires long before records age out: the operator has most of the day to clear the hold.
    let fires_after_ms = iterator_age["Threshold"].as_u64().unwrap()
        + iterator_age["Period"].as_u64().unwrap() * iterator_age["EvaluationPeriods"].as_u64().unwrap() * 1000;
    assert!(fires_after_ms <= 3_600_000, "alarmed within the hour, not {fires_after_ms} ms");
}

/// The outbox sweeper sends what the receipts stream left `PENDING`: on a schedule, past a
/// threshold no longer than the stream's record age (a receipt the stream gives up on is swept by
/// the next run), as the relay sends (its environment, so the same rules, sender and markers),
/// from the sparse pending index the code queries (the template's index is the code's). Its role
/// holds the relay's sending grants and a query of that index, nothing of the stream or the
/// failure queue; it is traced, aliased, reserved one execution (two sweeps never overlap), not
/// retried asynchronously (the next run is the retry), and alarmed.
#[test]
fn the_outbox_sweeper_runs_on_a_schedule_with_the_relays_sending_grants_and_the_pending_index() {
    let t = template();
    let resources = &t["Resources"];
    let function = &resources[SWEEPER_FUNCTION];
    let props = &function["Properties"];
    assert_eq!(function["Metadata"]["BuildProperties"]["Binary"], "outbox-sweeper");
    assert_eq!(props["Role"], json!({"Fn::GetAtt": [SWEEPER, "Arn"]}));
    for (key, value) in [("Tracing", json!("Active")), ("AutoPublishAlias", json!("live"))] {
        assert_eq!(props[key], value, "{key}");
    }
    assert_eq!(props["AutoPublishAliasAllProperties"], true);
    assert_eq!(props["Architectures"], json!([{"Ref": "Architecture"}]));
    let logging = &props["LoggingConfig"];
    assert_eq!(logging["LogFormat"], "JSON");
    assert_eq!(logging["LogGroup"], json!({"Ref": "OutboxSweeperLogGroup"}));
    assert_eq!(reservation(&t, SWEEPER_FUNCTION).1["Default"], 1, "one sweep at a time");
    assert_eq!(props["EventInvokeConfig"]["MaximumRetryAttempts"], 0, "the next scheduled run is the retry");

    sweeper_sends_under_the_relays_environment(&t);
    // On a schedule, every 10 minutes.
    let events: Vec<&Value> = props["Events"].as_object().unwrap().values().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (&events[0]["Type"], &events[0]["Properties"]["Schedule"]),
        (&json!("Schedule"), &json!("rate(10 minutes)"))
    );

    // The pending index the code queries, as the code names it.
    let table = &resources["OutboxTable"]["Properties"];
    let indexes = list(&table["GlobalSecondaryIndexes"]);
    assert_eq!(indexes.len(), 1);
    assert_eq!(indexes[0]["IndexName"], outbox::PENDING_INDEX);
    assert_eq!(
        indexes[0]["KeySchema"],
        json!([{"AttributeName": outbox::PENDING_SHARD, "KeyType": "HASH"}, {"AttributeName": "created_at", "KeyType": "RANGE"}])
    );
    assert_eq!(
        indexes[0]["Projection"],
        json!({"ProjectionType": "INCLUDE", "NonKeyAttributes": outbox::PENDING_PROJECTION})
    );
    for attribute in [outbox::PENDING_SHARD, "created_at"] {
        assert!(
            list(&table["AttributeDefinitions"]).contains(&json!({"AttributeName": attribute, "AttributeType": "S"}))
        );
    }

    sweeper_role_holds_the_relays_grants_and_the_index_alone(&t);
    sweeper_is_alarmed(&t);
}

/// The sweeper's environment is the relay's, so it sends under the same rules; its own service
/// name and threshold, which the code reads as the template's default says.
fn sweeper_sends_under_the_relays_environment(template: &Value) {
    let t: &Value = template;
    let resources = &t["Resources"];
    let props = &resources[SWEEPER_FUNCTION]["Properties"];
    let env = &props["Environment"]["Variables"];
    let relay_env = resources["ReceiptsRelayFunction"]["Properties"]["Environment"]["Variables"].as_object().unwrap();
    // Not the park queue: the sweeper runs no stream driver, so it has nothing to park.
    let own = ["POWERTOOLS_SERVICE_NAME", "PARK_QUEUE_URL"];
    for (variable, value) in relay_env.iter().filter(|(v, _)| !own.contains(&v.as_str())) {
        assert_eq!(&env[variable], value, "{variable}");
    }
    assert_eq!(env["POWERTOOLS_SERVICE_NAME"], "outbox-sweeper");
    assert_eq!(env[receipts_relay::sweep::AFTER_VAR], json!({"Ref": "OutboxSweepAfterSeconds"}));
    let after = t["Parameters"]["OutboxSweepAfterSeconds"]["Default"].as_u64().unwrap();
    let read = receipts_relay::Sweep::from_env_with(|name| {
        (name == receipts_relay::sweep::AFTER_VAR).then(|| after.to_string())
    });
    assert_eq!(read.map(|s| s.after.as_secs()), Ok(after));
    let age = resources["ReceiptsEventSourceMapping"]["Properties"]["MaximumRecordAgeInSeconds"].as_u64().unwrap();
    assert!(after <= age, "a receipt the stream gives up on ({age} s) is past the threshold ({after} s)");
}

/// The sweeper's role: the relay's sending grants on its own keys, a query of the index and
/// nothing else of the table, nothing of the stream, no queue.
fn sweeper_role_holds_the_relays_grants_and_the_index_alone(template: &Value) {
    let t: &Value = template;
    let (marker, row) = (email_marker(), outbox::row_key("pay_0001"));
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem"] {
        assert!(allows(t, SWEEPER, Request { action, table: "IdempotencyTable", key: &marker }), "{action} {marker}");
    }
    for action in ["dynamodb:GetItem", "dynamodb:UpdateItem"] {
        assert!(allows(t, SWEEPER, Request { action, table: "OutboxTable", key: &row }), "{action} {row}");
    }
    for action in ["dynamodb:PutItem", "dynamodb:DeleteItem"] {
        assert!(
            !allows(t, SWEEPER, Request { action, table: "OutboxTable", key: &row }),
            "the sweeper may {action} a row"
        );
    }
    for action in WRITES {
        let payment = payment_record();
        assert!(
            !allows(t, SWEEPER, Request { action, table: "IdempotencyTable", key: &payment }),
            "{action} {payment}"
        );
        let ledger = Request { action, table: "LedgerTable", key: "account#acct_42" };
        assert!(!allows(t, SWEEPER, ledger), "the sweeper may {action} on the ledger");
    }
    let role = statements(t, SWEEPER);
    let on = |action: &str| -> Vec<&Value> { role.iter().filter(|s| grants(s, action)).collect() };
    let query = on("dynamodb:Query");
    assert_eq!(query.len(), 1, "{query:?}");
    assert_eq!(
        query[0]["Resource"],
        json!({"Fn::Sub": format!("${{OutboxTable.Arn}}/index/{}", outbox::PENDING_INDEX)})
    );
    for action in
        ["dynamodb:Scan", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams", "sqs:SendMessage"]
    {
        assert!(on(action).is_empty(), "the sweeper may {action}");
    }
    for s in role.iter().filter(|s| s["Resource"] == "*") {
        assert!(list(&s["Action"]).iter().all(|a| a.as_str().is_some_and(|a| a.starts_with("xray:"))), "{s}");
    }
}

/// The sweeper is alarmed: rows it could not send, a receipt in doubt, a failed run.
fn sweeper_is_alarmed(template: &Value) {
    let t: &Value = template;
    let sweeper = json!([{"Name": "Function", "Value": function_name(t, SWEEPER_FUNCTION)}]);
    let invocations = json!([{"Name": "FunctionName", "Value": {"Ref": SWEEPER_FUNCTION}}]);
    let metrics = [
        (metrics_namespace(), "SweepUnsent", sweeper.clone()),
        (metrics_namespace(), "EmailAmbiguous", sweeper),
        (json!("AWS/Lambda"), "Errors", invocations),
    ];
    for (namespace, metric, dimensions) in metrics {
        let alarm =
            alarm_on(t, &namespace, metric, dimensions).unwrap_or_else(|| panic!("no alarm on the sweeper's {metric}"));
        assert_eq!((&alarm["Threshold"], &alarm["ComparisonOperator"]), (&json!(0), &json!("GreaterThanThreshold")));
        assert_eq!(alarm["AlarmActions"], alarm_actions(), "{metric}");
        assert_eq!(alarm["TreatMissingData"], "notBreaching", "{metric}");
    }
    let unsent = receipts_relay::Swept::default().metrics().into_iter().any(|(name, _)| name == "SweepUnsent");
    assert!(unsent, "the alarmed metric is one the sweeper emits");
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

/// The string of a `{"Fn::Sub": "..."}` value (a function's name).
fn sub_string(v: &Value) -> &str {
    v["Fn::Sub"].as_str().expect("a Fn::Sub string")
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

/// A standard queue's message expires by its first enqueue time, also in the DLQ; a FIFO DLQ
/// restarts the clock. Either way the DLQ must keep a message longer than the source queue, or a
/// payment could expire in the DLQ before an operator sees it.
#[test]
fn the_dead_letter_queue_keeps_messages_longer_than_the_payments_queue() {
    let t = template();
    for fifo in [false, true] {
        let r = resolve(&t["Resources"], fifo).unwrap();
        let source = r["PaymentsQueue"]["Properties"]["MessageRetentionPeriod"].as_u64().unwrap();
        let dlq = r["PaymentsDeadLetterQueue"]["Properties"]["MessageRetentionPeriod"].as_u64().unwrap();
        assert!(dlq > source, "fifo={fifo}: the DLQ keeps {dlq} s, the source {source} s");
        // SQS's longest retention: a standard DLQ's message is kept for at least 10 days after it
        // arrives (14 days from its first enqueue, less up to 4 in the source queue).
        assert_eq!(dlq, 14 * 86_400, "fifo={fifo}");
    }
}

/// Tracing, a published alias the mappings invoke, log levels, the service name, the architecture,
/// deletion protection.
#[test]
fn the_functions_are_traced_aliased_and_configured_and_the_tables_protected() {
    let t = template();
    let resources = &t["Resources"];
    for (function, role, mapping, binary) in record_functions() {
        let props = &resources[function]["Properties"];
        assert_eq!(props["Tracing"], "Active", "{function}");
        // X-Ray's write actions take no resource ARN: "*" is the only form IAM accepts.
        let tracing = statements(&t, role).into_iter().find(|s| action_matches(s, "xray:PutTraceSegments"));
        let tracing = tracing.unwrap_or_else(|| panic!("{role} cannot send trace segments"));
        assert!(action_matches(&tracing, "xray:PutTelemetryRecords") && tracing["Effect"] == "Allow");
        // A version per change of code or configuration, and the mapping invokes the alias.
        assert_eq!(props["AutoPublishAlias"], "live", "{function}");
        assert_eq!(props["AutoPublishAliasAllProperties"], true, "{function}: a configuration change publishes too");
        assert_eq!(
            resources[mapping]["Properties"]["FunctionName"],
            json!({"Ref": format!("{function}.Alias")}),
            "{mapping} invokes the alias, not $LATEST"
        );
        assert_eq!(props["Architectures"], json!([{"Ref": "Architecture"}]), "{function}");
        let logging = &props["LoggingConfig"];
        assert_eq!(logging["LogFormat"], "JSON", "{function}: level filtering needs JSON logs");
        assert_eq!(logging["ApplicationLogLevel"], json!({"Ref": "ApplicationLogLevel"}));
        assert_eq!(logging["SystemLogLevel"], json!({"Ref": "SystemLogLevel"}));
        assert_eq!(resources[function]["Metadata"]["BuildProperties"]["Binary"], binary);
        let env = &props["Environment"]["Variables"];
        assert_eq!(env["POWERTOOLS_SERVICE_NAME"], binary, "{function}'s service name");
    }
    let parameters = &t["Parameters"];
    assert_eq!(parameters["Architecture"]["Default"], "x86_64");
    assert_eq!(parameters["Architecture"]["AllowedValues"], json!(["x86_64", "arm64"]));
    // An EMF line has no "level", so Lambda files it as INFO: a filter above INFO would drop the
    // metrics every EMF alarm reads.
    let levels = list(&parameters["ApplicationLogLevel"]["AllowedValues"]);
    assert!(levels.contains(&parameters["ApplicationLogLevel"]["Default"]));
    for above_info in ["WARN", "ERROR", "FATAL"] {
        assert!(!levels.contains(&json!(above_info)), "ApplicationLogLevel {above_info} would drop the metrics");
    }
    assert!(list(&parameters["SystemLogLevel"]["AllowedValues"]).contains(&parameters["SystemLogLevel"]["Default"]));
    for table in TABLES {
        assert_eq!(resources[table]["Properties"]["DeletionProtectionEnabled"], true, "{table}");
        assert_eq!(resources[table]["DeletionPolicy"], "Retain", "{table}");
    }
    // The only grants on "*" are those whose actions take no resource (the Kafka consumer's
    // network interfaces in the cluster's VPC apart: its own test reads them).
    for (_, role, _, _) in FUNCTIONS {
        for s in statements(&t, role).iter().filter(|s| s["Resource"] == "*") {
            let actions: Vec<Value> = list(&s["Action"]);
            assert!(
                actions.iter().all(|a| ["dynamodb:ListStreams", "xray:PutTraceSegments", "xray:PutTelemetryRecords"]
                    .contains(&a.as_str().unwrap_or_default())),
                "{role} grants {actions:?} on *"
            );
        }
    }
}

/// Each function's reserved concurrency: its parameter, and the condition that leaves it out
/// when the parameter is 0.
fn reservation(t: &Value, function: &str) -> (String, Value) {
    let reserved = &t["Resources"][function]["Properties"]["ReservedConcurrentExecutions"];
    let branches = list(&reserved["Fn::If"]);
    let parameter = branches[1]["Ref"].as_str().unwrap_or_else(|| panic!("{function}: {reserved}")).to_owned();
    assert_eq!(branches[2], json!({"Ref": "AWS::NoValue"}), "{function}: 0 reserves nothing");
    assert_eq!(
        t["Conditions"][branches[0].as_str().unwrap()],
        json!({"Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, "0"]}]}),
        "{function}: reserved unless its parameter is 0"
    );
    (parameter.clone(), t["Parameters"][&parameter].clone())
}

/// What one flood can take is bounded: every function runs within concurrency reserved for it
/// (a parameter; 0 lifts the reservation and the cap), so a burst on the API answers 429 instead
/// of taking the account's pool from the consumers, and a backlog cannot starve the API. The SQS
/// mapping invokes at most what the consumer has reserved: above it Lambda would throttle, and a
/// throttled batch goes back to the queue with its receive count raised, towards the DLQ. The
/// defaults leave Lambda's 100 unreserved executions in an account of 1,000 (the default quota).
#[test]
fn every_function_runs_within_its_reserved_concurrency() {
    let t = template();
    let functions: Vec<&String> = t["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Serverless::Function")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(functions.len(), 5, "{functions:?}");
    let mut reserved_by_default = 0;
    for function in functions {
        let (name, parameter) = reservation(&t, function);
        assert_eq!(parameter["Type"], "Number", "{name}");
        assert_eq!((&parameter["MinValue"], &parameter["MaxValue"]), (&json!(0), &json!(1000)), "{name}");
        let default = parameter["Default"].as_u64().unwrap_or_else(|| panic!("{name} has a default"));
        assert!(default > 0, "{name}: reserved by default");
        if t["Resources"][function]["Condition"].is_null() {
            reserved_by_default += default;
        }
    }
    assert!(reserved_by_default + 100 <= 1000, "the defaults reserve {reserved_by_default} of an account's 1,000");

    let (consumer, parameter) = reservation(&t, "PaymentsConsumerFunction");
    let scaling = &t["Resources"]["PaymentsEventSourceMapping"]["Properties"]["ScalingConfig"]["MaximumConcurrency"];
    let reserves =
        t["Resources"]["PaymentsConsumerFunction"]["Properties"]["ReservedConcurrentExecutions"]["Fn::If"][0].clone();
    assert_eq!(scaling, &json!({"Fn::If": [reserves, {"Ref": consumer}, 10]}), "the mapping follows the reservation");
    assert!(parameter["Default"].as_u64() >= Some(2), "MaximumConcurrency takes 2 to 1000");
}

/// With `KmsKeyArn` set, everything the stack keeps at rest is encrypted under that key: every
/// table, queue, log group and stream of the template, whichever is added later; empty (the
/// default), the AWS keys as before (the tables' and the stream's AWS managed keys, SSE-SQS), and
/// nothing names the parameter. Every function's role may then use the key, that key only, for
/// what reading and writing encrypted data takes (`kms:Decrypt`, `kms:GenerateDataKey`), and no
/// statement grants any other KMS action.
#[test]
fn a_customer_managed_key_encrypts_every_table_queue_log_group_and_stream() {
    let t = template();
    let key = json!({"Ref": "KmsKeyArn"});
    assert_eq!(t["Parameters"]["KmsKeyArn"]["Default"], "");
    assert_eq!(t["Conditions"]["HasKmsKey"], json!({"Fn::Not": [{"Fn::Equals": [{"Ref": "KmsKeyArn"}, ""]}]}));
    for with_key in [true, false] {
        let resources = resolve_condition(&t["Resources"], "HasKmsKey", with_key).unwrap();
        let mut covered = std::collections::BTreeSet::new();
        for (id, resource) in resources.as_object().unwrap() {
            let (kind, props) = (resource["Type"].as_str().unwrap(), &resource["Properties"]);
            let (encryption, expected) = match kind {
                "AWS::DynamoDB::Table" => (
                    props["SSESpecification"].clone(),
                    match with_key {
                        true => json!({"SSEEnabled": true, "SSEType": "KMS", "KMSMasterKeyId": key}),
                        false => json!({"SSEEnabled": true}),
                    },
                ),
                "AWS::SQS::Queue" => (
                    json!([props["KmsMasterKeyId"], props["SqsManagedSseEnabled"]]),
                    match with_key {
                        true => json!([key, null]),
                        false => json!([null, true]),
                    },
                ),
                "AWS::Logs::LogGroup" => (props["KmsKeyId"].clone(), if with_key { key.clone() } else { Value::Null }),
                "AWS::Kinesis::Stream" => (
                    props["StreamEncryption"].clone(),
                    json!({"EncryptionType": "KMS", "KeyId": if with_key { key.clone() } else { json!("alias/aws/kinesis") }}),
                ),
                _ => continue,
            };
            assert_eq!(encryption, expected, "{id} (with a key: {with_key})");
            covered.insert(kind);
        }
        // The test reads what is there: it must have found each kind the template holds.
        let kinds: Vec<&str> = covered.into_iter().collect();
        assert_eq!(kinds, ["AWS::DynamoDB::Table", "AWS::Logs::LogGroup", "AWS::SQS::Queue"]);
        if !with_key {
            assert!(!resources.to_string().contains("KmsKeyArn"), "without a key nothing names it");
        }

        for (id, resource) in resources.as_object().unwrap() {
            if resource["Type"] != "AWS::Serverless::Function" {
                continue;
            }
            let role = resource["Properties"]["Role"]["Fn::GetAtt"][0].as_str().unwrap();
            let mut kms = Vec::new();
            all_statements(&resources[role], &mut kms);
            kms.retain(|s| list(&s["Action"]).iter().any(|a| a.as_str().is_some_and(|a| a.starts_with("kms:"))));
            let expected = match with_key {
                true => vec![json!({"Sid": "CustomerManagedKey", "Effect": "Allow",
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": key})],
                false => Vec::new(),
            };
            assert_eq!(kms, expected, "{id}'s role {role} (with a key: {with_key})");
        }
        let mut everywhere = Vec::new();
        all_statements(&resources, &mut everywhere);
        let wider: Vec<&Value> =
            everywhere.iter().filter(|s| grants(s, "kms:CreateGrant") || grants(s, "kms:Encrypt")).collect();
        assert!(wider.is_empty(), "wider KMS grants than the functions need: {wider:?}");
    }
}

/// Every DynamoDB item request a client sends, as IAM authorises it: `(action, table name,
/// partition key)`, a transaction split into its items (each is authorised as its own action).
#[derive(Debug, Clone, Default)]
struct Recorder {
    requests: std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>,
}

impl Recorder {
    fn take(&self) -> Vec<(String, String, String)> {
        std::mem::take(&mut *self.requests.lock().unwrap())
    }
}

/// The partition key attribute of each table the functions touch.
const PARTITION_KEYS: [&str; 2] = ["id", "pk"];

fn partition_key(item: &Value) -> String {
    PARTITION_KEYS.iter().find_map(|k| item[*k]["S"].as_str()).unwrap_or_default().to_owned()
}

impl aws_sdk_dynamodb::config::Intercept for Recorder {
    fn name(&self) -> &'static str {
        "Recorder"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let request = context.request();
        let operation = request.headers().get("x-amz-target").and_then(|t| t.rsplit('.').next()).unwrap_or("?");
        let body: Value = serde_json::from_slice(request.body().bytes().unwrap_or(b"{}")).unwrap_or_default();
        let mut out = self.requests.lock().unwrap();
        let mut push = |action: &str, part: &Value, item: &Value| {
            let table = part["TableName"].as_str().unwrap_or_default().to_owned();
            out.push((format!("dynamodb:{action}"), table, partition_key(item)));
        };
        match operation {
            "PutItem" => push("PutItem", &body, &body["Item"]),
            "TransactWriteItems" => {
                for item in list(&body["TransactItems"]) {
                    for (kind, action, key) in [
                        ("Put", "PutItem", "Item"),
                        ("Update", "UpdateItem", "Key"),
                        ("Delete", "DeleteItem", "Key"),
                        ("ConditionCheck", "ConditionCheckItem", "Key"),
                    ] {
                        if !item[kind].is_null() {
                            push(action, &item[kind], &item[kind][key]);
                        }
                    }
                }
            }
            // Each key a batch read asks for, under its table.
            "BatchGetItem" => {
                for (table, reads) in body["RequestItems"].as_object().into_iter().flatten() {
                    for key in list(&reads["Keys"]) {
                        push("BatchGetItem", &serde_json::json!({ "TableName": table }), &key);
                    }
                }
            }
            // A query reads no item by key: recorded under what it reads, `index/NAME` (or
            // `table`), for the test to hold against the grant's resource.
            "Query" => {
                let table = body["TableName"].as_str().unwrap_or_default().to_owned();
                let index = body["IndexName"].as_str().map_or_else(|| "table".to_owned(), |i| format!("index/{i}"));
                out.push(("dynamodb:Query".to_owned(), table, index));
            }
            // Item actions by key; anything else (Scan, batches) is recorded without a key,
            // which no grant here matches: a new kind of request must be granted on purpose.
            other => push(other, &body, &body["Key"]),
        }
        Ok(())
    }
}

/// The tables of the request scenario, on the local AWS, and a client recording its requests.
struct Scenario {
    sdk: aws_config::SdkConfig,
    idempotency: String,
    ledger: String,
    outbox: String,
}

/// The consumer's bodies: a credit with a receipt, its duplicate, an overdraft (a recorded
/// rejection), its duplicate, and the credit's event id reused for another account.
const SCENARIO_BODIES: [&str; 5] = [
    r#"{"event_id": "pay_0001", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD", "receipt_email": "alice@example.com"}"#,
    r#"{"event_id": "pay_0001", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD", "receipt_email": "alice@example.com"}"#,
    r#"{"event_id": "pay_0002", "account_id": "acct_7", "amount_cents": -500, "currency": "USD"}"#,
    r#"{"event_id": "pay_0002", "account_id": "acct_7", "amount_cents": -500, "currency": "USD"}"#,
    r#"{"event_id": "pay_0001", "account_id": "acct_9", "amount_cents": 1250, "currency": "USD"}"#,
];

impl Scenario {
    async fn new() -> Self {
        use effectively_once_dynamodb::testing::{sdk_config, unique_name};
        let sdk = sdk_config().await;
        let setup = aws_sdk_dynamodb::Client::new(&sdk);
        let scenario = Scenario {
            sdk,
            idempotency: unique_name("idem"),
            ledger: unique_name("ledger"),
            outbox: unique_name("outbox"),
        };
        effectively_once_dynamodb::create_table(&setup, &scenario.idempotency).await.unwrap();
        payments::tables::create_ledger_table(&setup, &scenario.ledger).await.unwrap();
        payments::tables::create_outbox_table(&setup, &scenario.outbox).await.unwrap();
        scenario
    }

    /// The template's name of one of the scenario's tables.
    fn logical(&self, table: &str) -> &'static str {
        match table {
            t if t == self.idempotency => "IdempotencyTable",
            t if t == self.ledger => "LedgerTable",
            t if t == self.outbox => "OutboxTable",
            _ => "unknown",
        }
    }

    fn recorded(&self) -> (aws_sdk_dynamodb::Client, Recorder) {
        let recorder = Recorder::default();
        let config = aws_sdk_dynamodb::config::Builder::from(&self.sdk).interceptor(recorder.clone()).build();
        (aws_sdk_dynamodb::Client::from_conf(config), recorder)
    }

    /// The payments consumer on [`SCENARIO_BODIES`], one message an invocation.
    async fn consumer(&self) -> Vec<(String, String, String)> {
        use aws_lambda_events::event::sqs::SqsMessage;
        use effectively_once_dynamodb::DynamoDbStore;
        use effectively_once_lambda::sqs as sqs_driver;
        use lambda_runtime::{Context, LambdaEvent};
        let (client, consumer_requests) = self.recorded();
        let store = DynamoDbStore::new(client, &self.idempotency);
        let consumer =
            payments_consumer::Payments::new(payments::Ledger::new(store, &self.ledger, Some(self.outbox.clone())));
        let options = sqs_driver::Options { emit_metrics: false, ..sqs_driver::Options::new("t") };
        for (i, body) in SCENARIO_BODIES.iter().enumerate() {
            let mut message = SqsMessage::default();
            message.message_id = Some(format!("m{i}"));
            message.body = Some(body.to_string());
            let mut event = aws_lambda_events::event::sqs::SqsEvent::default();
            event.records.push(message);
            sqs_driver::process(&consumer, LambdaEvent::new(event, Context::default()), &options).await;
        }
        consumer_requests.take()
    }

    /// The relay on the consumer's receipt row: a throttled send (the marker is released), the
    /// send, a duplicate.
    async fn relay(&self) -> Vec<(String, String, String)> {
        use aws_lambda_events::event::dynamodb::Event;
        use effectively_once_dynamodb::DynamoDbStore;
        use effectively_once_effects::email::{SendError, SendErrorKind};
        use effectively_once_lambda::streams;
        use lambda_runtime::{Context, LambdaEvent};
        let (idempotency, ledger_table, outbox_table) = (&self.idempotency, &self.ledger, &self.outbox);
        let recorded = || self.recorded();
        let (client, relay_requests) = recorded();
        let markers = effectively_once::Idempotency::new(DynamoDbStore::new(client, idempotency), Default::default());
        let sender = effectively_once_effects::RecordingSender::new();
        sender.fail_next(SendError::new(SendErrorKind::Throttled, "injected"));
        // With every rule on: the profile read and the rate counter are requests of the role too.
        let relay =
            receipts_relay::Receipts::new(markers, sender, outbox_table, effectively_once_effects::Policy::default())
                .with_profiles(ledger_table)
                .with_rate_limit(payments::RateLimit::from_env_values(Some("5"), None).unwrap());
        let event: Event =
            serde_json::from_str(include_str!("../../../../events/dynamodb-stream-outbox.json")).unwrap();
        let options = streams::Options { emit_metrics: false, ..streams::Options::new("t") };
        for _ in 0..3 {
            streams::process(&relay, LambdaEvent::new(event.clone(), Context::default()), &options).await;
        }
        assert_eq!(relay.sender().sent().len(), 1, "the scenario ran: one receipt sent");

        relay_requests.take()
    }

    /// The Kafka consumer on the same tables, with event ids of its own: the same payments one
    /// record at a time, then as one batch (the batch path), then that batch again in another
    /// sandbox (replays, read from the records).
    async fn kafka(&self) -> Vec<(String, String, String)> {
        use effectively_once_dynamodb::DynamoDbStore;
        use effectively_once_lambda::events::{KafkaEvent, KafkaRecord};
        use effectively_once_lambda::kafka;
        use lambda_runtime::{Context, LambdaEvent};
        let (idempotency, ledger_table, outbox_table) = (&self.idempotency, &self.ledger, &self.outbox);
        let bodies = SCENARIO_BODIES;
        let recorded = || self.recorded();
        let (client, kafka_requests) = recorded();
        let outbox = Some(outbox_table.clone());
        let ledger = payments::Ledger::new(DynamoDbStore::new(client, idempotency), ledger_table, outbox);
        let kafka_event = |prefix: &str, offset: i64| {
            let mut event = KafkaEvent::default();
            for (i, body) in bodies.iter().enumerate() {
                let mut record = KafkaRecord::default();
                (record.topic, record.partition, record.offset) = (Some("payments".into()), 0, offset + i as i64);
                record.value = Some(base64::engine::general_purpose::STANDARD.encode(body.replace("pay_", prefix)));
                event.records.entry("payments-0".into()).or_default().push(record);
            }
            event
        };
        let options = kafka::Options { emit_metrics: false, ..kafka::Options::new("t") };
        let one_by_one = kafka_consumer::Payments::new(ledger.clone_forgetting());
        for record in kafka_event("kpay_", 0).records.remove("payments-0").unwrap() {
            let mut event = KafkaEvent::default();
            event.records.insert("payments-0".into(), vec![record]);
            kafka::process(&one_by_one, LambdaEvent::new(event, Context::default()), &options).await;
        }
        for _ in 0..2 {
            let batch = kafka_consumer::Payments::new(ledger.clone_forgetting());
            kafka::process_batch(&batch, LambdaEvent::new(kafka_event("bpay_", 10), Context::default()), &options)
                .await;
        }
        let kafka_requests = kafka_requests.take();
        let posted = ledger.entries("acct_42").await.unwrap();
        assert_eq!(posted.len(), 3, "the scenario ran: the SQS, one-by-one and batch credits: {posted:?}");

        kafka_requests
    }

    /// The sweeper, with every rule on as the relay, a day later: the Kafka payments' receipts,
    /// which no stream delivered here, are still PENDING.
    async fn sweeper(&self) -> Vec<(String, String, String)> {
        use effectively_once_dynamodb::DynamoDbStore;
        let (idempotency, ledger_table, outbox_table) = (&self.idempotency, &self.ledger, &self.outbox);
        let recorded = || self.recorded();
        let (client, sweeper_requests) = recorded();
        let markers = effectively_once::Idempotency::new(DynamoDbStore::new(client, idempotency), Default::default());
        let sender = effectively_once_effects::RecordingSender::new();
        let receipts =
            receipts_relay::Receipts::new(markers, sender, outbox_table, effectively_once_effects::Policy::default())
                .with_profiles(ledger_table)
                .with_rate_limit(payments::RateLimit::from_env_values(Some("5"), None).unwrap());
        let sweeper = receipts_relay::Sweeper::new(receipts, receipts_relay::Sweep::default());
        let a_day_later = std::time::SystemTime::now() + std::time::Duration::from_secs(86_400);
        let swept =
            sweeper.run(a_day_later.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64, None).await;
        assert!(swept.sent > 0 && swept.unsent == 0, "the scenario ran: receipts sent by the sweep: {swept:?}");
        let sweeper_requests = sweeper_requests.take();
        let queries: Vec<&str> =
            sweeper_requests.iter().filter(|r| r.0 == "dynamodb:Query").map(|r| r.2.as_str()).collect();
        let index = format!("index/{}", outbox::PENDING_INDEX);
        assert!(
            !queries.is_empty() && queries.iter().all(|q| *q == index),
            "the sweeper queries the index alone: {queries:?}"
        );

        sweeper_requests
    }
}

#[tokio::test]
async fn every_request_the_functions_send_is_allowed_by_their_own_role() {
    let scenario = Scenario::new().await;
    let consumer_requests = scenario.consumer().await;
    let relay_requests = scenario.relay().await;
    let kafka_requests = scenario.kafka().await;
    let sweeper_requests = scenario.sweeper().await;
    let logical = |table: &str| scenario.logical(table);
    let t = template();
    for (role, requests) in
        [(CONSUMER, consumer_requests), (RELAY, relay_requests), (KAFKA, kafka_requests), (SWEEPER, sweeper_requests)]
    {
        assert!(!requests.is_empty());
        let mut seen = std::collections::BTreeSet::new();
        for (action, table, key) in &requests {
            let request = Request { action, table: logical(table), key };
            assert!(
                allows(&t, role, request),
                "{role} sends {action} on {} key {key:?}: its role denies it",
                logical(table)
            );
            seen.insert(format!("{action} {} {}#", logical(table), key.split('#').next().unwrap_or_default()));
        }
        println!("{role}: {} requests, all allowed: {seen:?}", requests.len());
    }
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

const API: &str = "PaymentsApiRole";

fn api_record() -> String {
    format!("{}#pay_0001", payments_api::PREFIX)
}

/// The payments API claims, completes, releases and reads its own records (`api#`), and nothing
/// else: not a payment record, an email marker, the ledger or the outbox; nor may the
/// consumer or the relay write an API record.
#[test]
fn the_api_keeps_to_its_own_records() {
    let t = template();
    let (record, payment, marker) = (api_record(), payment_record(), email_marker());
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &record };
        assert!(allows(&t, API, request), "the API needs {action} on {record}");
    }
    for action in WRITES {
        for key in [payment.as_str(), marker.as_str(), "other#pay_0001"] {
            assert!(!allows(&t, API, Request { action, table: "IdempotencyTable", key }), "the API may {action} {key}");
        }
        for table in ["LedgerTable", "OutboxTable"] {
            assert!(
                !allows(&t, API, Request { action, table, key: "account#acct_42" }),
                "the API may {action} on {table}"
            );
        }
        for role in [CONSUMER, RELAY] {
            let request = Request { action, table: "IdempotencyTable", key: &record };
            assert!(!allows(&t, role, request), "{role} may {action} the API's {record}");
        }
    }
}

/// The API sends to the payments queue and does nothing else with SQS; its function URL takes
/// IAM-signed requests only, and producers get a policy to call it.
#[test]
fn the_api_sends_to_the_payments_queue_alone_behind_iam() {
    let t = template();
    let on_sqs = |s: &Value| list(&s["Action"]).iter().any(|a| a.as_str().is_some_and(|a| a.starts_with("sqs:")));
    let sqs: Vec<Value> = statements(&t, API).into_iter().filter(on_sqs).collect();
    assert_eq!(sqs.len(), 1, "one SQS statement: {sqs:?}");
    assert_eq!(sqs[0]["Effect"], "Allow");
    assert_eq!(list(&sqs[0]["Action"]), [json!("sqs:SendMessage")]);
    assert_eq!(sqs[0]["Resource"], json!({"Fn::GetAtt": ["PaymentsQueue", "Arn"]}));
    for statement in statements(&t, API) {
        for action in list(&statement["Action"]) {
            let action = action.as_str().unwrap();
            assert!(!action.contains('*'), "{action}: no wildcard actions");
        }
    }

    let function = &t["Resources"]["PaymentsApiFunction"]["Properties"];
    assert_eq!(function["FunctionUrlConfig"]["AuthType"], "AWS_IAM");
    assert_eq!(function["Role"], json!({"Fn::GetAtt": [API, "Arn"]}));
    let env = &function["Environment"]["Variables"];
    assert_eq!(env["PAYMENTS_QUEUE_URL"], json!({"Ref": "PaymentsQueue"}));
    assert_eq!(env["IDEMPOTENCY_TABLE"], json!({"Ref": "IdempotencyTable"}));
    // FIFO follows the queue type, so the API sends group and deduplication ids to a FIFO queue.
    assert_eq!(env["PAYMENTS_QUEUE_FIFO"], json!({"Fn::If": ["IsFifo", "true", "false"]}));
    assert_eq!(env["API_DEDUP_WINDOW_SECONDS"], json!({"Ref": "ApiDedupWindowSeconds"}));
    // Callers (issue 27): empty by default, which the function reads as every caller, the event
    // id the key; a value the function would refuse fails its init, naming the variable.
    assert_eq!(env["API_PRODUCERS"], json!({"Ref": "ApiProducers"}));
    let producers = t["Parameters"]["ApiProducers"]["Default"].as_str().unwrap();
    assert!(payments_api::Producers::parse(producers).unwrap().names().next().is_none());
    assert_eq!(
        t["Parameters"]["ApiDedupWindowSeconds"]["Default"].as_u64(),
        Some(payments_api::DEFAULT_DEDUP_WINDOW.as_secs()),
        "the template's default window is the code's"
    );

    // A producer's policy: both actions Lambda requires of a function URL caller, on the alias
    // the URL belongs to.
    let invoke = &t["Resources"]["PaymentsApiInvokePolicy"]["Properties"]["PolicyDocument"]["Statement"];
    let actions: Vec<Value> = list(invoke).iter().flat_map(|s| list(&s["Action"])).collect();
    assert_eq!(actions, [json!("lambda:InvokeFunctionUrl"), json!("lambda:InvokeFunction")]);
    for statement in list(invoke) {
        assert_eq!(statement["Resource"], json!({"Ref": "PaymentsApiFunction.Alias"}));
    }
}

/// Every policy statement in `value`, wherever it sits (a role's inline policies, a managed
/// policy, a queue policy), each branch of an `Fn::If` around a statement counted as a statement.
fn all_statements(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(o) => {
            for (key, inner) in o {
                if key == "Statement" {
                    for statement in list(inner) {
                        match statement.get("Fn::If") {
                            Some(branches) => out.extend(
                                list(branches).into_iter().skip(1).filter(|b| b != &json!({"Ref": "AWS::NoValue"})),
                            ),
                            None => out.push(statement),
                        }
                    }
                } else {
                    all_statements(inner, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| all_statements(v, out)),
        _ => {}
    }
}

/// Whether `value` (a statement's `Resource`, a permission's `FunctionName`) may name the payments
/// API: a reference to its function or alias, a string with its name, or a wildcard. Read
/// generously: a grant the test cannot place counts as one on the API.
fn may_name_the_api(value: &Value) -> bool {
    let mut refs = std::collections::BTreeSet::new();
    references(value, &mut refs);
    let text = value.to_string();
    refs.contains("PaymentsApiFunction") || text.contains('*') || text.contains("payments-api")
}

/// Whether an allow statement grants `action`: its `Action` matches (wildcards included), or its
/// `NotAction` leaves it out.
fn grants(statement: &Value, action: &str) -> bool {
    if statement["Effect"] != "Allow" {
        return false;
    }
    if statement.get("NotAction").is_some() {
        let excluded = list(&statement["NotAction"]);
        return !excluded.iter().filter_map(Value::as_str).any(|a| like(&a.to_lowercase(), &action.to_lowercase()));
    }
    action_matches(statement, action)
}

/// Every grant of `lambda:InvokeFunction` on the payments API that holds outside its function
/// URL, as `resource/Sid`: a statement without `Bool lambda:InvokedViaFunctionUrl = true`, or a
/// Lambda permission without `InvokedViaFunctionUrl: true`. Such a grant lets its holder call
/// `Invoke` with a hand-built Function URL event, whose `requestContext.authorizer.iam` (the
/// identity the API scopes keys and accounts by) is then whatever the caller wrote.
fn direct_invoke_grants(t: &Value) -> Vec<String> {
    let via_url_only = |v: &Value| v == &json!("true") || v == &json!(true);
    let mut found = Vec::new();
    for (id, resource) in t["Resources"].as_object().expect("template has resources") {
        let props = &resource["Properties"];
        if resource["Type"] == "AWS::Lambda::Permission" {
            let invoke = like(&props["Action"].as_str().unwrap_or("*").to_lowercase(), "lambda:invokefunction");
            if invoke && may_name_the_api(&props["FunctionName"]) && !via_url_only(&props["InvokedViaFunctionUrl"]) {
                found.push(format!("{id} (permission)"));
            }
            continue;
        }
        let mut statements = Vec::new();
        all_statements(props, &mut statements);
        for s in statements {
            let on_api = may_name_the_api(&s["Resource"]) || s.get("NotResource").is_some();
            let conditioned = via_url_only(&s["Condition"]["Bool"]["lambda:InvokedViaFunctionUrl"]);
            if grants(&s, "lambda:InvokeFunction") && on_api && !conditioned {
                found.push(format!("{id}/{}", s["Sid"].as_str().unwrap_or("(no Sid)")));
            }
        }
    }
    found
}

/// A producer may call the API's function URL and nothing else of it. Lambda requires both
/// `lambda:InvokeFunctionUrl` and `lambda:InvokeFunction` of a URL caller (function URLs created
/// since October 2025); the second holds only with `lambda:InvokedViaFunctionUrl`, so a direct
/// `Invoke` with a hand-built event, carrying any identity, is denied. No other statement or
/// permission in the template grants the API's `Invoke` outside its URL.
#[test]
fn a_producer_cannot_invoke_the_api_directly_with_a_forged_request_context() {
    let t = template();
    assert_eq!(direct_invoke_grants(&t), Vec::<String>::new(), "direct Invoke grants on the payments API");

    let policy = &t["Resources"]["PaymentsApiInvokePolicy"]["Properties"]["PolicyDocument"]["Statement"];
    let url =
        list(policy).into_iter().find(|s| action_matches(s, "lambda:InvokeFunctionUrl")).expect("the URL's grant");
    assert_eq!(url["Condition"], json!({"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}}));
    let invoke = list(policy).into_iter().find(|s| action_matches(s, "lambda:InvokeFunction")).expect("Invoke's grant");
    assert_eq!(invoke["Condition"], json!({"Bool": {"lambda:InvokedViaFunctionUrl": "true"}}));
    assert_eq!(list(&invoke["Action"]), [json!("lambda:InvokeFunction")], "no other action rides on the condition");
}

/// The check above can fail: it finds the producers' policy as it was (Invoke without the
/// condition), a wildcard grant in a role, and a resource permission for direct invokes.
#[test]
fn the_direct_invoke_check_finds_an_unconditioned_grant() {
    let mut old = template();
    let statements = &mut old["Resources"]["PaymentsApiInvokePolicy"]["Properties"]["PolicyDocument"]["Statement"];
    for statement in statements.as_array_mut().unwrap() {
        statement.as_object_mut().unwrap().remove("Condition");
    }
    assert_eq!(direct_invoke_grants(&old), ["PaymentsApiInvokePolicy/InvokePaymentsApiViaUrlOnly"]);

    let mut wildcard = template();
    let role = &mut wildcard["Resources"][CONSUMER]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"];
    role.as_array_mut().unwrap().push(json!({"Sid": "Wide", "Effect": "Allow", "Action": "lambda:*", "Resource": "*"}));
    assert_eq!(direct_invoke_grants(&wildcard), [format!("{CONSUMER}/Wide")]);

    let mut permission = template();
    permission["Resources"]["ProducerInvoke"] = json!({"Type": "AWS::Lambda::Permission", "Properties": {
        "Action": "lambda:InvokeFunction",
        "FunctionName": {"Ref": "PaymentsApiFunction.Alias"},
        "Principal": "123456789012",
    }});
    assert_eq!(direct_invoke_grants(&permission), ["ProducerInvoke (permission)"]);
    permission["Resources"]["ProducerInvoke"]["Properties"]["InvokedViaFunctionUrl"] = json!(true);
    assert_eq!(direct_invoke_grants(&permission), Vec::<String>::new());
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

/// A queue that refuses its first send (a definite refusal: the API releases the record) and
/// takes the rest.
#[derive(Default)]
struct FailsFirst(std::sync::atomic::AtomicBool);

impl payments_api::Queue for FailsFirst {
    async fn send(&self, _event: &payments::PaymentEvent) -> Result<(), payments_api::EnqueueError> {
        match self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            false => Err(payments_api::EnqueueError::refused("injected")),
            true => Ok(()),
        }
    }
}

/// Every DynamoDB request of the API, through each of its paths (a failed send and its
/// release, the send, a replay, a key reuse, a key in flight read for Retry-After), is allowed
/// by its role.
#[tokio::test]
async fn every_request_the_api_sends_is_allowed_by_its_role() {
    use effectively_once::{Begin, Config, Idempotency, Key};
    use effectively_once_dynamodb::testing::{sdk_config, unique_name};
    use effectively_once_dynamodb::DynamoDbStore;
    use lambda_http::http::{HeaderMap, HeaderValue};
    use lambda_http::Body;

    let sdk = sdk_config().await;
    let setup = aws_sdk_dynamodb::Client::new(&sdk);
    let idempotency = unique_name("idem");
    effectively_once_dynamodb::create_table(&setup, &idempotency).await.unwrap();
    let recorder = Recorder::default();
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(recorder.clone()).build();
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), &idempotency);
    let api = payments_api::Api::new(Idempotency::new(store, Config::default()), FailsFirst::default());

    let body = r#"{"account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}"#;
    let request = |key: &str, body: &str| {
        let mut request = lambda_http::Request::new(Body::Text(body.to_owned()));
        *request.method_mut() = lambda_http::http::Method::POST;
        *request.uri_mut() = "/payments".parse().unwrap();
        request.headers_mut().insert(payments_api::IDEMPOTENCY_KEY, HeaderValue::from_str(key).unwrap());
        request
    };
    let statuses = [
        api.handle(request("pay_0001", body)).await.status(),
        api.handle(request("pay_0001", body)).await.status(),
        api.handle(request("pay_0001", body)).await.status(),
        api.handle(request("pay_0001", &body.replace("1250", "99"))).await.status(),
    ];
    assert_eq!(statuses.map(|s| s.as_u16()), [503, 202, 202, 422]);
    // A key in flight: claimed by another attempt (through the unrecorded client).
    let mut headers = HeaderMap::new();
    headers.insert(payments_api::IDEMPOTENCY_KEY, HeaderValue::from_static("pay_0002"));
    let event = payments_api::parse(&headers, &Body::Text(body.to_owned())).unwrap();
    let other = Idempotency::new(DynamoDbStore::new(setup, &idempotency), Config::default());
    let key = Key::new(payments_api::PREFIX, "pay_0002").unwrap();
    let Ok(Begin::Claimed(_held)) = other.begin::<_, payments_api::Answer>(&key, &event).await else {
        panic!("claimed")
    };
    assert_eq!(api.handle(request("pay_0002", body)).await.status().as_u16(), 409);

    let t = template();
    let requests = recorder.take();
    let mut seen = std::collections::BTreeSet::new();
    for (action, table, key) in &requests {
        assert_eq!(table, &idempotency);
        let request = Request { action, table: "IdempotencyTable", key };
        assert!(allows(&t, API, request), "the API sends {action} on key {key:?}: its role denies it");
        seen.insert(action.clone());
    }
    let all = ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"];
    assert_eq!(seen.iter().map(String::as_str).collect::<Vec<_>>(), all, "every path ran");
}

/// The payments consumer (the one function on mimalloc) keeps the pages it freed: a sandbox
/// serves one invocation at a time, so memory returned to the OS between batches is only faulted
/// in again by the next one, and Lambda bills the configured memory, not the resident set.
#[test]
fn the_payments_consumer_keeps_its_freed_memory_between_batches() {
    let t = template();
    let env = &t["Resources"]["PaymentsConsumerFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(env["MIMALLOC_PURGE_DELAY"], "-1");
    let main = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../consumer/src/main.rs"))
        .expect("the consumer's main");
    assert!(main.contains("mimalloc::MiMalloc"), "the setting is mimalloc's: the consumer must allocate with it");
}

/// Each stream function's role may send to its park queue and read the queue's attributes
/// (`SqsQueue` reads `MaximumMessageSize` once, to park a parcel over it without its record),
/// on that queue alone.
#[test]
fn each_stream_role_sends_to_and_reads_its_park_queue_alone() {
    let t = template();
    for (role, queue) in [("ReceiptsRelayRole", "ReceiptsParkQueue"), ("KafkaConsumerRole", "KafkaParkQueue")] {
        let grants = statements(&t, role);
        let park = json!({"Fn::GetAtt": [queue, "Arn"]});
        for action in ["sqs:SendMessage", "sqs:GetQueueAttributes"] {
            let on: Vec<&Value> = grants
                .iter()
                .filter(|s| s["Effect"] == "Allow" && action_matches(s, action) && s["Resource"] == park)
                .collect();
            assert_eq!(on.len(), 1, "{role} may {action} on {queue}");
        }
        let attributes: Vec<&Value> = grants
            .iter()
            .filter(|s| s["Effect"] == "Allow" && action_matches(s, "sqs:GetQueueAttributes"))
            .map(|s| &s["Resource"])
            .collect();
        assert_eq!(attributes, [&park], "{role} reads no other queue's attributes");
    }
}
