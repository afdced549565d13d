//! What Lambda's event source mapping does around the handler, played with built events:
//! retries from the checkpoint until the batch goes to the on-failure destination and the shard
//! moves on, parents read again before children after a reshard with a checkpoint lost, copies on
//! two shards. Each order is still stored once and confirmed once.

use effectively_once_lambda::events::{Context, KinesisEventRecord};
use effectively_once_lambda::testing::kinesis::{Batch, Record};
use effectively_once_lambda::{Handler, RecordError, RecordResult};
use serde_json::Value;

use crate::support::{assert_once, deliver, new_order, order_count, order_data, orders, stored_total};

/// Lambda's retries of a batch whose checkpoint does not move before it goes to the on-failure
/// destination (`MaximumRetryAttempts` in the template).
const RETRIES: usize = 5;

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

/// The records from `checkpoint` on: what Lambda delivers again after an answer naming it.
fn from_checkpoint(records: &[KinesisEventRecord], checkpoint: &str) -> Vec<KinesisEventRecord> {
    let at = records.iter().position(|r| r.kinesis.sequence_number == checkpoint);
    records[at.expect("the checkpoint is a record of the batch")..].to_vec()
}

/// A record that keeps failing is the checkpoint of the first delivery and of each retry; the
/// batch from it (it, and what is behind it) then goes to the on-failure destination and the
/// shard moves on. Orders on other partition keys were stored on the first delivery and are
/// duplicates in the retries; the order held behind it on its key is in the discarded batch and
/// is stored, once, when the destination is replayed after the fix.
#[tokio::test]
async fn a_record_that_keeps_failing_goes_to_the_destination_and_the_shard_moves_on() {
    let handler = orders().await;
    let placed: Vec<(String, String)> = (0..4).map(|_| new_order()).collect();
    let [(first, first_email), (stuck, stuck_email), (other_key, other_email), (behind, behind_email)] =
        <[_; 4]>::try_from(placed).unwrap();
    let batch = Batch::new()
        .record(Record::new("customer-a", order_data(&first, &first_email, 1)))
        .record(Record::new("customer-a", order_data(&stuck, &stuck_email, 2)))
        .record(Record::new("customer-b", order_data(&other_key, &other_email, 3)))
        .record(Record::new("customer-a", order_data(&behind, &behind_email, 4)))
        .build();
    let stuck_sequence = batch.records[1].kinesis.sequence_number.clone();

    let failing = FailingFor { inner: &handler, order_id: stuck.clone() };
    let mut delivery = batch.records.clone();
    for attempt in 0..=RETRIES {
        let delivered = deliver(&failing, &delivery).await;
        assert_eq!(delivered.checkpoint, std::slice::from_ref(&stuck_sequence), "attempt {attempt}: {delivered:?}");
        delivery = from_checkpoint(&delivery, &stuck_sequence);
    }
    let discarded = delivery;
    assert_eq!(discarded.len(), 3, "the failing order and the two behind it");
    assert_once(&handler, &first, &first_email, 1).await;
    assert_once(&handler, &other_key, &other_email, 3).await;
    assert_eq!(stored_total(&handler, &stuck).await, None);
    assert_eq!(stored_total(&handler, &behind).await, None, "held behind the failing order on its key");

    // The shard moved on: orders put after the discarded batch are delivered and stored.
    let (later, later_email) = new_order();
    let next = Batch::new().sequence_from(5).record(Record::new("customer-a", order_data(&later, &later_email, 5)));
    assert!(deliver(&failing, &next.build().records).await.all_succeeded());
    assert_once(&handler, &later, &later_email, 5).await;

    // After the fix, replaying the destination stores what it held, once; the order on the other
    // key, in the batch too, is a duplicate.
    assert!(deliver(&handler, &discarded).await.all_succeeded());
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
    let handler = orders().await;
    let before: Vec<(String, String)> = (0..4).map(|_| new_order()).collect();
    let parent = before.iter().enumerate().fold(Batch::new(), |batch, (n, (id, email))| {
        batch.record(Record::new(format!("customer-{n}"), order_data(id, email, 100 + n as i64)))
    });
    let parent = parent.build().records;
    // Batches of two: the first processed before the split.
    assert!(deliver(&handler, &parent[..2]).await.all_succeeded());
    assert_eq!(order_count(&handler).await, 2, "part of the parent processed before the split");

    let after: Vec<(String, String)> = (0..4).map(|_| new_order()).collect();
    let child = |shard: &str, orders: &[(String, String)], from: usize| {
        let batch = Batch::new().shard(shard);
        let batch = orders.iter().enumerate().fold(batch, |batch, (n, (id, email))| {
            batch.record(Record::new(format!("customer-{}", from + n), order_data(id, email, 200 + (from + n) as i64)))
        });
        batch.build().records
    };
    let mut first_child = child("shardId-000000000001", &after[..2], 0);
    let second_child = child("shardId-000000000002", &after[2..], 2);
    // The producer's retry of a put whose answer it lost: an order of the parent, again.
    let (retried, retried_email) = &before[1];
    let retry = Batch::new().shard("shardId-000000000001").sequence_from(3);
    let retry = retry.record(Record::new("customer-1-retry", order_data(retried, retried_email, 101)));
    first_child.extend(retry.build().records);

    // The parent again from its start (the checkpoint lost), then the children.
    for batch in parent.chunks(2).chain(first_child.chunks(2)).chain(second_child.chunks(2)) {
        let delivered = deliver(&handler, batch).await;
        assert!(delivered.all_succeeded(), "a duplicate is a success: {delivered:?}");
    }
    for (n, (id, email)) in before.iter().enumerate() {
        assert_once(&handler, id, email, 100 + n as i64).await;
    }
    for (n, (id, email)) in after.iter().enumerate() {
        assert_once(&handler, id, email, 200 + n as i64).await;
    }
    assert_eq!(order_count(&handler).await, 8);
}

/// A producer that lost `PutRecord`'s answer puts the order again under another partition key:
/// two records, two sequence numbers, on two shards read apart (sequence numbers are per shard,
/// so an earlier order on the second shard keeps the copies from sharing one). One item, one
/// email.
#[tokio::test]
async fn a_producer_retry_on_another_shard_is_one_item_and_one_email() {
    let handler = orders().await;
    let (id, email) = new_order();
    let (earlier, earlier_email) = new_order();
    let data = order_data(&id, &email, 4200);
    let shard_0 = Batch::new().record(Record::new("customer-1", data.clone())).build().records;
    let shard_1 = Batch::new()
        .shard("shardId-000000000001")
        .record(Record::new("customer-2", order_data(&earlier, &earlier_email, 1)))
        .record(Record::new("customer-1-retry", data))
        .build()
        .records;
    let (original, retry) = (&shard_0[0].kinesis.sequence_number, &shard_1[1].kinesis.sequence_number);
    assert_ne!(original, retry, "the copies have two sequence numbers");
    for records in [&shard_0, &shard_1] {
        let delivered = deliver(&handler, records).await;
        assert!(delivered.all_succeeded(), "the copy is a duplicate, not a failure: {delivered:?}");
    }
    assert_once(&handler, &id, &email, 4200).await;
    assert_once(&handler, &earlier, &earlier_email, 1).await;
    assert_eq!(order_count(&handler).await, 2);
}
