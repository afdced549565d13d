//! The Kafka consumer on the local AWS, fed Lambda's events directly: one ledger entry per
//! payment event id, however often the payment arrives: at two offsets of one partition (a
//! producer retry), in two partitions, in a later batch, in a batch delivered again.

use crate::support::{balance, deliver, entries, payment, record, Tables};

/// A producer that lost its send's answer and sent again: the same payment at two offsets of
/// one partition, in one batch. The copy runs after the first and is answered from it; nothing
/// is reported failed, so the partition is committed.
#[tokio::test]
async fn the_same_payment_at_two_offsets_of_one_partition_posts_once() {
    let tables = Tables::fresh().await;
    let payments = tables.payments();
    let value = payment("pay_0001", "acct_42", 1250);
    let delivered = deliver(&payments, &[record(0, 15, &value), record(0, 16, &value)]).await;
    assert!(delivered.all_succeeded(), "the copy is a duplicate, not a failure: {delivered:?}");
    assert_eq!(entries(&payments, "acct_42").await, [("pay_0001".to_owned(), 1250)]);
    assert_eq!(balance(&payments, "acct_42").await, Some((1250, 1)));
}

/// The same payment in two partitions of one batch (a producer retry that picked another
/// partition): the event id joins the two copies, so the second does not find the first in
/// progress and hold its partition.
#[tokio::test]
async fn the_same_payment_in_two_partitions_posts_once() {
    let tables = Tables::fresh().await;
    let payments = tables.payments();
    let value = payment("pay_0002", "acct_42", 800);
    let other = payment("pay_0003", "acct_7", 300);
    let batch = [record(0, 3, &value), record(1, 9, &other), record(1, 10, &value)];
    let delivered = deliver(&payments, &batch).await;
    assert!(delivered.all_succeeded(), "the copy is a duplicate, not a failure: {delivered:?}");
    assert_eq!(entries(&payments, "acct_42").await, [("pay_0002".to_owned(), 800)]);
    assert_eq!(balance(&payments, "acct_42").await, Some((800, 1)));
    assert_eq!(balance(&payments, "acct_7").await, Some((300, 1)));
}

/// The producer's retry lands in a later batch, at a new offset, and another sandbox handles it
/// (no answer remembered in memory): the payment's record in the idempotency table answers it.
#[tokio::test]
async fn a_producer_retry_in_a_later_batch_at_a_new_offset_posts_nothing() {
    let tables = Tables::fresh().await;
    let value = payment("pay_0004", "acct_42", 4200);
    assert!(deliver(&tables.payments(), &[record(0, 100, &value)]).await.all_succeeded());
    let other_sandbox = tables.payments();
    let retried = deliver(&other_sandbox, &[record(2, 7, &value)]).await;
    assert!(retried.all_succeeded(), "the retry is answered as a duplicate: {retried:?}");
    assert_eq!(entries(&other_sandbox, "acct_42").await, [("pay_0004".to_owned(), 4200)]);
    assert_eq!(balance(&other_sandbox, "acct_42").await, Some((4200, 1)));
}

/// A batch delivered again whole (the offsets were never committed: the function timed out
/// after its transactions, or the group rebalanced): every record is answered from its
/// payment's record, the balances do not move, nothing fails.
#[tokio::test]
async fn a_redelivered_batch_changes_nothing() {
    let tables = Tables::fresh().await;
    let batch = [
        record(0, 1, &payment("pay_0010", "acct_1", 1000)),
        record(0, 2, &payment("pay_0011", "acct_1", -400)),
        record(1, 1, &payment("pay_0012", "acct_2", 250)),
    ];
    assert!(deliver(&tables.payments(), &batch).await.all_succeeded());
    let again = deliver(&tables.payments(), &batch).await;
    assert!(again.all_succeeded(), "duplicates are successes, not failures: {again:?}");
    let payments = tables.payments();
    assert_eq!(balance(&payments, "acct_1").await, Some((600, 2)));
    assert_eq!(balance(&payments, "acct_2").await, Some((250, 1)));
}
