//! A user's own template on the local AWS: its tables, queues, Kinesis streams and SES email
//! identities created ([`crate::resources`]), its functions'
//! environment resolved to the local names, and its SQS event sources, so a function of the
//! reader's crate runs under the local AWS (`local up --template`, `local run --template`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{Result, ResultExt};
use crate::esm::SqsMapping;
use crate::invoke::SqsFunction;
use crate::resources::{self, local_name, number, resources_in, Clients};

/// The function types whose `Environment` and events are read.
const FUNCTIONS: [&str; 2] = ["AWS::Serverless::Function", "AWS::Lambda::Function"];

/// One user template's resources on the local AWS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Own {
    /// Table names by logical id.
    pub tables: BTreeMap<String, String>,
    /// Queue URLs by logical id.
    pub queues: BTreeMap<String, String>,
    /// Kinesis stream names by logical id.
    pub streams: BTreeMap<String, String>,
    /// The email identities verified in the local SES (`AWS::SES::EmailIdentity`).
    pub senders: Vec<String>,
    /// Each function's environment (`Environment.Variables`, SAM's `Globals` first) by logical
    /// id, its `Ref`s and `Fn::GetAtt`s resolved to the local names.
    pub functions: BTreeMap<String, BTreeMap<String, String>>,
    /// The SQS event sources: which function reads which queue, how.
    pub sqs_sources: Vec<SqsSource>,
    /// `FUNCTION.VARIABLE` for each environment variable whose value has no local meaning (an
    /// ARN, `Fn::Sub`): left out of the environment.
    pub unresolved: Vec<String>,
}

/// An SQS event source of the template: a SAM function's `Events` entry of `Type: SQS`, or an
/// `AWS::Lambda::EventSourceMapping` on a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsSource {
    /// The function's logical id.
    pub function: String,
    /// The queue's logical id.
    pub queue: String,
    /// `BatchSize` (10 by default, as Lambda's).
    pub batch_size: i32,
    /// `FunctionResponseTypes` holds `ReportBatchItemFailures`.
    pub report_batch_item_failures: bool,
}

/// Creates every table, queue, Kinesis stream and SES email identity of `template` (a
/// CloudFormation or SAM template, JSON), named `prefix-...` when a prefix is given (those that
/// exist are kept).
pub async fn up(clients: &Clients, template: &str, prefix: &str) -> Result<Own> {
    let template: Value = serde_json::from_str(template).context("template")?;
    for (id, props) in resources_in(&template, "AWS::DynamoDB::Table")? {
        resources::create_table(&clients.dynamodb, &local_name(prefix, &id), &props).await?;
    }
    let queues = resources::create_queues(&clients.sqs, &template, prefix).await?;
    for (id, props) in resources_in(&template, "AWS::Kinesis::Stream")? {
        let shards = number(&template, &props["ShardCount"]).unwrap_or(1) as i32;
        resources::create_stream(&clients.kinesis, &local_name(prefix, &id), shards).await?;
    }
    let own = named(&template, prefix, queues)?;
    for address in &own.senders {
        clients.ses.create_email_identity().email_identity(address).send().await.ok();
    }
    Ok(own)
}

/// What [`up`] created from `template` under `prefix`, looked up without creating anything: a
/// queue of the template that does not exist is an error saying to run `up` first.
pub async fn lookup(clients: &Clients, template: &str, prefix: &str) -> Result<Own> {
    let template: Value = serde_json::from_str(template).context("template")?;
    let queues = resources::existing_queues(&clients.sqs, &template, prefix).await?;
    if let Some(id) = resources_in(&template, "AWS::SQS::Queue")?.into_keys().find(|id| !queues.contains_key(id)) {
        let name = local_name(prefix, &id);
        return Err(format!("no local queue {name}: run `local up --template` first").into());
    }
    named(&template, prefix, queues)
}

/// The template's resources under `prefix` by name, with the queues' URLs by logical id, and
/// each function's environment resolved against them.
fn named(template: &Value, prefix: &str, queues: BTreeMap<String, String>) -> Result<Own> {
    let mut own = Own { queues, ..Own::default() };
    for id in resources_in(template, "AWS::DynamoDB::Table")?.into_keys() {
        own.tables.insert(id.clone(), local_name(prefix, &id));
    }
    for id in resources_in(template, "AWS::Kinesis::Stream")?.into_keys() {
        own.streams.insert(id.clone(), local_name(prefix, &id));
    }
    for (_, props) in resources_in(template, "AWS::SES::EmailIdentity")? {
        let Some(address) = resolve(template, &own, &props["EmailIdentity"]) else { continue };
        own.senders.push(address);
    }
    for kind in FUNCTIONS {
        for (id, props) in resources_in(template, kind)? {
            let globals = &template["Globals"]["Function"]["Environment"]["Variables"];
            let mut env = BTreeMap::new();
            for variables in [globals, &props["Environment"]["Variables"]] {
                for (name, value) in variables.as_object().into_iter().flatten() {
                    match resolve(template, &own, value) {
                        Some(value) => drop(env.insert(name.clone(), value)),
                        None => own.unresolved.push(format!("{id}.{name}")),
                    }
                }
            }
            own.functions.insert(id, env);
        }
    }
    own.sqs_sources = sqs_sources(template)?;
    Ok(own)
}

/// Deletes what exists of `template`'s tables, queues and streams under `prefix`, creating
/// nothing (email identities stay).
pub async fn down_prefix(clients: &Clients, template: &str, prefix: &str) -> Result<()> {
    let template: Value = serde_json::from_str(template).context("template")?;
    // Tables first: their names need no lookup, so the first request deletes.
    for id in resources_in(&template, "AWS::DynamoDB::Table")?.into_keys() {
        clients.dynamodb.delete_table().table_name(local_name(prefix, &id)).send().await.ok();
    }
    let queues = resources::existing_queues(&clients.sqs, &template, prefix).await?;
    down(clients, &named(&template, prefix, queues)?).await;
    Ok(())
}

/// Deletes what [`up`] created (email identities stay).
pub async fn down(clients: &Clients, own: &Own) {
    for table in own.tables.values() {
        clients.dynamodb.delete_table().table_name(table).send().await.ok();
    }
    for url in own.queues.values() {
        clients.sqs.delete_queue().queue_url(url).send().await.ok();
    }
    for stream in own.streams.values() {
        clients.kinesis.delete_stream().stream_name(stream).send().await.ok();
    }
}

/// What [`drain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Messages delivered (a redelivery counts again).
    pub deliveries: usize,
    /// Deliveries the function reported failed, or whose batch failed.
    pub failed: usize,
}

/// Runs `mappings` into `function` until their queues are empty: nothing visible and nothing in
/// flight (a message failed for good leaves through its queue's redrive policy). Gives up after
/// `limit`, as a queue without a DLQ would redeliver a poison message for ever.
pub async fn drain<F: SqsFunction>(
    clients: &Clients,
    mappings: &[SqsMapping],
    function: &F,
    limit: std::time::Duration,
) -> Result<Drained> {
    let started = std::time::Instant::now();
    let mut drained = Drained::default();
    loop {
        let mut received = 0;
        for mapping in mappings {
            let poll = crate::esm::poll_sqs(clients, mapping, function).await?;
            (received, drained.deliveries, drained.failed) =
                (received + poll.received, drained.deliveries + poll.received, drained.failed + poll.failed);
        }
        if received > 0 {
            continue;
        }
        let mut left = 0;
        for mapping in mappings {
            left += crate::esm::queue_depth(clients, &mapping.queue_url).await?;
        }
        if left == 0 {
            return Ok(drained);
        }
        if started.elapsed() > limit {
            return Err(format!("{left} messages still on the queues after {limit:?}").into());
        }
        // Failed messages come back after the mapping's visibility timeout.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

impl Own {
    /// The environment of `function` (every function's, merged, when `None`) and the local
    /// AWS's, as `cargo lambda watch --env-file` reads it.
    pub fn env_file(&self, function: Option<&str>, endpoint: &str) -> Result<String> {
        let mut variables = BTreeMap::new();
        match function {
            Some(function) => {
                let env =
                    self.functions.get(function).ok_or_else(|| format!("the template has no function {function}"))?;
                variables.extend(env.clone());
            }
            None => self.functions.values().for_each(|env| variables.extend(env.clone())),
        }
        let local = [
            ("AWS_ENDPOINT_URL", endpoint),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
        ];
        variables.extend(local.map(|(k, v)| (k.to_owned(), v.to_owned())));
        Ok(variables.iter().map(|(k, v)| format!("{k}={v}\n")).collect())
    }

    /// The SQS mappings of `function` (every function's when `None`), on the local queues.
    pub fn sqs_mappings(&self, function: Option<&str>) -> Result<Vec<SqsMapping>> {
        let mut mappings = Vec::new();
        for source in self.sqs_sources.iter().filter(|s| function.is_none_or(|f| f == s.function)) {
            let url = self.queues.get(&source.queue).ok_or_else(|| format!("no queue {}", source.queue))?;
            let mut mapping = SqsMapping::new(url);
            mapping.batch_size = source.batch_size;
            mapping.report_batch_item_failures = source.report_batch_item_failures;
            mappings.push(mapping);
        }
        Ok(mappings)
    }
}

/// A value of the template as the function would see it locally: strings and numbers as they
/// are, `Ref` to a table (its name), a queue (its URL), a stream (its name) or a parameter (its
/// default), `Fn::GetAtt` of a queue's `QueueUrl` or `QueueName`; `None` for anything else.
fn resolve(template: &Value, own: &Own, value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Object(o) => {
            if let Some(id) = o.get("Ref").and_then(Value::as_str) {
                if id == "AWS::Region" {
                    return Some("us-east-1".into());
                }
                let found = own.tables.get(id).or_else(|| own.queues.get(id)).or_else(|| own.streams.get(id));
                return found.cloned().or_else(|| resolve(template, own, &template["Parameters"][id]["Default"]));
            }
            let (id, attribute) = get_att(value)?;
            let url = own.queues.get(id)?;
            match attribute {
                "QueueUrl" => Some(url.clone()),
                "QueueName" => url.rsplit('/').next().map(str::to_owned),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The logical id and attribute of an `Fn::GetAtt`, in its list or its `Id.Attribute` form.
fn get_att(value: &Value) -> Option<(&str, &str)> {
    match &value["Fn::GetAtt"] {
        Value::String(s) => s.split_once('.'),
        target => Some((target[0].as_str()?, target[1].as_str()?)),
    }
}

/// The template's SQS event sources, in both forms.
fn sqs_sources(template: &Value) -> Result<Vec<SqsSource>> {
    let queues = resources_in(template, "AWS::SQS::Queue")?;
    let source = |function: &str, arn: &Value, props: &Value| {
        let queue = get_att(arn).map(|(id, _)| id).filter(|q| queues.contains_key(*q))?;
        Some(SqsSource {
            function: function.to_owned(),
            queue: queue.to_owned(),
            batch_size: number(template, &props["BatchSize"]).unwrap_or(10) as i32,
            report_batch_item_failures: props["FunctionResponseTypes"]
                .as_array()
                .is_some_and(|types| types.iter().any(|t| t == "ReportBatchItemFailures")),
        })
    };
    let mut sources = Vec::new();
    for (id, props) in resources_in(template, "AWS::Serverless::Function")? {
        for event in props["Events"].as_object().into_iter().flatten().map(|(_, e)| e) {
            if event["Type"] == "SQS" {
                sources.extend(source(&id, &event["Properties"]["Queue"], &event["Properties"]));
            }
        }
    }
    for (_, props) in resources_in(template, "AWS::Lambda::EventSourceMapping")? {
        if let Some(function) = props["FunctionName"]["Ref"].as_str() {
            sources.extend(source(function, &props["EventSourceArn"], &props));
        }
    }
    Ok(sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = r#"{
      "Parameters": {"Sender": {"Type": "String", "Default": "orders@example.com"}},
      "Globals": {"Function": {"Environment": {"Variables": {"LOG_LEVEL": "info"}}}},
      "Resources": {
        "OrdersQueue": {"Type": "AWS::SQS::Queue"},
        "OrdersTable": {"Type": "AWS::DynamoDB::Table"},
        "OrdersFunction": {"Type": "AWS::Serverless::Function", "Properties": {
          "Environment": {"Variables": {"ORDERS_TABLE": {"Ref": "OrdersTable"}, "FROM": {"Ref": "Sender"},
                                        "QUEUE": {"Fn::GetAtt": ["OrdersQueue", "QueueUrl"]}, "RETRIES": 3}},
          "Events": {"Orders": {"Type": "SQS", "Properties": {"Queue": {"Fn::GetAtt": ["OrdersQueue", "Arn"]},
            "BatchSize": 5, "FunctionResponseTypes": ["ReportBatchItemFailures"]}}}}},
        "Other": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {
          "FunctionName": {"Ref": "OrdersFunction"}, "EventSourceArn": {"Fn::GetAtt": "OrdersQueue.Arn"}}}
      }
    }"#;

    fn own() -> Own {
        let mut own = Own::default();
        own.tables.insert("OrdersTable".into(), "t-orders".into());
        own.queues.insert("OrdersQueue".into(), "http://127.0.0.1:4566/000000000000/t-orders".into());
        own
    }

    #[test]
    fn references_resolve_to_the_local_names_and_parameters_to_their_defaults() {
        let template: Value = serde_json::from_str(TEMPLATE).unwrap();
        let own = own();
        let at = |v: Value| resolve(&template, &own, &v);
        assert_eq!(at(serde_json::json!({"Ref": "OrdersTable"})).as_deref(), Some("t-orders"));
        assert_eq!(at(serde_json::json!({"Ref": "Sender"})).as_deref(), Some("orders@example.com"));
        assert_eq!(at(serde_json::json!({"Fn::GetAtt": ["OrdersQueue", "QueueName"]})).as_deref(), Some("t-orders"));
        assert_eq!(at(serde_json::json!(3)).as_deref(), Some("3"));
        assert_eq!(at(serde_json::json!({"Fn::GetAtt": ["OrdersTable", "StreamArn"]})), None);
        assert_eq!(at(serde_json::json!({"Ref": "Nowhere"})), None);
    }

    #[test]
    fn both_forms_of_sqs_event_source_are_read_with_lambdas_defaults() {
        let sources = sqs_sources(&serde_json::from_str(TEMPLATE).unwrap()).unwrap();
        let read = |s: &SqsSource| (s.function.clone(), s.queue.clone(), s.batch_size, s.report_batch_item_failures);
        let read: Vec<_> = sources.iter().map(read).collect();
        assert_eq!(
            read.iter().map(|(f, q, b, r)| (f.as_str(), q.as_str(), *b, *r)).collect::<Vec<_>>(),
            [("OrdersFunction", "OrdersQueue", 5, true), ("OrdersFunction", "OrdersQueue", 10, false)]
        );
    }

    #[test]
    fn the_env_file_holds_the_functions_variables_and_the_local_endpoint() {
        let mut own = own();
        own.functions.insert("OrdersFunction".into(), [("ORDERS_TABLE".to_owned(), "t-orders".to_owned())].into());
        let env = own.env_file(Some("OrdersFunction"), "http://127.0.0.1:4566").unwrap();
        assert!(env.contains("ORDERS_TABLE=t-orders\n") && env.contains("AWS_ENDPOINT_URL=http://127.0.0.1:4566\n"));
        assert!(own.env_file(Some("Missing"), "x").is_err());
    }
}
