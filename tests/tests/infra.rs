//! What the deployment template's policies mean, checked against the keys the code writes.
//! cfn-lint proves the template is well formed; it cannot tell that the relay's role may delete a
//! recorded payment rejection, or that a FIFO payments queue got a standard dead-letter queue.
//! This reads `infra/template.json` with a small evaluator of the IAM forms the template uses.

use effects::{email, ledger, outbox};
use serde_json::{json, Value};

const TEMPLATE: &str = include_str!("../../infra/template.json");

fn template() -> Value {
    serde_json::from_str(TEMPLATE).expect("infra/template.json is JSON")
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
const WRITES: [&str; 4] =
    ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"];

fn payment_record() -> String {
    format!("{}#pay_0001", ledger::PREFIX)
}

fn email_marker() -> String {
    email::email_key("pay_0001").expect("a valid key").as_str().to_owned()
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
    // The consumer's transaction: the record (put, or a check), the outbox row; reads its record.
    for action in ["dynamodb:PutItem", "dynamodb:ConditionCheckItem", "dynamodb:GetItem"] {
        let request = Request { action, table: "IdempotencyTable", key: &payment };
        assert!(allows(&t, CONSUMER, request), "the consumer needs {action} on {payment}");
    }
    assert!(allows(&t, CONSUMER, Request { action: "dynamodb:PutItem", table: "OutboxTable", key: &row }));
    for action in ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:GetItem"] {
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
    assert_eq!(queues.len(), 3, "the payments queue, its DLQ and the relay's failure queue");
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
    for role in [CONSUMER, RELAY] {
        for s in statements(&t, role).iter().filter(|s| s["Effect"] == "Allow") {
            let ses = list(&s["Action"]).iter().filter_map(Value::as_str).any(|a| a.to_lowercase().starts_with("ses:"));
            if !ses {
                continue;
            }
            assert_eq!(role, RELAY, "only the relay sends email");
            assert_eq!(
                s["Condition"]["StringEquals"]["ses:FromAddress"],
                json!({"Ref": "ReceiptFrom"}),
                "{role}'s SES grant {} is not conditioned on the sender",
                s["Sid"]
            );
        }
    }
    // The relay sends with RECEIPT_FROM, so the condition and the sender are one parameter.
    let env = &t["Resources"]["ReceiptsRelayFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(env["RECEIPT_FROM"], json!({"Ref": "ReceiptFrom"}));
}

/// The template with `Fn::If` on `IsFifo` resolved.
fn resolve(v: &Value, fifo: bool) -> Option<Value> {
    match v {
        Value::Object(o) => {
            if let Some(args) = o.get("Fn::If").and_then(Value::as_array).filter(|a| a[0] == "IsFifo") {
                return resolve(&args[if fifo { 1 } else { 2 }], fifo);
            }
            if o.get("Ref") == Some(&json!("AWS::NoValue")) {
                return None;
            }
            Some(Value::Object(o.iter().filter_map(|(k, v)| Some((k.clone(), resolve(v, fifo)?))).collect()))
        }
        Value::Array(items) => Some(Value::Array(items.iter().filter_map(|v| resolve(v, fifo)).collect())),
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
