//! The Kinesis consumer behind the event source mapping emulator (`local`), on a stream of the
//! local AWS: what Lambda does around the handler (retries from the checkpoint, the on-failure
//! destination, parents before children after a reshard, a checkpoint lost) still ends with each
//! order stored once and confirmed once.

mod common;

use aws_sdk_kinesis::primitives::Blob;
use effectively_once_effects::testing::unique_name;
use effectively_once_lambda::events::{Context, KinesisEventRecord};
use effectively_once_lambda::{Handler, RecordError, RecordResult};
use local::esm::{self, KinesisMapping};
use local::invoke::{InProcess, KinesisFunction};
use local::resources::Clients;
use serde_json::Value;

use common::{assert_once, new_order, order_count, order_data, orders, stored_total};

/// A stream of `shards` shards and an on-failure destination, both the test's own.
async fn stream(shards: i32) -> (Clients, String, String) {
    let clients = Clients::local().await;
    let stream = unique_name("kin-orders");
    clients.kinesis.create_stream().stream_name(&stream).shard_count(shards).send().await.expect("create stream");
    let queue = clients.sqs.create_queue().queue_name(unique_name("kin-orders-fail")).send().await.expect("queue");
    (clients, stream, queue.queue_url().expect("queue url").to_owned())
}

/// Puts an order on `partition_key`; its sequence number.
async fn put(clients: &Clients, stream: &str, partition_key: &str, data: Vec<u8>) -> String {
    let put = clients.kinesis.put_record().stream_name(stream).partition_key(partition_key).data(Blob::new(data));
    put.send().await.expect("put record").sequence_number().to_owned()
}

/// Polls every shard until a poll hands nothing over.
async fn drain<F: KinesisFunction>(clients: &Clients, mapping: &mut KinesisMapping, function: &F) {
    for _ in 0..60 {
        if esm::poll_kinesis(clients, mapping, function).await.expect("poll").delivered == 0 {
            return;
        }
    }
    panic!("the stream never settled");
}

/// The handler, failing one order with a retryable error on every delivery (a downstream that
/// refuses it, say): the order never takes effect, and the driver makes it the checkpoint.
struct FailingFor<H> {
    inner: H,
    order_id: String,
}

impl<H: Handler<KinesisEventRecord>> Handler<KinesisEventRecord> for FailingFor<H> {
    async fn handle(&self, record: &KinesisEventRecord, context: &Context) -> RecordResult {
        let data: Value = serde_json::from_slice(&record.kinesis.data).unwrap_or_default();
        if data["order_id"] == self.order_id.as_str() {
            return Err(RecordError::retryable("injected: the order keeps failing"));
        }
        self.inner.handle(record, context).await
    }

    fn key(&self, record: &KinesisEventRecord) -> Option<String> {
        self.inner.key(record)
    }
}

/// A record that keeps failing is retried from the checkpoint the mapping's five times, then its
/// batch (it, and what was handed over behind it) goes to the on-failure destination and the
/// shard moves on. Orders on other partition keys were stored on the first delivery and are
/// duplicates in the retries; the order held behind it on its key is in the discarded batch and
/// is stored, once, when the destination is replayed after the fix.
#[tokio::test]
async fn a_record_that_keeps_failing_goes_to_the_destination_and_the_shard_moves_on() {
    let (clients, stream, failures) = stream(1).await;
    let handler = orders().await;
    let placed: Vec<(String, String)> = (0..4).map(|_| new_order()).collect();
    let [(first, first_email), (stuck, stuck_email), (other_key, other_email), (behind, behind_email)] =
        <[_; 4]>::try_from(placed).unwrap();
    put(&clients, &stream, "customer-a", order_data(&first, &first_email, 1)).await;
    let stuck_sequence = put(&clients, &stream, "customer-a", order_data(&stuck, &stuck_email, 2)).await;
    put(&clients, &stream, "customer-b", order_data(&other_key, &other_email, 3)).await;
    put(&clients, &stream, "customer-a", order_data(&behind, &behind_email, 4)).await;

    let failing = InProcess::new(FailingFor { inner: &handler, order_id: stuck.clone() }, "kinesis-consumer");
    let mut mapping = KinesisMapping::new(&stream, Some(failures.clone()));
    drain(&clients, &mut mapping, &failing).await;

    let discarded = esm::peek_bodies(&clients, &failures).await.expect("peek the destination");
    assert_eq!(discarded.len(), 1, "one discarded batch: {discarded:?}");
    let discarded: Value = serde_json::from_str(&discarded[0]).expect("an invocation record");
    assert_eq!(discarded["requestContext"]["condition"], "RetryAttemptsExhausted");
    assert_eq!(discarded["requestContext"]["approximateInvokeCount"], 6, "the first delivery and 5 retries");
    let info = &discarded["KinesisBatchInfo"];
    assert_eq!(info["startSequenceNumber"], stuck_sequence.as_str(), "the batch starts at the checkpoint");
    assert_eq!(info["batchSize"], 3, "the failing order and the two behind it");
    assert_once(&handler, &first, &first_email, 1).await;
    assert_once(&handler, &other_key, &other_email, 3).await;
    assert_eq!(stored_total(&handler, &stuck).await, None);
    assert_eq!(stored_total(&handler, &behind).await, None, "held behind the failing order on its key");

    // The shard moved on: orders put after the discarded batch are delivered and stored.
    let (later, later_email) = new_order();
    put(&clients, &stream, "customer-a", order_data(&later, &later_email, 5)).await;
    drain(&clients, &mut mapping, &failing).await;
    assert_once(&handler, &later, &later_email, 5).await;

    // After the fix, replaying the destination stores what it held, once; the order on the other
    // key, in the batch too, is a duplicate.
    let fixed = InProcess::new(&handler, "kinesis-consumer");
    let replayed = esm::replay_kinesis_failures(&clients, &mapping, &fixed).await.expect("replay");
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (1, 3, 0));
    for (id, email, total) in [
        (&first, &first_email, 1),
        (&stuck, &stuck_email, 2),
        (&other_key, &other_email, 3),
        (&behind, &behind_email, 4),
    ] {
        assert_once(&handler, id, email, total).await;
    }
    assert_eq!(order_count(&handler).await, 5);
}

/// A stream split while the consumer reads it: part of the parent's orders processed, the shard
/// split, and the parent's records delivered again from the start (its checkpoint not taken: a
/// lost answer, a poller that took over), then the children's. A producer that retried a put
/// during the split wrote one order again into a child under a new sequence number. Each order
/// is stored and confirmed once.
#[tokio::test]
async fn a_resharded_stream_stores_and_confirms_each_order_once() {
    let (clients, stream, failures) = stream(1).await;
    let handler = orders().await;
    let before: Vec<(String, String)> = (0..4).map(|_| new_order()).collect();
    for (n, (id, email)) in before.iter().enumerate() {
        put(&clients, &stream, &format!("customer-{n}"), order_data(id, email, 100 + n as i64)).await;
    }
    let function = InProcess::new(&handler, "kinesis-consumer");
    let mut mapping = KinesisMapping::new(&stream, Some(failures));
    mapping.settings.batch_size = 2;
    // The checkpoint as it stood before any batch: what a mapping that lost it reads from.
    let mut lost = mapping.clone();
    esm::poll_kinesis(&clients, &mut mapping, &function).await.expect("poll");
    assert_eq!(order_count(&handler).await, 2, "part of the parent processed before the split");

    let split = clients.kinesis.split_shard().stream_name(&stream).shard_to_split("shardId-000000000000");
    split.new_starting_hash_key((1u128 << 127).to_string()).send().await.expect("split");
    let after: Vec<(String, String)> = (0..4).map(|_| new_order()).collect();
    for (n, (id, email)) in after.iter().enumerate() {
        put(&clients, &stream, &format!("customer-{n}"), order_data(id, email, 200 + n as i64)).await;
    }
    // The producer's retry of a put whose answer it lost: an order of the parent, again.
    let (retried, retried_email) = &before[1];
    put(&clients, &stream, "customer-1-retry", order_data(retried, retried_email, 101)).await;

    drain(&clients, &mut lost, &function).await;
    drain(&clients, &mut mapping, &function).await;
    for (n, (id, email)) in before.iter().enumerate() {
        assert_once(&handler, id, email, 100 + n as i64).await;
    }
    for (n, (id, email)) in after.iter().enumerate() {
        assert_once(&handler, id, email, 200 + n as i64).await;
    }
    assert_eq!(order_count(&handler).await, 8);
    let counts = function.counts();
    assert!(counts.duplicate >= 7, "the parent's 4 orders and the retry came again: {counts:?}");
}

/// A producer that lost `PutRecord`'s answer puts the order again under another partition key:
/// two records, two sequence numbers, here on two shards read apart. One item, one email.
#[tokio::test]
async fn a_producer_retry_on_another_shard_is_one_item_and_one_email() {
    let (clients, stream, failures) = stream(2).await;
    let handler = orders().await;
    let (id, email) = new_order();
    let (earlier, earlier_email) = new_order();
    let data = order_data(&id, &email, 4200);
    // Shard 0 holds hash keys below 2^127, shard 1 the rest. An earlier order on shard 1 first:
    // sequence numbers are per shard, and the copies must not share one by chance.
    let puts = [
        ("customer-2", 1u128 << 127, order_data(&earlier, &earlier_email, 1)),
        ("customer-1", 0, data.clone()),
        ("customer-1-retry", u128::MAX, data),
    ];
    let mut copies = Vec::new();
    for (partition_key, hash, data) in puts {
        let put = clients.kinesis.put_record().stream_name(&stream).partition_key(partition_key);
        let out = put.explicit_hash_key(hash.to_string()).data(Blob::new(data)).send().await.expect("put");
        copies.push((out.shard_id().to_owned(), out.sequence_number().to_owned()));
    }
    let (original, retry) = (&copies[1], &copies[2]);
    assert_ne!(original.0, retry.0, "the copies are on two shards");
    assert_ne!(original.1, retry.1, "the copies have two sequence numbers");
    let function = InProcess::new(&handler, "kinesis-consumer");
    let mut mapping = KinesisMapping::new(&stream, Some(failures));
    drain(&clients, &mut mapping, &function).await;
    assert_once(&handler, &id, &email, 4200).await;
    assert_once(&handler, &earlier, &earlier_email, 1).await;
    assert_eq!(order_count(&handler).await, 2);
    let counts = function.counts();
    assert_eq!((counts.applied, counts.duplicate, counts.failed), (2, 1, 0), "{counts:?}");
}
