//! The park destination replayed after a fix. A stream driver (Kafka, Kinesis, DynamoDB
//! Streams) parks a record that failed permanently on an SQS queue, the function's
//! `PARK_QUEUE_URL`, before its position passes it: one message per record, holding the record
//! as Lambda delivered it ([`Parked`]). A replay rebuilds each into a one-record event of its
//! trigger, invokes the function, and deletes the message only when the answer does not name
//! the record: it took effect, or the function decided it again (parked it anew, say). Unlike
//! the on-failure destinations, the record itself is in the message: it replays after the
//! stream or topic has dropped it.

use std::collections::HashSet;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::kafka::{KafkaEvent, KafkaRecord};
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use effectively_once_lambda::kafka::topic_partition;
use serde::Deserialize;
use serde_json::Value;

use super::replay::{sweep, Replayed, Verdict};
use crate::error::{report, Result};
use crate::invoke::{KafkaFunction, KinesisFunction, StreamFunction};
use crate::resources::Clients;

/// A parked message's body, as the drivers' park destination writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Parked {
    /// `aws:kafka`, `aws:kinesis` or `aws:dynamodb`.
    pub trigger: String,
    /// The event's source ARN, when it had one.
    pub event_source_arn: Option<String>,
    /// Where the record sits in its source: `topic_partition` and `offset` (Kafka), `shard_id`
    /// and `sequence_number` (Kinesis), `sequence_number` (DynamoDB Streams).
    pub coordinates: Value,
    /// Why it was parked, email addresses redacted.
    pub reason: String,
    /// The record exactly as Lambda delivered it, in `aws_lambda_events`' JSON form.
    pub record: Value,
    /// Kafka only: the event's `bootstrapServers`.
    #[serde(default)]
    pub bootstrap_servers: Option<String>,
}

/// A parked record's one-record event, of its trigger.
#[derive(Debug, Clone, PartialEq)]
pub enum Rebuilt {
    /// `{"eventSource": "aws:kafka", "records": {"<topic-partition>": [record]}, ...}`.
    Kafka(KafkaEvent),
    /// `{"Records": [record]}`.
    Kinesis(KinesisEvent),
    /// `{"Records": [record]}`.
    DynamoDb(Event),
}

impl Parked {
    /// Which record, as an operator finds it in its source: `aws:kafka orders-0 offset 42`,
    /// `aws:kinesis shardId-000000000000:4959...`, `aws:dynamodb 1234...`.
    pub fn which(&self) -> String {
        let at = |name: &str| match &self.coordinates[name] {
            Value::String(s) => s.clone(),
            Value::Null => "?".to_owned(),
            other => other.to_string(),
        };
        match self.trigger.as_str() {
            "aws:kafka" => format!("aws:kafka {} offset {}", at("topic_partition"), at("offset")),
            "aws:kinesis" => format!("aws:kinesis {}:{}", at("shard_id"), at("sequence_number")),
            trigger => format!("{trigger} {}", at("sequence_number")),
        }
    }

    /// The one-record event of its trigger, and the identifier an answer names the record by
    /// (`topic-partition offset N`, or the sequence number). `Err` when the trigger is unknown,
    /// the record does not read as one of its trigger, or it is not where the coordinates say.
    pub fn rebuild(&self) -> std::result::Result<(Rebuilt, String), String> {
        let disagree = |record: String| format!("the coordinates name {}, the record is {record}", self.which());
        match self.trigger.as_str() {
            "aws:kafka" => {
                let record: KafkaRecord = self.record_as()?;
                let partition = topic_partition(&record);
                let id = format!("{partition} offset {}", record.offset);
                if self.coordinates["topic_partition"] != partition.as_str()
                    || self.coordinates["offset"] != record.offset
                {
                    return Err(disagree(id));
                }
                let mut event = KafkaEvent::default();
                event.event_source = Some("aws:kafka".to_owned());
                event.event_source_arn = self.event_source_arn.clone();
                event.bootstrap_servers = self.bootstrap_servers.clone();
                event.records.insert(partition, vec![record]);
                Ok((Rebuilt::Kafka(event), id))
            }
            "aws:kinesis" => {
                let record: KinesisEventRecord = self.record_as()?;
                let sequence = record.kinesis.sequence_number.clone();
                let shard = record.event_id.as_deref().and_then(|id| id.split_once(':')).map(|(shard, _)| shard);
                if self.coordinates["sequence_number"] != sequence.as_str()
                    || self.coordinates["shard_id"].as_str() != shard
                {
                    return Err(disagree(format!("{}:{sequence}", shard.unwrap_or("?"))));
                }
                let mut event = KinesisEvent::default();
                event.records = vec![record];
                Ok((Rebuilt::Kinesis(event), sequence))
            }
            "aws:dynamodb" => {
                let record: EventRecord = self.record_as()?;
                let sequence = record.change.sequence_number.clone().unwrap_or_default();
                if self.coordinates["sequence_number"] != sequence.as_str() {
                    return Err(disagree(sequence));
                }
                let mut event = Event::default();
                event.records = vec![record];
                Ok((Rebuilt::DynamoDb(event), sequence))
            }
            other => Err(format!("a trigger no stream driver parks for: {other:?}")),
        }
    }

    fn record_as<R: serde::de::DeserializeOwned>(&self) -> std::result::Result<R, String> {
        serde_json::from_value(self.record.clone())
            .map_err(|e| format!("the record does not read as {}: {e}", self.trigger))
    }
}

/// The functions parked records go back to, by trigger; a record of a trigger with none is
/// kept. A function under `cargo lambda watch` ([`crate::invoke::Http`]) would read any event
/// as its own trigger's (a Kinesis event read as a Kafka event has no records, and its empty
/// answer would pass for success): give it its one trigger, [`Targets::only`].
#[derive(Debug, Clone, Default)]
pub struct Targets<K, N, D> {
    /// For `aws:kafka` records.
    pub kafka: Option<K>,
    /// For `aws:kinesis` records.
    pub kinesis: Option<N>,
    /// For `aws:dynamodb` records.
    pub dynamodb: Option<D>,
}

impl<F: Clone> Targets<F, F, F> {
    /// One in-process function for every trigger, each through that trigger's own driver (a
    /// test's handler of every record type). Never a watched function: it would read every
    /// event as its one trigger's ([`Targets::only`]).
    pub fn all(function: F) -> Self {
        Targets { kafka: Some(function.clone()), kinesis: Some(function.clone()), dynamodb: Some(function) }
    }

    /// One function for the records of `trigger` (`aws:kafka`, `aws:kinesis`, `aws:dynamodb`)
    /// only; the records of any other trigger are kept. `None` for an unknown trigger.
    pub fn only(trigger: &str, function: F) -> Option<Self> {
        let (mut kafka, mut kinesis, mut dynamodb) = (None, None, None);
        match trigger {
            "aws:kafka" => kafka = Some(function),
            "aws:kinesis" => kinesis = Some(function),
            "aws:dynamodb" => dynamodb = Some(function),
            _ => return None,
        }
        Some(Targets { kafka, kinesis, dynamodb })
    }
}

impl<K: KafkaFunction, N: KinesisFunction, D: StreamFunction> Targets<K, N, D> {
    /// Invokes the trigger's function with `event`: the identifiers its answer names failed
    /// (`null` for an empty one), or `Err` for an invocation error or no function to invoke.
    async fn invoke(&self, event: Rebuilt) -> std::result::Result<Vec<String>, String> {
        let none = |trigger: &str| format!("no function to replay {trigger} records into");
        let failed = |e: crate::Error| format!("the function failed: {}", report(&*e));
        let named = |ids: Vec<Option<String>>| -> Vec<String> {
            ids.into_iter().map(|id| id.unwrap_or_else(|| "null".into())).collect()
        };
        match event {
            Rebuilt::Kafka(event) => {
                let function = self.kafka.as_ref().ok_or_else(|| none("aws:kafka"))?;
                let answer = function.invoke(event).await.map_err(failed)?;
                let ids = answer.batch_item_failures.into_iter();
                Ok(ids
                    .map(|f| format!("{} offset {}", f.item_identifier.partition, f.item_identifier.offset))
                    .collect())
            }
            Rebuilt::Kinesis(event) => {
                let function = self.kinesis.as_ref().ok_or_else(|| none("aws:kinesis"))?;
                let answer = function.invoke(event).await.map_err(failed)?;
                Ok(named(answer.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()))
            }
            Rebuilt::DynamoDb(event) => {
                let function = self.dynamodb.as_ref().ok_or_else(|| none("aws:dynamodb"))?;
                let answer = function.invoke(event).await.map_err(failed)?;
                Ok(named(answer.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()))
            }
        }
    }
}

/// Replays every parked message of `queue_url` through `targets`: each is deleted when the
/// function's answer does not name its record, and kept (visible again, in
/// [`Replayed::kept_messages`] with why) when the answer names any failure, the invocation
/// failed, or the message does not rebuild. A record met a second time in one replay (the
/// function parked it anew on this queue) is kept without being replayed again: the replay
/// ends, and the record stays parked for the next one.
pub async fn replay_parked<K: KafkaFunction, N: KinesisFunction, D: StreamFunction>(
    clients: &Clients,
    queue_url: &str,
    targets: &Targets<K, N, D>,
) -> Result<Replayed> {
    let mut seen: HashSet<(String, Option<String>, String)> = HashSet::new();
    sweep(clients, queue_url, async |body: &Value| -> Verdict {
        let parked: Parked = serde_json::from_value(body.clone()).map_err(|e| format!("not a parked record: {e}"))?;
        let which = parked.which();
        let key = (parked.trigger.clone(), parked.event_source_arn.clone(), parked.coordinates.to_string());
        if !seen.insert(key) {
            return Err(format!("{which}: parked again during this replay, for: {}", parked.reason));
        }
        let (event, id) = parked.rebuild().map_err(|e| format!("{which}: {e}"))?;
        let failed = targets.invoke(event).await.map_err(|e| format!("{which}: {e}"))?;
        if failed.is_empty() {
            return Ok(1);
        }
        // Any failure counts: an identifier not in the event fails the whole batch on Lambda.
        let named = if failed == [id] { "it".to_owned() } else { failed.join(", ") };
        Err(format!("{which}: the answer names {named} failed (parked for: {})", parked.reason))
    })
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parked(trigger: &str, coordinates: Value, record: Value) -> Parked {
        serde_json::from_value(json!({
            "trigger": trigger, "event_source_arn": "arn:aws:kafka:us-east-1:000000000000:cluster/c/1",
            "coordinates": coordinates, "reason": "refused", "record": record,
            "bootstrap_servers": "b-1:9092",
        }))
        .unwrap()
    }

    /// A Kafka record in `aws_lambda_events`' JSON form (its timestamp a string of ms), as the
    /// drivers park it.
    fn kafka_record(offset: i64) -> Value {
        json!({"topic": "orders", "partition": 0, "offset": offset, "timestamp": "1700000000000",
            "timestampType": "CREATE_TIME", "key": null, "value": "b3JkZXI=", "headers": []})
    }

    #[test]
    fn a_parked_kafka_record_rebuilds_into_a_one_record_event_under_its_topic_partition() {
        let p = parked("aws:kafka", json!({"topic_partition": "orders-0", "offset": 42}), kafka_record(42));
        let (Rebuilt::Kafka(event), id) = p.rebuild().unwrap() else { panic!("a Kafka event") };
        assert_eq!(id, "orders-0 offset 42");
        assert_eq!(p.which(), "aws:kafka orders-0 offset 42");
        let event = serde_json::to_value(&event).unwrap();
        assert_eq!(event["eventSource"], "aws:kafka");
        assert_eq!(event["eventSourceArn"], "arn:aws:kafka:us-east-1:000000000000:cluster/c/1");
        assert_eq!(event["bootstrapServers"], "b-1:9092");
        assert_eq!(event["records"]["orders-0"], json!([kafka_record(42)]), "the record exactly as parked");
    }

    #[test]
    fn parked_kinesis_and_dynamodb_records_rebuild_into_records_events() {
        let kinesis = json!({"eventSource": "aws:kinesis", "eventID": "shardId-000000000001:77",
            "kinesis": {"partitionKey": "k", "sequenceNumber": "77", "data": "b3JkZXI=",
                "approximateArrivalTimestamp": 1.5, "kinesisSchemaVersion": "1.0"}});
        let p = parked("aws:kinesis", json!({"shard_id": "shardId-000000000001", "sequence_number": "77"}), kinesis);
        let (Rebuilt::Kinesis(event), id) = p.rebuild().unwrap() else { panic!("a Kinesis event") };
        assert_eq!((id.as_str(), event.records.len()), ("77", 1));
        assert_eq!(serde_json::to_value(&event).unwrap()["Records"][0]["kinesis"]["data"], "b3JkZXI=");
        let change = json!({"eventID": "e", "eventName": "INSERT", "awsRegion": "us-east-1",
            "dynamodb": {"ApproximateCreationDateTime": 1, "Keys": {"pk": {"S": "a"}}, "SequenceNumber": "900",
                "SizeBytes": 1, "StreamViewType": "NEW_IMAGE"}});
        let p = parked("aws:dynamodb", json!({"sequence_number": "900"}), change);
        let (Rebuilt::DynamoDb(event), id) = p.rebuild().unwrap() else { panic!("a DynamoDB event") };
        assert_eq!((id.as_str(), event.records.len()), ("900", 1));
        assert_eq!(p.which(), "aws:dynamodb 900");
    }

    /// A Kafka function as `cargo lambda watch` serves it ([`crate::invoke::Http`]): the body
    /// is read as a `KafkaEvent` (what its runtime does), run through the Kafka driver with a
    /// handler that fails every record it gets, and its answer read as the replay reads the
    /// trigger's answer.
    #[derive(Clone)]
    struct WatchedKafkaFunction;

    struct FailsEveryRecord;

    impl effectively_once_lambda::Handler<KafkaRecord> for FailsEveryRecord {
        async fn handle(&self, _: &KafkaRecord, _: &lambda_runtime::Context) -> effectively_once_lambda::RecordResult {
            Err(effectively_once_lambda::RecordError::retryable("still broken"))
        }
    }

    impl WatchedKafkaFunction {
        async fn call(&self, body: Value) -> Vec<u8> {
            let event: KafkaEvent = serde_json::from_value(body).expect("lambda_runtime reads the body");
            let options = effectively_once_lambda::Options {
                emit_metrics: false,
                ..effectively_once_lambda::Options::new("kafka-consumer")
            };
            let event = lambda_runtime::LambdaEvent::new(event, crate::invoke::context());
            let answer = effectively_once_lambda::kafka::process(&FailsEveryRecord, event, &options).await;
            serde_json::to_vec(&answer).unwrap()
        }
    }

    impl KafkaFunction for WatchedKafkaFunction {
        async fn invoke(&self, event: KafkaEvent) -> Result<effectively_once_lambda::kafka::KafkaEventResponse> {
            crate::esm::kafka::kafka_response(&self.call(serde_json::to_value(event).unwrap()).await)
        }
    }

    impl KinesisFunction for WatchedKafkaFunction {
        async fn invoke(&self, event: KinesisEvent) -> Result<aws_lambda_events::event::streams::KinesisEventResponse> {
            crate::esm::kinesis_response(&self.call(serde_json::to_value(event).unwrap()).await)
        }
    }

    impl StreamFunction for WatchedKafkaFunction {
        async fn invoke(&self, event: Event) -> Result<aws_lambda_events::event::streams::DynamoDbEventResponse> {
            crate::esm::stream_response(&self.call(serde_json::to_value(event).unwrap()).await)
        }
    }

    /// `replay-parked --invoke-url` hands every parcel to the one watched function whatever its
    /// trigger. A Kinesis parcel given to a Kafka function is read as a Kafka event with no
    /// records (`KafkaEvent::records` defaults to empty), the driver answers no failure, and the
    /// replay deletes the message as if the record took effect: it never reached a handler.
    #[tokio::test]
    async fn a_parcel_of_another_trigger_is_not_taken_as_done_by_a_watched_function() {
        let kinesis = json!({"eventSource": "aws:kinesis", "eventID": "shardId-000000000001:77",
            "kinesis": {"partitionKey": "k", "sequenceNumber": "77", "data": "b3JkZXI=",
                "approximateArrivalTimestamp": 1.5, "kinesisSchemaVersion": "1.0"}});
        let p = parked("aws:kinesis", json!({"shard_id": "shardId-000000000001", "sequence_number": "77"}), kinesis);
        let (event, _) = p.rebuild().unwrap();
        let targets = Targets::only("aws:kafka", WatchedKafkaFunction).unwrap();
        // Its own trigger's record fails, named: kept.
        let (own, _) = parked("aws:kafka", json!({"topic_partition": "orders-0", "offset": 42}), kafka_record(42))
            .rebuild()
            .unwrap();
        assert_eq!(targets.invoke(own).await.unwrap(), ["orders-0 offset 42"]);
        // Another trigger's record must not come back as done (an empty answer deletes it).
        let answer = targets.invoke(event).await;
        assert!(
            !matches!(&answer, Ok(named) if named.is_empty()),
            "a Kinesis record no handler saw reads as taken effect: {answer:?}"
        );
    }

    #[test]
    fn a_parked_record_that_is_not_where_its_coordinates_say_or_of_no_trigger_is_not_rebuilt() {
        let elsewhere = parked("aws:kafka", json!({"topic_partition": "orders-1", "offset": 42}), kafka_record(42));
        assert!(elsewhere.rebuild().unwrap_err().contains("the record is orders-0 offset 42"));
        assert!(parked("aws:sqs", json!({}), json!({})).rebuild().is_err());
        assert!(parked("aws:kinesis", json!({"sequence_number": "1"}), json!({"no": "record"})).rebuild().is_err());
    }
}
