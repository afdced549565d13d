//! Resources from a deployment template (CloudFormation or SAM, JSON): every
//! `AWS::DynamoDB::Table`, `AWS::SQS::Queue` and `AWS::Kinesis::Stream` is created locally with
//! its key schema, stream, TTL, retention, visibility timeout, redrive policy (`maxReceiveCount`)
//! and shards, and an `AWS::Lambda::EventSourceMapping` is read so the emulator applies the
//! deployment's numbers. The template is the caller's: [`crate::template`] for a user's, an
//! application's own crate for its own.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::operation::create_table::builders::CreateTableFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;

use crate::error::{Result, ResultExt};

/// The SDK clients the local pipeline uses.
#[derive(Debug, Clone)]
pub struct Clients {
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// DynamoDB Streams.
    pub streams: aws_sdk_dynamodbstreams::Client,
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
    /// SES v2.
    pub ses: aws_sdk_sesv2::Client,
    /// Kinesis Data Streams.
    pub kinesis: aws_sdk_kinesis::Client,
}

impl Clients {
    /// Clients for the local AWS (or `AWS_ENDPOINT_URL`).
    pub async fn local() -> Clients {
        let sdk = effectively_once_dynamodb::testing::sdk_config().await;
        Clients {
            dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
            streams: aws_sdk_dynamodbstreams::Client::new(&sdk),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            ses: aws_sdk_sesv2::Client::new(&sdk),
            kinesis: aws_sdk_kinesis::Client::new(&sdk),
        }
    }
}

/// A local name from a logical id: `LedgerTable` is `ledger`, `PaymentsDeadLetterQueue` is
/// `payments-dead-letter`, behind `prefix-` when a prefix is given (tests use their own).
pub fn local_name(prefix: &str, logical_id: &str) -> String {
    let base = logical_id.trim_end_matches("Table").trim_end_matches("Queue");
    let mut name = String::new();
    for (i, c) in base.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('-');
        }
        name.push(c.to_ascii_lowercase());
    }
    if prefix.is_empty() {
        name
    } else {
        format!("{prefix}-{name}")
    }
}

/// The properties of `template`'s resources of type `kind`, by logical id.
pub fn resources_in(template: &Value, kind: &str) -> Result<BTreeMap<String, Value>> {
    let all = template["Resources"].as_object().ok_or("template has no Resources")?;
    Ok(all.iter().filter(|(_, r)| r["Type"] == kind).map(|(id, r)| (id.clone(), r["Properties"].clone())).collect())
}

fn text<'a>(v: &'a Value, field: &str) -> Result<&'a str> {
    v[field].as_str().ok_or_else(|| format!("template: {field} missing").into())
}

/// Plain numbers, or a `Ref` to a parameter's default.
pub fn number(template: &Value, v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        Value::Object(o) => {
            let param = o.get("Ref")?.as_str()?;
            number(template, &template["Parameters"][param]["Default"])
        }
        _ => None,
    }
}

/// An `AWS::Lambda::EventSourceMapping` of the template, read so the emulator applies the same
/// numbers as the deployment. Absent properties take Lambda's documented defaults
/// (<https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html>: `BatchSize` 100 for
/// streams, `MaximumRetryAttempts` and `MaximumRecordAgeInSeconds` -1, bisect off;
/// <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-parameters.html>: `BatchSize` 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingSettings {
    /// `BatchSize`.
    pub batch_size: i32,
    /// `FunctionResponseTypes` holds `ReportBatchItemFailures`: without it Lambda ignores a
    /// partial batch response.
    pub report_batch_item_failures: bool,
    /// `BisectBatchOnFunctionError` (streams).
    pub bisect_batch_on_function_error: bool,
    /// `MaximumRetryAttempts` (streams); `None` is -1, retry until the record expires.
    pub maximum_retry_attempts: Option<u32>,
    /// `MaximumRecordAgeInSeconds` (streams); `None` is -1, no limit but the stream's retention.
    pub maximum_record_age_seconds: Option<u64>,
    /// The `eventName` values the `FilterCriteria` let through; empty when nothing is filtered.
    pub event_names: Vec<String>,
    /// The logical id of `DestinationConfig.OnFailure.Destination` (streams).
    pub on_failure: Option<String>,
}

impl MappingSettings {
    /// An SQS mapping with `ReportBatchItemFailures` (Lambda's `BatchSize` of 10): what a
    /// function that answers per message is deployed with, and what the emulator applies unless
    /// a template says otherwise.
    pub fn sqs() -> Self {
        MappingSettings {
            batch_size: 10,
            report_batch_item_failures: true,
            bisect_batch_on_function_error: false,
            maximum_retry_attempts: None,
            maximum_record_age_seconds: None,
            event_names: Vec::new(),
            on_failure: None,
        }
    }

    /// A DynamoDB Streams mapping with `ReportBatchItemFailures` and bisection, 10 records a
    /// batch, retried until the record is 6 h old: well inside the stream's 24 h retention, so a
    /// discarded batch can still be replayed from the stream.
    pub fn dynamodb_stream() -> Self {
        MappingSettings {
            bisect_batch_on_function_error: true,
            maximum_record_age_seconds: Some(21_600),
            ..Self::sqs()
        }
    }

    /// A Kinesis or Kafka mapping with `ReportBatchItemFailures` and bisection, 100 records a
    /// batch (Lambda's default), 5 retries and at most an hour's age, so a poison record holds
    /// its shard or partition back for minutes, not for the stream's retention.
    pub fn kinesis() -> Self {
        MappingSettings {
            batch_size: 100,
            maximum_retry_attempts: Some(5),
            maximum_record_age_seconds: Some(3600),
            ..Self::dynamodb_stream()
        }
    }
}

/// The settings of `template`'s mapping whose `EventSourceArn` is an attribute of the resource
/// `source` (a queue's, a table's or a stream's logical id) or the parameter `source` (a Kafka
/// cluster's ARN).
pub fn mapping_settings(template: &Value, source: &str) -> Result<MappingSettings> {
    let mappings = resources_in(template, "AWS::Lambda::EventSourceMapping")?;
    let (_, props) = mappings
        .iter()
        .find(|(_, p)| p["EventSourceArn"]["Fn::GetAtt"][0] == source || p["EventSourceArn"]["Ref"] == source)
        .ok_or_else(|| format!("template has no event source mapping on {source}"))?;
    let is_queue = template["Resources"][source]["Type"] == "AWS::SQS::Queue";
    let limit = |field: &str| number(template, &props[field]).filter(|n| *n >= 0);
    let mut event_names = Vec::new();
    for filter in props["FilterCriteria"]["Filters"].as_array().into_iter().flatten() {
        let pattern: Value =
            serde_json::from_str(filter["Pattern"].as_str().unwrap_or("{}")).context("FilterCriteria pattern")?;
        match pattern["eventName"].as_array() {
            Some(names) => event_names.extend(names.iter().filter_map(|n| n.as_str().map(str::to_owned))),
            // Filters are OR'ed: one without an eventName condition lets every name through.
            None => {
                event_names.clear();
                break;
            }
        }
    }
    Ok(MappingSettings {
        batch_size: number(template, &props["BatchSize"]).unwrap_or(if is_queue { 10 } else { 100 }) as i32,
        report_batch_item_failures: props["FunctionResponseTypes"]
            .as_array()
            .is_some_and(|types| types.iter().any(|t| t == "ReportBatchItemFailures")),
        bisect_batch_on_function_error: props["BisectBatchOnFunctionError"].as_bool().unwrap_or(false),
        maximum_retry_attempts: limit("MaximumRetryAttempts").map(|n| n as u32),
        maximum_record_age_seconds: limit("MaximumRecordAgeInSeconds").map(|n| n as u64),
        event_names,
        on_failure: props["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"][0].as_str().map(str::to_owned),
    })
}

/// The URLs of the template's queues under `prefix` that exist, by logical id.
pub async fn existing_queues(
    sqs: &aws_sdk_sqs::Client,
    template: &Value,
    prefix: &str,
) -> Result<BTreeMap<String, String>> {
    let mut urls = BTreeMap::new();
    for id in resources_in(template, "AWS::SQS::Queue")?.into_keys() {
        let name = local_name(prefix, &id);
        match sqs.get_queue_url().queue_name(&name).send().await {
            Ok(out) => {
                urls.insert(id, out.queue_url().unwrap_or_default().to_owned());
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_queue_does_not_exist()) => {}
            Err(e) => return Err(e).context(format!("get queue url {name}")),
        }
    }
    Ok(urls)
}

/// Creates every `AWS::SQS::Queue` of `template` with its retention, visibility timeout and
/// redrive policy (those that exist are kept); returns their URLs by logical id.
pub async fn create_queues(
    sqs: &aws_sdk_sqs::Client,
    template: &Value,
    prefix: &str,
) -> Result<BTreeMap<String, String>> {
    let queues = resources_in(template, "AWS::SQS::Queue")?;
    let mut urls = BTreeMap::new();
    // Dead-letter queues first: a redrive policy names its target's ARN.
    let mut ordered: Vec<_> = queues.iter().collect();
    ordered.sort_by_key(|(_, p)| p.get("RedrivePolicy").is_some());
    for (id, props) in ordered {
        let name = local_name(prefix, id);
        let mut request = sqs.create_queue().queue_name(&name);
        if let Some(n) = number(template, &props["MessageRetentionPeriod"]) {
            request = request.attributes(QueueAttributeName::MessageRetentionPeriod, n.to_string());
        }
        if let Some(n) = number(template, &props["VisibilityTimeout"]) {
            request = request.attributes(QueueAttributeName::VisibilityTimeout, n.to_string());
        }
        if let Some(policy) = props.get("RedrivePolicy") {
            let target = policy["deadLetterTargetArn"]["Fn::GetAtt"][0].as_str().ok_or("redrive target missing")?;
            let target_url: &String = urls.get(target).ok_or("redrive target not created")?;
            let arn = queue_arn(sqs, target_url).await?;
            let max_receive_count = number(template, &policy["maxReceiveCount"]).unwrap_or(5);
            let redrive = serde_json::json!({"deadLetterTargetArn": arn, "maxReceiveCount": max_receive_count});
            request = request.attributes(QueueAttributeName::RedrivePolicy, redrive.to_string());
        }
        let out = request.send().await.context(format!("create queue {name}"))?;
        urls.insert(id.clone(), out.queue_url().unwrap_or_default().to_owned());
    }
    Ok(urls)
}

/// Creates a Kinesis stream of `shards` shards (one that exists is kept) and waits until it is
/// active: records cannot be put or read before.
pub async fn create_stream(kinesis: &aws_sdk_kinesis::Client, name: &str, shards: i32) -> Result<()> {
    if let Err(e) = kinesis.create_stream().stream_name(name).shard_count(shards).send().await {
        if !e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) {
            return Err(e).context(format!("create stream {name}"));
        }
    }
    for _ in 0..100 {
        let out = kinesis.describe_stream_summary().stream_name(name).send().await.context("describe stream")?;
        let status = out.stream_description_summary().map(|d| d.stream_status().clone());
        if status == Some(aws_sdk_kinesis::types::StreamStatus::Active) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(format!("stream {name} never became active").into())
}

/// A queue's ARN.
pub async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<String> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .context("queue attributes")?;
    let arn = out.attributes().and_then(|a| a.get(&QueueAttributeName::QueueArn)).cloned();
    arn.ok_or_else(|| "no QueueArn".into())
}

pub async fn create_table(dynamodb: &aws_sdk_dynamodb::Client, name: &str, props: &Value) -> Result<()> {
    let request = table_request(dynamodb.create_table().table_name(name), props)?;
    match request.send().await {
        Ok(_) => {}
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => return Ok(()),
        Err(e) => {
            return Err(effectively_once_dynamodb::classify_sdk_error("CreateTable", e))
                .context(format!("create table {name}"))
        }
    }
    let Some(attribute) = props["TimeToLiveSpecification"]["AttributeName"].as_str() else { return Ok(()) };
    let ttl = TimeToLiveSpecification::builder().enabled(true).attribute_name(attribute).build()?;
    let request = dynamodb.update_time_to_live().table_name(name).time_to_live_specification(ttl);
    if let Err(e) = request.send().await {
        return Err(effectively_once_dynamodb::classify_sdk_error("UpdateTimeToLive", e))
            .context(format!("TTL on {name}"));
    }
    Ok(())
}

/// A `CreateTable` request with the template's attributes, keys, global secondary indexes and
/// stream.
fn table_request(mut request: CreateTableFluentBuilder, props: &Value) -> Result<CreateTableFluentBuilder> {
    request = request.billing_mode(BillingMode::PayPerRequest);
    for def in props["AttributeDefinitions"].as_array().ok_or("AttributeDefinitions missing")? {
        let attribute = AttributeDefinition::builder()
            .attribute_name(text(def, "AttributeName")?)
            .attribute_type(ScalarAttributeType::from(text(def, "AttributeType")?))
            .build()?;
        request = request.attribute_definitions(attribute);
    }
    for key in props["KeySchema"].as_array().ok_or("KeySchema missing")? {
        request = request.key_schema(key_element(key)?);
    }
    for index in props["GlobalSecondaryIndexes"].as_array().into_iter().flatten() {
        request = request.global_secondary_indexes(global_index(index)?);
    }
    if let Some(view) = props["StreamSpecification"]["StreamViewType"].as_str() {
        let stream = StreamSpecification::builder().stream_enabled(true).stream_view_type(StreamViewType::from(view));
        request = request.stream_specification(stream.build()?);
    }
    Ok(request)
}

fn key_element(key: &Value) -> Result<KeySchemaElement> {
    let element = KeySchemaElement::builder()
        .attribute_name(text(key, "AttributeName")?)
        .key_type(KeyType::from(text(key, "KeyType")?));
    Ok(element.build()?)
}

/// A template's `GlobalSecondaryIndexes` entry: its name, keys and projection (an on-demand
/// table's index has no throughput of its own).
fn global_index(index: &Value) -> Result<GlobalSecondaryIndex> {
    let mut built = GlobalSecondaryIndex::builder().index_name(text(index, "IndexName")?);
    for key in index["KeySchema"].as_array().ok_or("GlobalSecondaryIndexes: KeySchema missing")? {
        built = built.key_schema(key_element(key)?);
    }
    let projection = &index["Projection"];
    let mut kind = Projection::builder().projection_type(ProjectionType::from(text(projection, "ProjectionType")?));
    for attribute in projection["NonKeyAttributes"].as_array().into_iter().flatten() {
        kind = kind.non_key_attributes(attribute.as_str().ok_or("NonKeyAttributes: not a name")?);
    }
    Ok(built.projection(kind.build()).build()?)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    #[test]
    fn names_follow_logical_ids() {
        assert_eq!(super::local_name("", "LedgerTable"), "ledger");
        assert_eq!(super::local_name("", "PaymentsDeadLetterQueue"), "payments-dead-letter");
        assert_eq!(super::local_name("t1", "ReceiptsFailureQueue"), "t1-receipts-failure");
        assert_eq!(super::local_name("", "KinesisOrdersTable"), "kinesis-orders");
    }

    /// A user's template: a Kinesis mapping with every setting, and a queue's with none.
    fn template() -> Value {
        json!({
            "Parameters": {"Retries": {"Type": "Number", "Default": 5}},
            "Resources": {
                "OrdersStream": {"Type": "AWS::Kinesis::Stream"},
                "OrdersQueue": {"Type": "AWS::SQS::Queue"},
                "OrdersMapping": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {
                    "EventSourceArn": {"Fn::GetAtt": ["OrdersStream", "Arn"]},
                    "BisectBatchOnFunctionError": true, "MaximumRetryAttempts": {"Ref": "Retries"},
                    "MaximumRecordAgeInSeconds": 3600, "FunctionResponseTypes": ["ReportBatchItemFailures"],
                    "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": ["OrdersFailureQueue", "Arn"]}}}}},
                "QueueMapping": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {
                    "EventSourceArn": {"Fn::GetAtt": ["OrdersQueue", "Arn"]}}}
            }
        })
    }

    #[test]
    fn mappings_are_read_from_the_template_given() {
        let orders = super::mapping_settings(&template(), "OrdersStream").unwrap();
        assert!(orders.report_batch_item_failures && orders.bisect_batch_on_function_error);
        assert_eq!((orders.batch_size, orders.maximum_retry_attempts), (100, Some(5)));
        assert_eq!(orders.maximum_record_age_seconds, Some(3600));
        assert_eq!(orders.on_failure.as_deref(), Some("OrdersFailureQueue"));
        assert_eq!(
            orders,
            super::MappingSettings { on_failure: orders.on_failure.clone(), ..super::MappingSettings::kinesis() }
        );
        // Absent properties take Lambda's defaults: 10 a batch on a queue, answers not read.
        let queue = super::mapping_settings(&template(), "OrdersQueue").unwrap();
        assert_eq!(
            (queue.batch_size, queue.report_batch_item_failures, queue.maximum_retry_attempts),
            (10, false, None)
        );
        assert!(super::mapping_settings(&template(), "Nowhere").is_err());
    }
}
