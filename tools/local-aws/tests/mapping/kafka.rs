//! The Kafka event source mapping against Lambda's documented behaviour, on the local
//! Kafka-protocol broker (`make local-kafka-up`) and the local AWS (the failure queue): offsets
//! committed only after the answer, the records the answer names delivered again while the rest
//! is committed, every record delivered again after an invocation error, a failure that keeps
//! recurring discarded to the on-failure destination with its `KafkaBatchInfo` after the
//! retries, and the destination replayed. Each test that polls runs under both readings of the
//! named records (`local::each_reading!`: `name::resume`, `name::per_record`), with what each
//! reading delivers again where they differ; the replay and answer-parsing tests read no answer
//! through a mapping and run once. Each test reads the effect where Lambda leaves it: the
//! batches the function is handed, the group's committed offsets and the records in the failure
//! queue.

use std::time::Duration;

use aws_lambda_events::event::kafka::KafkaEvent;
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_lambda::kafka::{KafkaBatchItemFailure, KafkaEventResponse, KafkaItemIdentifier};
use local::esm::kafka::{self, KafkaMapping, KafkaPoller, Outgoing, Producer, Reading};
use local::invoke::KafkaFunction;
use local::resources::Clients;
use serde_json::Value;

/// A function answering call `n` (from 0) on a batch of (value, `topic-partition@offset`) pairs.
type Script = crate::support::Script<KafkaEventResponse>;

impl KafkaFunction for Script {
    async fn invoke(&self, event: KafkaEvent) -> local::Result<KafkaEventResponse> {
        assert_eq!(event.event_source.as_deref(), Some("aws:kafka"));
        let mut partitions: Vec<_> = event.records.into_iter().collect();
        partitions.sort_by(|a, b| a.0.cmp(&b.0));
        let mut batch = Vec::new();
        for (name, records) in partitions {
            let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
            assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{name}: offsets in order: {offsets:?}");
            for r in records {
                assert_eq!(effectively_once_lambda::kafka::topic_partition(&r), name);
                let value = effectively_once_lambda::kafka::value_bytes(&r).expect("a base64 value");
                batch.push((String::from_utf8(value).unwrap(), format!("{name}@{}", r.offset)));
            }
        }
        self.call(batch)
    }
}

/// The answer naming each `topic-partition@offset` of `ids` failed.
fn failing(ids: &[&str]) -> KafkaEventResponse {
    let batch_item_failures = ids
        .iter()
        .map(|id| {
            let (partition, offset) = id.split_once('@').unwrap();
            let item_identifier = KafkaItemIdentifier { partition: partition.into(), offset: offset.parse().unwrap() };
            KafkaBatchItemFailure { item_identifier }
        })
        .collect();
    KafkaEventResponse { batch_item_failures }
}

/// A topic of `partitions` partitions, a failure queue and a mapping on both reading answers
/// as `reading`, the test's own.
async fn setup(partitions: i32, reading: Reading) -> (Clients, KafkaMapping) {
    let bootstrap = kafka::bootstrap().expect("the local Kafka broker");
    let clients = Clients::local().await;
    let topic = unique_name("kafka");
    kafka::create_topic(&bootstrap, &topic, partitions).await.expect("create topic");
    let queue = clients.sqs.create_queue().queue_name(unique_name("kafka-fail")).send().await.expect("create queue");
    let mut mapping =
        KafkaMapping::new(&bootstrap, &topic, &unique_name("group"), queue.queue_url().map(str::to_owned));
    mapping.settings.max_retries = 2;
    mapping.reading = reading;
    (clients, mapping)
}

/// Writes each value to `partition` of the mapping's topic, in order.
async fn produce(mapping: &KafkaMapping, partition: i32, values: &[&str]) {
    let producer = Producer::new(&mapping.bootstrap).unwrap();
    for value in values {
        let record =
            Outgoing { key: value, value: value.as_bytes(), partition: Some(partition), ..Outgoing::default() };
        producer.send(&mapping.topic, record).await.expect("produce");
    }
}

/// Polls until `function` has been handed `records` records in all (or a minute passes).
async fn poll_until(clients: &Clients, poller: &mut KafkaPoller, function: &Script, records: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while function.calls().iter().map(Vec::len).sum::<usize>() < records {
        assert!(tokio::time::Instant::now() < deadline, "only {:?} after a minute", function.calls());
        poller.poll(clients, function).await.expect("poll");
    }
}

/// Invocation records in the failure queue.
async fn failure_records(clients: &Clients, mapping: &KafkaMapping) -> Vec<Value> {
    let url = mapping.settings.failures_url.as_deref().unwrap();
    let out = clients.sqs.receive_message().queue_url(url).max_number_of_messages(10).visibility_timeout(0).send();
    let out = out.await.expect("receive");
    out.messages().iter().map(|m| serde_json::from_str(m.body().unwrap()).unwrap()).collect()
}

local::each_reading!(each_partition_is_committed_past_its_batch_only_after_the_answer);
async fn each_partition_is_committed_past_its_batch_only_after_the_answer(reading: Reading) {
    let (clients, mapping) = setup(2, reading).await;
    produce(&mapping, 0, &["a", "b", "c"]).await;
    produce(&mapping, 1, &["d", "e"]).await;
    let function = Script::new(|_, _| Ok(KafkaEventResponse::default()));
    let mut poller = KafkaPoller::join(&mapping, "p1").unwrap();
    poll_until(&clients, &mut poller, &function, 5).await;
    let mut delivered: Vec<String> = function.calls().concat();
    delivered.sort();
    assert_eq!(delivered, ["a", "b", "c", "d", "e"]);
    assert_eq!(kafka::committed(&mapping, 2).unwrap(), [Some(3), Some(2)]);
}

local::each_reading!(a_crash_before_the_commit_delivers_the_batch_again_to_the_next_poller);
async fn a_crash_before_the_commit_delivers_the_batch_again_to_the_next_poller(reading: Reading) {
    let (clients, mapping) = setup(1, reading).await;
    produce(&mapping, 0, &["a", "b"]).await;
    let function = Script::new(|_, _| Ok(KafkaEventResponse::default()));
    let crashed = KafkaPoller::join(&mapping, "p1").unwrap().poll_then_crash(&function).await.unwrap();
    assert_eq!(crashed, 2);
    assert_eq!(kafka::committed(&mapping, 1).unwrap(), [None], "nothing committed by the crashed poller");
    let mut next = KafkaPoller::join(&mapping, "p2").unwrap();
    poll_until(&clients, &mut next, &function, 4).await;
    assert_eq!(function.calls(), [vec!["a", "b"], vec!["a", "b"]]);
    assert_eq!(kafka::committed(&mapping, 1).unwrap(), [Some(2)]);
}

local::each_reading!(a_reported_failure_is_delivered_again_and_the_rest_committed);
/// The answer names "b" once. Resumed there, partition 0 is read again from "b", so "b" and
/// "c" come again; read record by record, only "b" comes again and "c" is committed. "a" and
/// partition 1 are committed either way.
async fn a_reported_failure_is_delivered_again_and_the_rest_committed(reading: Reading) {
    let (clients, mapping) = setup(2, reading).await;
    produce(&mapping, 0, &["a", "b", "c"]).await;
    produce(&mapping, 1, &["d"]).await;
    let failed = format!("{}-0@1", mapping.topic);
    let once = std::sync::atomic::AtomicBool::new(true);
    let function = Script::new(move |_, batch| {
        let has = batch.iter().any(|(_, id)| *id == failed);
        let fail = has && once.swap(false, std::sync::atomic::Ordering::SeqCst);
        Ok(if fail { failing(&[&failed]) } else { KafkaEventResponse::default() })
    });
    let mut poller = KafkaPoller::join(&mapping, "p1").unwrap();
    let c_again = match reading {
        Reading::Resume => 1,
        Reading::PerRecord => 0,
    };
    // The first batch may hold one partition or both.
    poll_until(&clients, &mut poller, &function, 5 + c_again).await;
    let delivered = function.calls().concat();
    let count = |v: &str| delivered.iter().filter(|d| *d == v).count();
    assert_eq!((count("a"), count("b"), count("c"), count("d")), (1, 2, 1 + c_again, 1), "{:?}", function.calls());
    assert_eq!(kafka::committed(&mapping, 2).unwrap(), [Some(3), Some(1)]);
    assert_eq!(mapping.waiting(), 0);
}

/// An invocation error: every record of the batch comes again (every partition resumed at its
/// first record, or every record retried).
struct FailsFirst(Script);

impl KafkaFunction for FailsFirst {
    async fn invoke(&self, event: KafkaEvent) -> local::Result<KafkaEventResponse> {
        let calls = self.0.calls().len();
        self.0.invoke(event).await?;
        if calls == 0 {
            return Err("function error (Unhandled)".into());
        }
        Ok(KafkaEventResponse::default())
    }
}

local::each_reading!(an_invocation_error_delivers_every_record_of_the_batch_again);
async fn an_invocation_error_delivers_every_record_of_the_batch_again(reading: Reading) {
    let (clients, mapping) = setup(1, reading).await;
    produce(&mapping, 0, &["a", "b"]).await;
    let function = FailsFirst(Script::new(|_, _| Ok(KafkaEventResponse::default())));
    let mut poller = KafkaPoller::join(&mapping, "p1").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while function.0.calls().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline);
        poller.poll(&clients, &function).await.unwrap();
    }
    assert_eq!(function.0.calls(), [vec!["a", "b"], vec!["a", "b"]]);
    assert_eq!((kafka::committed(&mapping, 1).unwrap(), mapping.waiting()), (vec![Some(2)], 0));
}

local::each_reading!(a_record_that_keeps_failing_goes_to_the_failure_destination_after_the_retries_and_replays);
/// The answer names "poison" every time. Resumed there, the first invocation and two retries
/// fail at it, then it and the rest of its batch go to the destination; retried alone, "c" is
/// committed after the first invocation and "poison" alone goes to the destination after two
/// retries. Either way the partition goes on, and the replay hands over what was discarded.
async fn a_record_that_keeps_failing_goes_to_the_failure_destination_after_the_retries_and_replays(reading: Reading) {
    let (clients, mapping) = setup(1, reading).await;
    produce(&mapping, 0, &["a", "poison", "c"]).await;
    let poison = format!("{}-0@1", mapping.topic);
    let function = Script::new(move |_, batch| {
        Ok(if batch.iter().any(|(_, id)| *id == poison) { failing(&[&poison]) } else { KafkaEventResponse::default() })
    });
    let mut poller = KafkaPoller::join(&mapping, "p1").unwrap();
    let mut given_up = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while given_up == 0 {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", function.calls());
        given_up += poller.poll(&clients, &function).await.unwrap().given_up;
    }
    let discarded: &[&str] = match reading {
        Reading::Resume => &["poison", "c"],
        Reading::PerRecord => &["poison"],
    };
    assert_eq!(given_up, discarded.len());
    assert_eq!(function.calls(), [&["a", "poison", "c"][..], discarded, discarded]);
    assert_eq!(kafka::committed(&mapping, 1).unwrap(), [Some(3)]);
    assert_eq!(mapping.waiting(), 0);
    let records = failure_records(&clients, &mapping).await;
    assert_eq!(records.len(), 1, "{records:?}");
    let info = &records[0]["KafkaBatchInfo"];
    let range = &info["recordsInfo"][format!("{}-0", mapping.topic)];
    let last = (discarded.len()).to_string();
    assert_eq!((range["firstRecordOffset"].as_str(), range["lastRecordOffset"].as_str()), (Some("1"), Some(&*last)));
    assert_eq!(records[0]["requestContext"]["condition"], "RetryAttemptsExhausted");

    // Replayed after the fix: what was discarded comes back from the broker, and the
    // invocation record leaves the destination.
    let fixed = Script::new(|_, _| Ok(KafkaEventResponse::default()));
    let replayed = kafka::replay_kafka_failures(&clients, &mapping, &fixed).await.unwrap();
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (1, discarded.len(), 0));
    assert_eq!(fixed.calls(), [discarded]);
    assert!(failure_records(&clients, &mapping).await.is_empty());
}

local::each_reading!(a_replay_that_still_fails_keeps_the_invocation_record);
async fn a_replay_that_still_fails_keeps_the_invocation_record(reading: Reading) {
    let (clients, mapping) = setup(1, reading).await;
    produce(&mapping, 0, &["poison"]).await;
    let function = Script::new(|_, batch| Ok(failing(&[&batch[0].1])));
    let mut poller = KafkaPoller::join(&mapping, "p1").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while poller.poll(&clients, &function).await.unwrap().given_up == 0 {
        assert!(tokio::time::Instant::now() < deadline);
    }
    let replayed = kafka::replay_kafka_failures(&clients, &mapping, &function).await.unwrap();
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (0, 0, 1));
    assert_eq!(failure_records(&clients, &mapping).await.len(), 1);
}

local::each_reading!(a_destination_write_that_fails_does_not_skip_the_discarded_records);
/// The on-failure destination cannot be written when the poison's retries run out (the queue
/// is gone, throttled, its KMS key disabled): the poll fails, and the partition is not moved
/// past records that were neither answered nor written to the destination (or they keep
/// waiting); they come again.
async fn a_destination_write_that_fails_does_not_skip_the_discarded_records(reading: Reading) {
    let bootstrap = kafka::bootstrap().expect("the local Kafka broker");
    let clients = Clients::local().await;
    let topic = unique_name("kafka");
    kafka::create_topic(&bootstrap, &topic, 1).await.expect("create topic");
    // A destination that refuses the write: a queue that does not exist.
    let gone = format!("http://127.0.0.1:4566/000000000000/{}", unique_name("gone"));
    let mut mapping = KafkaMapping::new(&bootstrap, &topic, &unique_name("group"), Some(gone));
    mapping.settings.max_retries = 0;
    mapping.reading = reading;
    produce(&mapping, 0, &["poison", "c"]).await;
    let poison = format!("{topic}-0@0");
    let broken = std::sync::atomic::AtomicBool::new(true);
    let function = Script::new(move |_, batch| {
        let fail = broken.load(std::sync::atomic::Ordering::SeqCst) && batch.iter().any(|(_, id)| *id == poison);
        Ok(if fail { failing(&[&poison]) } else { KafkaEventResponse::default() })
    });
    let mut poller = KafkaPoller::join(&mapping, "p1").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // The first batch fails at the poison; no retries; the discard's write fails.
    let failed = loop {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", function.calls());
        match poller.poll(&clients, &function).await {
            Ok(poll) if poll.delivered == 0 => continue,
            other => break other,
        }
    };
    assert!(failed.is_err(), "the destination write fails: {failed:?}");
    // A later record arrives; the poller goes on polling (a transient destination fault).
    produce(&mapping, 0, &["d"]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !function.calls().concat().contains(&"d".to_owned()) {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", function.calls());
        let _ = poller.poll(&clients, &function).await;
    }
    let delivered = function.calls().concat();
    let again = delivered.iter().filter(|v| *v == "poison").count();
    assert!(
        again >= 2,
        "the poison was neither delivered again nor written to the destination, and the partition was \
         committed past it: calls {:?}, committed {:?}",
        function.calls(),
        kafka::committed(&mapping, 1).unwrap()
    );
}

local::each_reading!(a_named_record_comes_back_ahead_of_newer_ones_even_from_another_poller);
/// Retried record by record, a named record waits in the mapping, not in the poller that got
/// the answer: that poller leaves the group, the next member delivers the record again, and
/// ahead of the partition's newer records, in offset order. The batch was committed past its
/// last record at once.
async fn a_named_record_comes_back_ahead_of_newer_ones_even_from_another_poller(reading: Reading) {
    let (clients, mapping) = setup(1, reading).await;
    produce(&mapping, 0, &["a", "b", "c"]).await;
    let (b, c) = (format!("{}-0@1", mapping.topic), format!("{}-0@2", mapping.topic));
    let function = Script::new(move |n, _| Ok(if n == 0 { failing(&[&b, &c]) } else { KafkaEventResponse::default() }));
    let mut first = KafkaPoller::join(&mapping, "p1").unwrap();
    poll_until(&clients, &mut first, &function, 3).await;
    let (waiting, committed) = match reading {
        Reading::Resume => (0, Some(1)),
        Reading::PerRecord => (2, Some(3)),
    };
    assert_eq!((mapping.waiting(), kafka::committed(&mapping, 1).unwrap()[0]), (waiting, committed));
    drop(first);
    produce(&mapping, 0, &["d"]).await;
    let mut next = KafkaPoller::join(&mapping, "p2").unwrap();
    poll_until(&clients, &mut next, &function, 6).await;
    let calls = function.calls();
    assert_eq!(calls[0], ["a", "b", "c"]);
    assert_eq!(calls[1..].concat(), ["b", "c", "d"], "in offset order, ahead of the newer one: {calls:?}");
    assert_eq!((mapping.waiting(), kafka::committed(&mapping, 1).unwrap()), (0, vec![Some(4)]));
}

#[test]
fn an_answer_is_read_as_lambda_reads_it() {
    assert_eq!(kafka::kafka_response(b"null").unwrap(), KafkaEventResponse::default());
    assert_eq!(kafka::kafka_response(b"{}").unwrap(), KafkaEventResponse::default());
    assert_eq!(kafka::kafka_response(br#"{"batchItemFailures":null}"#).unwrap(), KafkaEventResponse::default());
    let one = br#"{"batchItemFailures":[{"itemIdentifier":{"partition":"t-0","offset":4}}]}"#;
    assert_eq!(kafka::kafka_response(one).unwrap(), failing(&["t-0@4"]));
    assert!(kafka::kafka_response(b"[]").is_err());
    assert!(kafka::kafka_response(br#"{"batchItemFailures":[{"itemIdentifier":"t-0@4"}]}"#).is_err());
}

/// An invocation record the emulator writes for `topic-partition@offset`, one record.
fn batch_info(mapping: &KafkaMapping, partition: i32, offset: i64) -> String {
    let range = serde_json::json!({
        "firstRecordOffset": offset.to_string(), "firstRecordTimestamp": 0,
        "lastRecordOffset": offset.to_string(), "lastRecordTimestamp": 0,
    });
    let mut records_info = serde_json::Map::new();
    records_info.insert(format!("{}-{partition}", mapping.topic), range);
    serde_json::json!({
        "requestContext": {"condition": "RetryAttemptsExhausted"},
        "KafkaBatchInfo": {"batchSize": 1, "bootstrapServers": mapping.bootstrap, "recordsInfo": records_info},
    })
    .to_string()
}

/// Ten invocation records that still fail after the fix (or whose records retention took)
/// come first in the destination; an eleventh, whose record now succeeds, comes after them.
/// A replay must hand the eleventh over: kept records that come back on every receive must not
/// end the replay before every record in the destination has been tried once.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_tries_every_invocation_record_even_behind_ten_kept_ones() {
    let (clients, mapping) = setup(1, Reading::default()).await;
    let bad: Vec<String> = (0..10).map(|i| format!("bad-{i}")).collect();
    let mut values: Vec<&str> = bad.iter().map(String::as_str).collect();
    values.push("good");
    produce(&mapping, 0, &values).await;
    let url = mapping.settings.failures_url.clone().unwrap();
    for offset in 0..11 {
        let body = batch_info(&mapping, 0, offset);
        clients.sqs.send_message().queue_url(&url).message_body(body).send().await.expect("send");
    }
    let function = Script::new(|_, batch| {
        let bad: Vec<&str> = batch.iter().filter(|(v, _)| v.starts_with("bad")).map(|(_, id)| id.as_str()).collect();
        Ok(if bad.is_empty() { KafkaEventResponse::default() } else { failing(&bad[..1]) })
    });
    let replayed = kafka::replay_kafka_failures(&clients, &mapping, &function).await.unwrap();
    assert!(
        function.calls().concat().contains(&"good".to_owned()),
        "the eleventh invocation record was never replayed: {replayed:?}, calls {:?}",
        function.calls()
    );
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (1, 1, 10));
}

/// The destination names a range the broker does not hold (the topic was recreated, or
/// retention took it): the replay keeps that invocation record, as its doc says, and still
/// replays the others; it does not fail as a whole and leave every record in flight.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_keeps_a_partition_the_topic_no_longer_has_and_replays_the_rest() {
    let (clients, mapping) = setup(1, Reading::default()).await;
    produce(&mapping, 0, &["a", "b", "new"]).await;
    let url = mapping.settings.failures_url.clone().unwrap();
    // A topic deleted since (or a partition the topic no longer has), then one still held.
    for (partition, offset) in [(5, 0), (0, 2)] {
        let body = batch_info(&mapping, partition, offset);
        clients.sqs.send_message().queue_url(&url).message_body(body).send().await.expect("send");
    }
    let function = Script::new(|_, _| Ok(KafkaEventResponse::default()));
    let replayed = kafka::replay_kafka_failures(&clients, &mapping, &function).await;
    let replayed = replayed.expect("a range the broker no longer holds is kept, not an error that stops the replay");
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (1, 1, 1), "{:?}", function.calls());
    assert_eq!(function.calls(), [vec!["new"]]);
}
