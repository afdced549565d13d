//! How the functions and the data are configured: traced, aliased and protected, within their
//! reserved concurrency, encrypted with the stack's customer managed key, the consumer keeping
//! its freed memory, and the outbox sweeper on its schedule with the relay's sending grants.

use payments::outbox;
use serde_json::{json, Value};

use crate::cfn::{function_name, resolve_condition};
use crate::iam::{action_matches, all_statements, allows, grants, statements, Request};
use crate::monitoring::{alarm_actions, alarm_on, metrics_namespace};
use crate::{
    email_marker, list, payment_record, record_functions, template, FUNCTIONS, SWEEPER, SWEEPER_FUNCTION, TABLES,
    WRITES,
};

/// No log level the template lets an operator choose logs a raw invocation: at TRACE
/// lambda_runtime writes each event's JSON as it came (bodies, addresses), past the redaction the
/// functions' own lines get. Lambda passes `ApplicationLogLevel` to the runtime as
/// `AWS_LAMBDA_LOG_LEVEL`; `RUST_LOG` in a function's environment would override it.
#[test]
fn no_log_level_the_template_allows_logs_raw_invocations() {
    let t = template();
    let levels = list(&t["Parameters"]["ApplicationLogLevel"]["AllowedValues"]);
    assert!(!levels.contains(&json!("TRACE")), "ApplicationLogLevel allows TRACE: {levels:?}");
    for (name, resource) in t["Resources"].as_object().unwrap() {
        let env = &resource["Properties"]["Environment"]["Variables"];
        for variable in ["RUST_LOG", "AWS_LAMBDA_LOG_LEVEL"] {
            assert!(env[variable].is_null(), "{name} sets {variable}: {}", env[variable]);
        }
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
