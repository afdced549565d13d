//! The Kinesis event source mapping against Lambda's documented behaviour, on a stream of the
//! local AWS: the checkpoint at the lowest failed sequence number, bisection, a poison record
//! discarded to the on-failure destination with its `KinesisBatchInfo`, parents read before
//! their children after a split, and the destination replayed. Each test reads the effect where
//! Lambda leaves it: the batches the function is handed and the records in the failure queue.

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::{KinesisBatchItemFailure, KinesisEventResponse};
use aws_sdk_kinesis::primitives::Blob;
use effectively_once_dynamodb::testing::unique_name;
use local::esm::{self, KinesisMapping};
use local::invoke::KinesisFunction;
use local::resources::Clients;
use serde_json::Value;

/// A stream of `shards` shards and a failure queue, both the test's own.
async fn setup(shards: i32) -> (Clients, String, String) {
    let clients = Clients::local().await;
    let stream = unique_name("kin");
    clients.kinesis.create_stream().stream_name(&stream).shard_count(shards).send().await.expect("create stream");
    let queue = clients.sqs.create_queue().queue_name(unique_name("kin-fail")).send().await.expect("create queue");
    (clients, stream, queue.queue_url().unwrap().to_owned())
}

/// Puts `keys` (each the record's data) on one partition key, so on one shard, in order.
async fn put(clients: &Clients, stream: &str, keys: &[&str]) {
    for key in keys {
        let put = clients.kinesis.put_record().stream_name(stream).partition_key("orders").data(Blob::new(*key));
        put.send().await.expect("put record");
    }
}

/// A function answering call `n` (from 0) on a batch of (data, sequence number) pairs.
type Script = crate::support::Script<KinesisEventResponse>;

impl KinesisFunction for Script {
    async fn invoke(&self, event: KinesisEvent) -> local::Result<KinesisEventResponse> {
        let batch: Vec<(String, String)> = event
            .records
            .iter()
            .map(|r| {
                assert_eq!(r.event_source.as_deref(), Some("aws:kinesis"));
                let id = format!(
                    "{}:{}",
                    r.event_id.as_deref().unwrap().split(':').next().unwrap(),
                    r.kinesis.sequence_number
                );
                assert_eq!(r.event_id.as_deref(), Some(id.as_str()), "eventID is shardId:sequenceNumber");
                (String::from_utf8(r.kinesis.data.to_vec()).unwrap(), r.kinesis.sequence_number.clone())
            })
            .collect();
        self.call(batch)
    }
}

fn failing(ids: &[&str]) -> KinesisEventResponse {
    let mut response = KinesisEventResponse::default();
    for id in ids {
        let mut f = KinesisBatchItemFailure::default();
        f.item_identifier = Some((*id).to_owned());
        response.batch_item_failures.push(f);
    }
    response
}

/// Fails every batch at `poison` (as a partial batch response) when it holds it.
fn failing_at(poison: &'static str) -> Script {
    Script::new(move |_, batch| {
        Ok(match batch.iter().find(|(k, _)| k == poison) {
            Some((_, seq)) => failing(&[seq]),
            None => KinesisEventResponse::default(),
        })
    })
}

fn seq_of<'a>(batch: &'a [(String, String)], key: &str) -> &'a str {
    &batch.iter().find(|(k, _)| k == key).expect("key in batch").1
}

fn keys(lists: &[&[&str]]) -> Vec<Vec<String>> {
    lists.iter().map(|l| l.iter().map(|k| k.to_string()).collect()).collect()
}

async fn drain<F: KinesisFunction>(clients: &Clients, mapping: &mut KinesisMapping, function: &F) {
    for _ in 0..50 {
        if esm::poll_kinesis(clients, mapping, function).await.unwrap().delivered == 0 {
            return;
        }
    }
    panic!("the stream never settled");
}

async fn failure_records(clients: &Clients, url: &str) -> Vec<Value> {
    let bodies = esm::peek_bodies(clients, url).await.unwrap();
    bodies.iter().map(|b| serde_json::from_str(b).expect("invocation record is JSON")).collect()
}

/// The sample event `cargo lambda invoke --data-file` sends: orders as base64 JSON, two on one
/// partition key, and a poison record that is not JSON.
#[test]
fn the_sample_event_is_a_kinesis_batch_of_orders_with_one_poison_record() {
    let event: KinesisEvent = serde_json::from_str(include_str!("../../../../events/kinesis-orders.json")).unwrap();
    let orders: Vec<Option<Value>> =
        event.records.iter().map(|r| serde_json::from_slice(&r.kinesis.data).ok()).collect();
    assert_eq!(orders.iter().filter(|o| o.is_none()).count(), 1, "one poison record");
    for order in orders.iter().flatten() {
        assert!(order["order_id"].is_string() && order["email"].is_string() && order["total_cents"].is_u64());
    }
    let keys: Vec<&str> = event.records.iter().map(|r| r.kinesis.partition_key.as_str()).collect();
    assert!(keys.iter().any(|k| keys.iter().filter(|o| *o == k).count() == 2), "two records on one key");
    for r in &event.records {
        assert_eq!(r.event_source.as_deref(), Some("aws:kinesis"));
        let id = r.event_id.as_deref().unwrap();
        assert!(id.starts_with("shardId-") && id.ends_with(&format!(":{}", r.kinesis.sequence_number)));
    }
}

#[tokio::test]
async fn the_mapping_takes_its_settings_from_the_defaults_or_a_template() {
    let mapping = KinesisMapping::new("s", None);
    let s = &mapping.settings;
    assert_eq!((s.batch_size, s.max_retries, s.max_record_age_seconds), (100, 5, Some(3600)));
    assert!(s.bisect_on_error && s.report_batch_item_failures);
    // A user's template: its numbers, not the defaults.
    let template = serde_json::json!({"Resources": {
        "Orders": {"Type": "AWS::Kinesis::Stream"},
        "Mapping": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {
            "EventSourceArn": {"Fn::GetAtt": ["Orders", "Arn"]}, "BatchSize": 25, "MaximumRetryAttempts": 2,
            "FunctionResponseTypes": ["ReportBatchItemFailures"]}}}});
    let settings = local::resources::mapping_settings(&template, "Orders").unwrap();
    let mapping = KinesisMapping::with("s", &settings, None);
    let s = &mapping.settings;
    assert_eq!((s.batch_size, s.max_retries, s.max_record_age_seconds), (25, 2, None));
    assert!(!s.bisect_on_error && s.report_batch_item_failures);
}

#[tokio::test]
async fn a_poison_record_goes_to_the_failure_queue_after_the_retries_and_the_shard_moves_on() {
    let (clients, stream, failures) = setup(1).await;
    put(&clients, &stream, &["o1", "poison", "o3"]).await;
    let function = failing_at("poison");
    let mut mapping = KinesisMapping::new(&stream, Some(failures.clone()));
    drain(&clients, &mut mapping, &function).await;
    // The first invocation, then five retries from the checkpoint at the poison record; with
    // bisection on, each retry hands over only what remains from it.
    let mut expected = keys(&[&["o1", "poison", "o3"]]);
    expected.extend(std::iter::repeat_n(vec!["poison".to_string(), "o3".to_string()], 5));
    assert_eq!(function.calls(), expected);
    let records = failure_records(&clients, &failures).await;
    assert_eq!(records.len(), 1, "one invocation record for the discarded batch");
    let record = &records[0];
    assert_eq!(record["requestContext"]["condition"], "RetryAttemptsExhausted");
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 6);
    assert!(record.get("DDBStreamBatchInfo").is_none());
    let info = &record["KinesisBatchInfo"];
    assert_eq!(info["shardId"], "shardId-000000000000");
    assert_eq!(info["batchSize"], 2, "the poison record and o3 behind it: o1 was checkpointed");
    assert!(info["streamArn"].as_str().is_some_and(|a| a.starts_with("arn:aws:kinesis:") && a.ends_with(&stream)));
    assert!(info["approximateArrivalOfFirstRecord"].as_str().is_some_and(|s| s.ends_with('Z')));
    assert!(info["approximateArrivalOfLastRecord"].as_str().is_some_and(|s| s.ends_with('Z')));
    let (start, end) = (info["startSequenceNumber"].as_str().unwrap(), info["endSequenceNumber"].as_str().unwrap());
    assert!(start.len() < end.len() || (start.len() == end.len() && start < end), "poison to o3");
    // The checkpoint is past the discarded batch: the records behind it are delivered.
    put(&clients, &stream, &["o4", "o5"]).await;
    drain(&clients, &mut mapping, &function).await;
    assert_eq!(function.calls().last().unwrap(), &vec!["o4".to_string(), "o5".to_string()]);
}

#[tokio::test]
async fn a_partial_failure_checkpoints_at_the_lowest_failed_sequence_number() {
    let (clients, stream, failures) = setup(1).await;
    put(&clients, &stream, &["o1", "o2", "o3", "o4"]).await;
    // The first answer names o4, then o2 (out of order); later ones succeed.
    let function = Script::new(|n, batch| match n {
        0 => Ok(failing(&[seq_of(batch, "o4"), seq_of(batch, "o2")])),
        _ => Ok(KinesisEventResponse::default()),
    });
    let mut mapping = KinesisMapping::new(&stream, Some(failures.clone()));
    drain(&clients, &mut mapping, &function).await;
    assert_eq!(function.calls(), keys(&[&["o1", "o2", "o3", "o4"], &["o2", "o3", "o4"]]), "redelivered from o2");
    assert!(failure_records(&clients, &failures).await.is_empty());
}

#[tokio::test]
async fn an_unknown_or_empty_item_identifier_fails_the_whole_batch() {
    let (clients, stream, failures) = setup(1).await;
    put(&clients, &stream, &["o1", "o2"]).await;
    let function = Script::new(|n, _| match n {
        0 => Ok(failing(&["4242"])),
        1 => Ok(failing(&[""])),
        _ => Ok(KinesisEventResponse::default()),
    });
    let mut mapping = KinesisMapping::new(&stream, Some(failures));
    mapping.settings.bisect_on_error = false;
    drain(&clients, &mut mapping, &function).await;
    assert_eq!(function.calls(), keys(&[&["o1", "o2"], &["o1", "o2"], &["o1", "o2"]]), "retried whole");
}

#[tokio::test]
async fn a_function_error_bisects_the_batch_without_spending_retries() {
    let (clients, stream, failures) = setup(1).await;
    put(&clients, &stream, &["o1", "o2", "poison", "o4"]).await;
    let function = Script::new(|_, batch| {
        if batch.iter().any(|(k, _)| k == "poison") {
            Err("Unhandled".into())
        } else {
            Ok(KinesisEventResponse::default())
        }
    });
    let mut mapping = KinesisMapping::new(&stream, Some(failures.clone()));
    drain(&clients, &mut mapping, &function).await;
    let mut expected = keys(&[&["o1", "o2", "poison", "o4"], &["o1", "o2"], &["poison", "o4"]]);
    // Alone, the poison record still has its first attempt and all five retries.
    expected.extend(std::iter::repeat_n(vec!["poison".to_string()], 6));
    expected.push(vec!["o4".to_string()]);
    assert_eq!(function.calls(), expected);
    let records = failure_records(&clients, &failures).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["responseContext"]["functionError"], "Unhandled");
    let info = &records[0]["KinesisBatchInfo"];
    assert_eq!(info["batchSize"], 1, "the poison record alone");
    assert_eq!(info["startSequenceNumber"], info["endSequenceNumber"]);
}

#[tokio::test]
async fn a_split_parent_is_read_to_its_end_before_its_children() {
    let (clients, stream, failures) = setup(1).await;
    put(&clients, &stream, &["before1", "before2", "before3"]).await;
    let function = Script::new(|_, _| Ok(KinesisEventResponse::default()));
    let mut mapping = KinesisMapping::new(&stream, Some(failures));
    mapping.settings.batch_size = 1;
    // One record of the parent is checkpointed before the split.
    esm::poll_kinesis(&clients, &mut mapping, &function).await.unwrap();
    let split = clients.kinesis.split_shard().stream_name(&stream).shard_to_split("shardId-000000000000");
    split.new_starting_hash_key((1u128 << 127).to_string()).send().await.expect("split");
    put(&clients, &stream, &["after1", "after2", "after3"]).await;
    drain(&clients, &mut mapping, &function).await;
    let delivered: Vec<String> = function.calls().into_iter().flatten().collect();
    // The parent's records first, each once (the checkpointed one is not seen again), then the
    // children's, in order within their shard.
    assert_eq!(delivered, ["before1", "before2", "before3", "after1", "after2", "after3"]);
}

#[tokio::test]
async fn replaying_the_failure_queue_delivers_the_discarded_records_and_empties_it() {
    let (clients, stream, failures) = setup(1).await;
    put(&clients, &stream, &["o1", "poison", "o3"]).await;
    let mut mapping = KinesisMapping::new(&stream, Some(failures.clone()));
    mapping.settings.max_retries = 0;
    mapping.settings.bisect_on_error = false;
    drain(&clients, &mut mapping, &failing_at("poison")).await;
    assert_eq!(failure_records(&clients, &failures).await.len(), 1);
    // Still failing: the record stays in the destination.
    let replayed = esm::replay_kinesis_failures(&clients, &mapping, &failing_at("poison")).await.unwrap();
    assert_eq!((replayed.batches, replayed.kept), (0, 1));
    // After the fix: the discarded records are handed over again, and the destination empties.
    let fixed = Script::new(|_, _| Ok(KinesisEventResponse::default()));
    mapping.settings.batch_size = 1;
    let replayed = esm::replay_kinesis_failures(&clients, &mapping, &fixed).await.unwrap();
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (1, 2, 0));
    assert_eq!(fixed.calls(), keys(&[&["poison"], &["o3"]]), "in batches of the batch size");
    assert_eq!(esm::queue_depth(&clients, &failures).await.unwrap(), 0);
}

/// A destination message naming a batch the stream cannot give back (here a shard it no longer
/// has, as after a reshard past retention; on AWS a trimmed sequence number) is kept and named
/// with the cause, and the replay goes on to the messages behind it.
#[tokio::test]
async fn a_batch_the_stream_cannot_give_back_is_kept_and_the_replay_goes_on() {
    let (clients, stream, failures) = setup(1).await;
    put(&clients, &stream, &["o1", "poison", "o3"]).await;
    let mut mapping = KinesisMapping::new(&stream, Some(failures.clone()));
    (mapping.settings.max_retries, mapping.settings.bisect_on_error) = (0, false);
    // First in the queue: a batch on a shard the stream does not have.
    let arn = clients.kinesis.describe_stream_summary().stream_name(&stream).send().await.unwrap();
    let arn = arn.stream_description_summary().unwrap().stream_arn().to_owned();
    let lost = serde_json::json!({"KinesisBatchInfo": {
        "shardId": "shardId-000000000042", "startSequenceNumber": "1", "endSequenceNumber": "2",
        "batchSize": 2, "streamArn": arn,
    }});
    let send = clients.sqs.send_message().queue_url(&failures).message_body(lost.to_string());
    let lost_id = send.send().await.unwrap().message_id().unwrap().to_owned();
    drain(&clients, &mut mapping, &failing_at("poison")).await;
    assert_eq!(failure_records(&clients, &failures).await.len(), 2);

    let fixed = Script::new(|_, _| Ok(KinesisEventResponse::default()));
    let replayed = esm::replay_kinesis_failures(&clients, &mapping, &fixed).await.expect("the replay goes on");
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (1, 2, 1), "{replayed:?}");
    assert_eq!(fixed.calls(), keys(&[&["poison", "o3"]]), "the readable batch behind it");
    let [kept] = replayed.kept_messages.as_slice() else { panic!("one kept: {replayed:?}") };
    assert_eq!(kept.message_id, lost_id, "which one");
    assert!(kept.why.contains("shardId-000000000042"), "why names the batch: {}", kept.why);
    let left = failure_records(&clients, &failures).await;
    assert_eq!(left, vec![lost], "only the unreadable one is left, visible again");
}

/// Without `ReportBatchItemFailures` the mapping does not read the answer's failures, but a
/// replay does: an answer that names a record failed never clears the destination.
#[tokio::test]
async fn a_replay_answer_naming_a_failure_keeps_the_batch_whatever_the_response_types() {
    let (clients, stream, failures) = setup(1).await;
    put(&clients, &stream, &["o1", "poison", "o3"]).await;
    let mut mapping = KinesisMapping::new(&stream, Some(failures.clone()));
    (mapping.settings.max_retries, mapping.settings.bisect_on_error) = (0, false);
    mapping.settings.report_batch_item_failures = false;
    let down = Script::new(|_, _| Err("the function is down".into()));
    drain(&clients, &mut mapping, &down).await;
    assert_eq!(failure_records(&clients, &failures).await.len(), 1);

    let still_failing = failing_at("poison");
    let replayed = esm::replay_kinesis_failures(&clients, &mapping, &still_failing).await.unwrap();
    assert_eq!((replayed.batches, replayed.kept), (0, 1), "{replayed:?}");
    assert_eq!(still_failing.calls(), keys(&[&["o1", "poison", "o3"]]));
    assert_eq!(failure_records(&clients, &failures).await.len(), 1, "the destination message is kept");
}
