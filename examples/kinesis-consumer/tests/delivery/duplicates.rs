//! The Kinesis consumer on the local AWS, fed Lambda's events directly: one order item and one
//! confirmation per order id, however often the order arrives, in one batch or in several, under
//! one partition key or another, at whatever sequence number.

use crate::support::{assert_once, deliver, new_order, order_count, order_data, orders, record};

/// The same order twice in one batch, on one partition key: the copies run one after the other,
/// the second is answered from the first, and nothing is reported failed (no redelivery).
#[tokio::test]
async fn the_same_order_twice_on_one_partition_key_in_one_batch_is_one_item_and_one_email() {
    let handler = orders().await;
    let (id, email) = new_order();
    let data = order_data(&id, &email, 4200);
    let delivered = deliver(&handler, &[record("customer-1", 1, &data), record("customer-1", 2, &data)]).await;
    assert!(delivered.all_succeeded(), "the copy is a success (a duplicate), not a failure: {delivered:?}");
    assert_once(&handler, &id, &email, 4200).await;
    assert_eq!(order_count(&handler).await, 1);
}

/// The same order twice in one batch under two partition keys (a producer that retried with a
/// fresh key): the handler's key joins them, so the second copy does not find the first in
/// progress and hold the shard; one item, one email, nothing reported failed.
#[tokio::test]
async fn the_same_order_under_two_partition_keys_in_one_batch_is_one_item_and_one_email() {
    let handler = orders().await;
    let (id, email) = new_order();
    let (other, other_email) = new_order();
    let data = order_data(&id, &email, 1250);
    let batch = [
        record("customer-1", 1, &data),
        record("customer-2", 2, &order_data(&other, &other_email, 99)),
        record("retry-7f3a", 3, &data),
    ];
    let delivered = deliver(&handler, &batch).await;
    assert!(delivered.all_succeeded(), "the copy is a success (a duplicate), not a failure: {delivered:?}");
    assert_once(&handler, &id, &email, 1250).await;
    assert_once(&handler, &other, &other_email, 99).await;
    assert_eq!(order_count(&handler).await, 2);
}

/// The whole batch handled again (its answer was lost, or the function timed out after the
/// commits): every record is answered from its order's record, nothing is added, nothing fails.
#[tokio::test]
async fn a_redelivered_batch_changes_nothing() {
    let handler = orders().await;
    let placed: Vec<(String, String)> = (0..4).map(|_| new_order()).collect();
    let batch: Vec<_> = placed
        .iter()
        .enumerate()
        .map(|(n, (id, email))| {
            record(&format!("customer-{}", n % 2), n as u64, &order_data(id, email, 100 + n as i64))
        })
        .collect();
    assert!(deliver(&handler, &batch).await.all_succeeded());
    let again = deliver(&handler, &batch).await;
    assert!(again.all_succeeded(), "duplicates are successes, not failures: {again:?}");
    for (n, (id, email)) in placed.iter().enumerate() {
        assert_once(&handler, id, email, 100 + n as i64).await;
    }
    assert_eq!(order_count(&handler).await, 4);
}

/// A producer that lost `PutRecord`'s answer and put the order again: the copy arrives in a
/// later batch under a new sequence number and another partition key, and finds the order done.
#[tokio::test]
async fn a_producer_retry_under_a_new_sequence_number_is_one_item_and_one_email() {
    let handler = orders().await;
    let (id, email) = new_order();
    let data = order_data(&id, &email, 700);
    assert!(deliver(&handler, &[record("customer-1", 10, &data)]).await.all_succeeded());
    let retried = deliver(&handler, &[record("customer-1-retry", 11, &data)]).await;
    assert!(retried.all_succeeded(), "the retry is answered as a duplicate: {retried:?}");
    assert_once(&handler, &id, &email, 700).await;
    assert_eq!(order_count(&handler).await, 1);
}
