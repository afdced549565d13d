//! The outbox sweeper on the rows it reads from the pending index: each row that no send will
//! change leaves the index, so none is read by every sweep, nor hides the rows behind it.

use crate::support;
use crate::support::Pending;
use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once_effects::{Policy, RecordingSender};
use payments::outbox::pending_shard;
use receipts_relay::{Sweep, Sweeper};

/// Long after the rows were written (the sample's time).
const LATER_MS: u64 = 4_102_444_800_000;

/// A sweep of `p`'s outbox as `sweep` says, sending with `sender`, at most once.
fn sweeper<'a>(p: &Pending, sender: &'a RecordingSender, sweep: Sweep) -> Sweeper<&'a RecordingSender> {
    Sweeper::new(support::relay(p.markers(), sender, &p.outbox_table, Policy::AtMostOnce), sweep)
}

/// `p`'s row keyed `key`, read consistently.
async fn item(p: &Pending, key: &str) -> std::collections::HashMap<String, AttributeValue> {
    let out = p.client.get_item().table_name(&p.outbox_table).key("pk", AttributeValue::S(key.into()));
    out.consistent_read(true).send().await.unwrap().item.unwrap()
}

/// A row in the pending index that is not a receipt the relay may send (here its amount is
/// gone): no retry mends it, so the sweep marks it FAILED with the reason, sends nothing, and the
/// row leaves the index, so the next sweep neither reads it again nor counts it unsent again.
#[tokio::test]
async fn a_pending_row_that_is_not_a_receipt_is_marked_failed_once_by_the_sweep() {
    let p = Pending::new("broken").await;
    p.client
        .update_item()
        .table_name(&p.outbox_table)
        .key("pk", AttributeValue::S(format!("receipt#{}", p.event_id)))
        .update_expression("REMOVE amount_cents")
        .send()
        .await
        .unwrap();
    let sender = RecordingSender::new();
    let sweeper = sweeper(&p, &sender, Sweep::default());
    let swept = sweeper.run(LATER_MS, None).await;
    assert_eq!((swept.found, swept.unsent, swept.sent), (1, 1, 0), "{swept:?}");
    let row = item(&p, &format!("receipt#{}", p.event_id)).await;
    assert_eq!(row["status"].as_s().unwrap(), "FAILED");
    assert!(row["failure_reason"].as_s().unwrap().contains("amount_cents"), "{row:?}");
    assert!(!row.contains_key("pending_shard"), "out of the pending index");
    let again = sweeper.run(LATER_MS, None).await;
    assert_eq!((again.found, again.unsent, again.complete), (0, 0, true), "{again:?}");
    assert!(sender.sent().is_empty(), "nothing sent");
}

/// Rows older than a pending receipt, in its shard, that are no longer PENDING but still carry
/// the index's shard (marked by a relay older than the index, or given a status by another
/// writer): the first sweep takes them out of the index, so a sweep whose budget they would fill
/// reaches the pending receipt behind them and sends it, once.
#[tokio::test]
async fn rows_settled_but_left_in_the_index_leave_it_and_hide_no_pending_receipt() {
    let p = Pending::new("behind").await;
    let shard = pending_shard(&p.event_id);
    let mut stuck = Vec::new();
    for (i, status) in (0..).zip(["SENT", "SENT", "ARCHIVED"]) {
        let event_id =
            (0..).map(|n| format!("{}-old{i}-{n}", p.event_id)).find(|id| pending_shard(id) == shard).unwrap();
        let mut row: std::collections::HashMap<String, AttributeValue> = p.item.clone().into();
        row.insert("pk".into(), AttributeValue::S(format!("receipt#{event_id}")));
        row.insert("event_id".into(), AttributeValue::S(event_id.clone()));
        row.insert("status".into(), AttributeValue::S(status.into()));
        row.insert("created_at".into(), AttributeValue::S(format!("2026-11-18T10:00:0{i}.000Z")));
        p.client.put_item().table_name(&p.outbox_table).set_item(Some(row)).send().await.unwrap();
        stuck.push(format!("receipt#{event_id}"));
    }
    let sender = RecordingSender::new();
    let sweeper = sweeper(&p, &sender, Sweep { after: std::time::Duration::ZERO, page_size: 2, max_rows: 3 });
    let first = sweeper.run(LATER_MS, None).await;
    assert_eq!((first.found, first.sent), (3, 0), "the budget went on the stuck rows: {first:?}");
    for key in &stuck {
        assert!(!item(&p, key).await.contains_key("pending_shard"), "{key} left the index");
    }
    let second = sweeper.run(LATER_MS, None).await;
    assert_eq!((second.found, second.sent, second.complete), (1, 1, true), "{second:?}");
    assert_eq!(sender.sent().len(), 1, "the receipt behind them, once");
    assert_eq!(p.status().await, "SENT");
    let third = sweeper.run(LATER_MS, None).await;
    assert_eq!((third.found, third.complete), (0, true), "{third:?}");
}

/// A row the index still holds that is not a receipt the relay may send, but is no longer
/// PENDING (SENT with its message id by a relay older than the index, with a field the relay
/// now checks missing): its fate stays as recorded, never FAILED over an email that went out,
/// and it leaves the index.
#[tokio::test]
async fn a_marked_row_that_no_longer_reads_keeps_its_fate_and_leaves_the_index() {
    let p = Pending::new("sent-before").await;
    let key = format!("receipt#{}", p.event_id);
    p.client
        .update_item()
        .table_name(&p.outbox_table)
        .key("pk", AttributeValue::S(key.clone()))
        .update_expression("SET #status = :sent, message_id = :id REMOVE amount_cents")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":sent", AttributeValue::S("SENT".into()))
        .expression_attribute_values(":id", AttributeValue::S("m-1".into()))
        .send()
        .await
        .unwrap();
    let sender = RecordingSender::new();
    let sweeper = sweeper(&p, &sender, Sweep::default());
    let swept = sweeper.run(LATER_MS, None).await;
    assert_eq!((swept.found, swept.sent, swept.unsent), (1, 0, 0), "{swept:?}");
    let row = item(&p, &key).await;
    assert_eq!((row["status"].as_s().unwrap().as_str(), row["message_id"].as_s().unwrap().as_str()), ("SENT", "m-1"));
    assert!(!row.contains_key("failure_reason"), "{row:?}");
    assert!(!row.contains_key("pending_shard"), "out of the pending index");
    assert!(sender.sent().is_empty());
}
