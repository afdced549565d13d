//! The roles' grants beyond the tables' keys: queues deny requests without TLS, email goes out
//! only from the receipt sender, the Kafka consumer reads its topic in its own group, the API
//! sends to the payments queue alone and cannot be invoked outside its function URL, and each
//! stream role reaches its own park queue alone.

use serde_json::{json, Value};

use crate::cfn::{references, resolve_arn};
use crate::iam::{action_matches, all_statements, grants, like, statements};
use crate::{list, template, API, CONSUMER, KAFKA, RELAY, SWEEPER};

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

/// Whether `value` (a statement's `Resource`, a permission's `FunctionName`) may name the payments
/// API: a reference to its function or alias, a string with its name, or a wildcard. Read
/// generously: a grant the test cannot place counts as one on the API.
fn may_name_the_api(value: &Value) -> bool {
    let mut refs = std::collections::BTreeSet::new();
    references(value, &mut refs);
    let text = value.to_string();
    refs.contains("PaymentsApiFunction") || text.contains('*') || text.contains("payments-api")
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
