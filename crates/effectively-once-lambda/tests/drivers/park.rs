//! Poison on a stream trigger (Kafka, Kinesis, DynamoDB Streams): a record that fails
//! permanently is parked, with the record as delivered, its redacted reason and its coordinates,
//! before the answer lets the position pass it; a park that fails, or no destination chosen,
//! holds the position at it; dropping it is a choice made by name; `run` refuses to start
//! without one. And a retryable failure holds back only its own partition's later records and
//! those sharing its key.

use crate::common::kinesis_batch;
use std::sync::{Arc, Mutex};

use effectively_once_lambda::events::{
    Context, DynamoDbEvent, KafkaEvent, KafkaRecord, KinesisEventRecord, LambdaEvent,
};
use effectively_once_lambda::park::{self, Coordinates, Destination, Parcel, ParkFuture};
use effectively_once_lambda::{kafka, kinesis, streams};
use effectively_once_lambda::{Handled, Handler, Options, RecordError, RecordResult};

/// A destination that keeps what it is given, or refuses it all when `refuse` is set.
#[derive(Clone, Default)]
struct Kept {
    parcels: Arc<Mutex<Vec<Parcel>>>,
    refuse: bool,
}

impl Destination for Kept {
    fn park<'a>(&'a self, parcels: &'a [Parcel]) -> ParkFuture<'a> {
        Box::pin(async move {
            if self.refuse {
                return parcels.iter().map(|_| Err("queue down".to_owned())).collect();
            }
            self.parcels.lock().unwrap().extend_from_slice(parcels);
            parcels.iter().map(|_| Ok(())).collect()
        })
    }
}

impl Kept {
    fn parcels(&self) -> Vec<Parcel> {
        self.parcels.lock().unwrap().clone()
    }
}

fn parked_in(kept: &Kept) -> Options {
    Options { emit_metrics: false, ..Options::new("t") }.park_in(kept.clone())
}

/// Answers a record by the text of its payload: `poison...` fails permanently (its reason quoting
/// an address), `retry...` retryably, anything else is applied and remembered, in order. Its key
/// is the text after `:`.
#[derive(Default)]
struct Script {
    applied: Mutex<Vec<String>>,
}

impl Script {
    fn answer(&self, text: &str) -> RecordResult {
        if text.starts_with("poison") {
            return Err(RecordError::permanent("not a payment: alice@example.com"));
        }
        if text.starts_with("retry") {
            return Err(RecordError::retryable("throttled"));
        }
        self.applied.lock().unwrap().push(text.to_owned());
        Ok(Handled::Applied)
    }

    fn applied(&self) -> Vec<String> {
        self.applied.lock().unwrap().clone()
    }
}

fn kafka_text(record: &KafkaRecord) -> String {
    String::from_utf8(kafka::value_bytes(record).unwrap_or_default()).unwrap()
}

impl Handler<KafkaRecord> for Script {
    async fn handle(&self, record: &KafkaRecord, _context: &Context) -> RecordResult {
        self.answer(&kafka_text(record))
    }

    fn key(&self, record: &KafkaRecord) -> Option<String> {
        kafka_text(record).split_once(':').map(|(_, key)| key.to_owned())
    }
}

fn kinesis_text(record: &KinesisEventRecord) -> String {
    String::from_utf8(record.kinesis.data.0.clone()).unwrap()
}

impl Handler<KinesisEventRecord> for Script {
    async fn handle(&self, record: &KinesisEventRecord, _context: &Context) -> RecordResult {
        self.answer(&kinesis_text(record))
    }

    fn key(&self, record: &KinesisEventRecord) -> Option<String> {
        kinesis_text(record).split_once(':').map(|(_, key)| key.to_owned())
    }
}

/// Records `(partition, offset, value)` of topic `orders`, as Lambda's MSK event carries them.
fn kafka_event(records: &[(i64, i64, &str)]) -> KafkaEvent {
    use base64::Engine;
    let mut partitions = serde_json::Map::new();
    for (partition, offset, value) in records {
        let record = serde_json::json!({
            "topic": "orders", "partition": partition, "offset": offset, "timestamp": 1_700_000_000_000_i64,
            "timestampType": "CREATE_TIME", "headers": [],
            "value": base64::engine::general_purpose::STANDARD.encode(value),
        });
        let list = partitions.entry(format!("orders-{partition}")).or_insert_with(|| serde_json::json!([]));
        list.as_array_mut().unwrap().push(record);
    }
    serde_json::from_value(serde_json::json!({
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/orders/abc",
        "bootstrapServers": "b-1.orders:9092",
        "records": partitions,
    }))
    .unwrap()
}

fn named(response: &kafka::KafkaEventResponse) -> Vec<(String, i64)> {
    let failures = response.batch_item_failures.iter();
    failures.map(|f| (f.item_identifier.partition.clone(), f.item_identifier.offset)).collect()
}

fn checkpoint(response: &effectively_once_lambda::events::KinesisEventResponse) -> Vec<Option<String>> {
    response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect()
}

#[tokio::test]
async fn kafka_poison_is_parked_as_delivered_and_the_partition_goes_on() {
    let kept = Kept::default();
    let script = Script::default();
    let event = kafka_event(&[(0, 10, "a"), (0, 11, "poison"), (0, 12, "b")]);
    let delivered = serde_json::to_value(&event.records["orders-0"][1]).unwrap();
    let response = kafka::process(&script, LambdaEvent::new(event, Context::default()), &parked_in(&kept)).await;
    assert!(named(&response).is_empty(), "a parked record is done: {:?}", named(&response));
    assert_eq!(script.applied(), ["a", "b"]);
    let parcels = kept.parcels();
    assert_eq!(parcels.len(), 1);
    let parcel = &parcels[0];
    assert_eq!(parcel.trigger, "aws:kafka");
    assert_eq!(parcel.coordinates, Coordinates::Kafka { topic_partition: "orders-0".into(), offset: 11 });
    assert_eq!(parcel.record, delivered, "the record as Lambda delivered it");
    assert_eq!(parcel.event_source_arn.as_deref(), Some("arn:aws:kafka:us-east-1:123456789012:cluster/orders/abc"));
    assert_eq!(parcel.bootstrap_servers.as_deref(), Some("b-1.orders:9092"));
    assert!(parcel.reason.contains("not a payment"), "{}", parcel.reason);
    assert!(!parcel.reason.contains("alice@example.com"), "the reason is redacted: {}", parcel.reason);
    let body: serde_json::Value = serde_json::to_value(parcel).unwrap();
    assert_eq!(body["coordinates"], serde_json::json!({"topic_partition": "orders-0", "offset": 11}));
}

#[tokio::test]
async fn a_park_that_fails_holds_the_partition_at_the_poison() {
    let kept = Kept { refuse: true, ..Kept::default() };
    let script = Script::default();
    let event = kafka_event(&[(0, 10, "a"), (0, 11, "poison"), (1, 5, "c")]);
    let response = kafka::process(&script, LambdaEvent::new(event, Context::default()), &parked_in(&kept)).await;
    let named = named(&response);
    assert!(named.contains(&("orders-0".into(), 11)), "the poison is named again: {named:?}");
    assert!(!named.iter().any(|(partition, _)| partition == "orders-1"), "{named:?}");
    assert!(!named.contains(&("orders-0".into(), 10)), "{named:?}");
}

#[tokio::test]
async fn without_a_destination_process_holds_poison_and_drop_is_by_name() {
    let script = Script::default();
    let unchosen = Options { emit_metrics: false, ..Options::new("t") };
    let event = || kinesis_batch(&[("p", "a"), ("p", "poison"), ("q", "b")]);
    let response = kinesis::process(&script, LambdaEvent::new(event(), Context::default()), &unchosen).await;
    assert_eq!(checkpoint(&response), [Some("2".to_owned())], "held: the checkpoint is the poison");
    let dropped = unchosen.clone().drop_poison();
    let response = kinesis::process(&script, LambdaEvent::new(event(), Context::default()), &dropped).await;
    assert!(checkpoint(&response).is_empty(), "dropped by name: the shard goes on");
}

#[tokio::test]
async fn run_refuses_to_start_a_stream_function_without_a_park_destination() {
    let unchosen = || Options { emit_metrics: false, ..Options::new("t") };
    for refused in [kafka::run(Script::default(), unchosen()).await, kinesis::run(Script::default(), unchosen()).await]
    {
        let error = refused.expect_err("no park destination, no start").to_string();
        assert!(error.contains("PARK_QUEUE_URL") && error.contains("drop_poison"), "{error}");
    }
}

#[tokio::test]
async fn kinesis_poison_is_parked_with_its_shard_and_sequence_number() {
    let kept = Kept::default();
    let script = Script::default();
    let event = kinesis_batch(&[("p", "a"), ("p", "poison"), ("p", "b")]);
    let response = kinesis::process(&script, LambdaEvent::new(event, Context::default()), &parked_in(&kept)).await;
    assert!(checkpoint(&response).is_empty());
    assert_eq!(script.applied(), ["a", "b"]);
    let parcels = kept.parcels();
    assert_eq!(parcels.len(), 1);
    assert_eq!(parcels[0].trigger, "aws:kinesis");
    assert_eq!(
        parcels[0].coordinates,
        Coordinates::Kinesis { shard_id: "shardId-000000000001".into(), sequence_number: "2".into() }
    );
    assert_eq!(parcels[0].event_source_arn.as_deref(), Some("arn:aws:kinesis:us-east-1:123456789012:stream/orders"));
    assert_eq!(parcels[0].record["kinesis"]["data"], serde_json::json!("cG9pc29u"), "base64 of the data");
}

/// Fails every INSERT permanently.
struct Refuses;

impl Handler<effectively_once_lambda::events::EventRecord> for Refuses {
    async fn handle(&self, _record: &effectively_once_lambda::events::EventRecord, _context: &Context) -> RecordResult {
        Err(RecordError::permanent("no receipt address"))
    }
}

#[tokio::test]
async fn dynamodb_stream_poison_is_parked_with_its_sequence_number() {
    let kept = Kept::default();
    let event: DynamoDbEvent =
        serde_json::from_slice(include_bytes!("../../../../events/dynamodb-stream-outbox.json")).unwrap();
    let insert = event.records[0].clone();
    let response = streams::process(&Refuses, LambdaEvent::new(event, Context::default()), &parked_in(&kept)).await;
    assert!(response.batch_item_failures.is_empty());
    let parcels = kept.parcels();
    assert_eq!(parcels.len(), 1, "the INSERT; the MODIFY is skipped");
    assert_eq!(parcels[0].trigger, "aws:dynamodb");
    let sequence_number = insert.change.sequence_number.clone().unwrap();
    assert_eq!(parcels[0].coordinates, Coordinates::DynamoDb { sequence_number });
    assert_eq!(parcels[0].record, serde_json::to_value(&insert).unwrap());
}

/// The review's shape: partition 0 holds a record with key X that keeps failing; partition 1
/// holds `b0`, then a copy of X. `b0` comes before the shared key and does not wait for it.
#[tokio::test]
async fn a_retryable_failure_holds_back_only_its_partition_and_its_key() {
    let script = Script::default();
    let event = kafka_event(&[(0, 7, "retry:X"), (1, 3, "b0"), (1, 4, "copy:X"), (1, 5, "b1")]);
    let options = parked_in(&Kept::default());
    let response = kafka::process(&script, LambdaEvent::new(event, Context::default()), &options).await;
    assert_eq!(script.applied(), ["b0"], "b0 is handled in the first invocation");
    let named = named(&response);
    assert!(named.contains(&("orders-0".into(), 7)), "{named:?}");
    assert!(named.contains(&("orders-1".into(), 4)), "the copy of X waits for X: {named:?}");
    assert!(!named.contains(&("orders-1".into(), 3)), "b0 is done: {named:?}");

    let script = Script::default();
    let event = kinesis_batch(&[("p0", "retry:X"), ("p1", "b0"), ("p1", "copy:X"), ("p1", "b1")]);
    let response = kinesis::process(&script, LambdaEvent::new(event, Context::default()), &options).await;
    assert_eq!(script.applied(), ["b0"], "b0 is handled in the first invocation");
    assert_eq!(checkpoint(&response), [Some("1".to_owned())]);
}

/// Fails the sequence numbers listed (permanently or retryably), applies the others; records what ran.
struct Outbox {
    permanent: &'static [&'static str],
    retryable: &'static [&'static str],
    seen: Mutex<Vec<String>>,
}

impl Handler<effectively_once_lambda::events::EventRecord> for Outbox {
    async fn handle(&self, record: &effectively_once_lambda::events::EventRecord, _context: &Context) -> RecordResult {
        let seq = record.change.sequence_number.clone().unwrap();
        self.seen.lock().unwrap().push(seq.clone());
        if self.permanent.contains(&seq.as_str()) {
            return Err(RecordError::permanent("no outbox row for alice@example.com's payment"));
        }
        if self.retryable.contains(&seq.as_str()) {
            return Err(RecordError::retryable("SES throttled"));
        }
        Ok(Handled::Applied)
    }
}

/// Four inserts, sequence numbers 1 to 4, through the record-by-record Streams driver, poison
/// parked in `kept`; the checkpoint.
async fn four_inserts(outbox: &Outbox, kept: &Kept) -> Vec<Option<String>> {
    let mut event: DynamoDbEvent =
        serde_json::from_slice(include_bytes!("../../../../events/dynamodb-stream-outbox.json")).unwrap();
    let insert = event.records[0].clone();
    event.records = (1..=4)
        .map(|i| {
            let mut r = insert.clone();
            r.change.sequence_number = Some(i.to_string());
            r
        })
        .collect();
    let response = streams::process(outbox, LambdaEvent::new(event, Context::default()), &parked_in(kept)).await;
    response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()
}

/// A retry cannot change a permanent answer, and a checkpoint there would hold every record
/// behind it: parked, it is passed.
#[tokio::test]
async fn a_parked_stream_record_is_not_the_checkpoint() {
    let outbox = Outbox { permanent: &["2"], retryable: &[], seen: Mutex::default() };
    let kept = Kept::default();
    assert!(four_inserts(&outbox, &kept).await.is_empty(), "acked: nothing to retry");
    assert_eq!(*outbox.seen.lock().unwrap(), ["1", "2", "3", "4"], "the records behind it ran");
    let parked: Vec<String> = kept.parcels().iter().map(|p| p.coordinates.to_string()).collect();
    assert_eq!(parked, ["2"]);
}

#[tokio::test]
async fn a_retryable_failure_behind_a_parked_one_is_the_checkpoint() {
    let outbox = Outbox { permanent: &["1"], retryable: &["3"], seen: Mutex::default() };
    let kept = Kept::default();
    assert_eq!(four_inserts(&outbox, &kept).await, [Some("3".to_owned())]);
    assert_eq!(*outbox.seen.lock().unwrap(), ["1", "2", "3"], "nothing after the checkpoint");
    assert_eq!(kept.parcels().len(), 1);
}

/// A destination that keeps each parcel's message body as [`park::SqsQueue`] sends it
/// ([`park::body`] at [`park::MAX_BODY`]), and takes them all.
#[derive(Clone, Default)]
struct Bodies(Arc<Mutex<Vec<String>>>);

impl Destination for Bodies {
    fn park<'a>(&'a self, parcels: &'a [Parcel]) -> ParkFuture<'a> {
        Box::pin(async move {
            let bodies = parcels.iter().map(|parcel| park::body(parcel, park::MAX_BODY));
            self.0.lock().unwrap().extend(bodies);
            parcels.iter().map(|_| Ok(())).collect()
        })
    }
}

/// A poison record whose message would pass SQS's 1 MiB is parked without its payload, with its
/// coordinates and why: the park alarm fires at once, and the record stays readable on its
/// stream for the stream's retention.
#[tokio::test]
async fn a_poison_too_large_for_its_message_is_parked_with_its_coordinates() {
    let bodies = Bodies::default();
    let options = Options { emit_metrics: false, ..Options::new("t") }.park_in(bodies.clone());
    let data = format!("poison{}", "x".repeat(800_000));
    let event = kinesis_batch(&[("p", "a"), ("p", data.as_str()), ("p", "b")]);
    let response = kinesis::process(&Script::default(), LambdaEvent::new(event, Context::default()), &options).await;
    let kept = bodies.0.lock().unwrap().clone();
    assert_eq!(kept.len(), 1);
    assert!(kept[0].len() <= effectively_once_lambda::park::MAX_BODY);
    let parked: Parcel = serde_json::from_str(&kept[0]).unwrap();
    assert_eq!(
        parked.coordinates,
        Coordinates::Kinesis { shard_id: "shardId-000000000001".into(), sequence_number: "2".into() }
    );
    assert!(
        parked.record["omitted"].as_str().is_some_and(|why| why.contains("read it at its coordinates")),
        "{}",
        parked.record
    );
    assert!(checkpoint(&response).is_empty(), "parked: the shard goes on");
}

/// Every record is started only while more than `deadline_margin` remains; parking is not:
/// a destination slower than the time left (a hung connection, more poison than sequential
/// batches of ten send in time) keeps the invocation past its deadline. Lambda kills it, nothing
/// is answered, the whole batch comes back and every parcel is sent again. Bounded by the
/// deadline, the answer would go back with the unparked poison held.
#[tokio::test(start_paused = true)]
async fn a_park_that_outlasts_the_deadline_holds_its_poison_and_answers_in_time() {
    struct Hangs;
    impl Destination for Hangs {
        fn park<'a>(&'a self, _parcels: &'a [Parcel]) -> ParkFuture<'a> {
            Box::pin(std::future::pending())
        }
    }
    let options = Options { emit_metrics: false, ..Options::new("t") }.park_in(Hangs);
    let mut context = Context::default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    context.deadline = now + 5_000;
    let event = kinesis_batch(&[("p", "a"), ("p", "poison"), ("p", "b")]);
    let script = Script::default();
    // The runtime's clock is paused: the minute below passes at once, with no real wait.
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        kinesis::process(&script, LambdaEvent::new(event, context), &options),
    )
    .await;
    let response = answer.expect("no answer a minute past a deadline 5 s away: parking is not bounded by it");
    assert_eq!(checkpoint(&response), [Some("2".to_owned())], "the unparked poison is held");
}
