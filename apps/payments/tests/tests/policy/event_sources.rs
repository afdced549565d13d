//! The event sources and their queues: the receipts stream retried until the record age limit,
//! the Kafka mapping's answers and failure queue, the Kafka resources made only with a cluster,
//! the queue type switching the payments queue, its DLQ and its mapping together, and the DLQ's
//! retention.

use receipts_relay::Alert;
use serde_json::json;

use crate::cfn::{function_name, references, resolve};
use crate::monitoring::{alarm_actions, alarm_on, metrics_namespace};
use crate::{template, KAFKA_CONDITION};

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
