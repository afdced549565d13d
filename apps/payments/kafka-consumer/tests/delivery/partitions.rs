//! On the ordered path (`kafka::process_ordered`), a record that fails in a way a later
//! delivery may undo holds its partition from that record and only that partition, as on the
//! batch path (`kafka::process_batch`): a later record of another partition is not held back
//! because it happens to carry the same account, and the partition behind it is not stalled.

use crate::support::{balance, deliver, deliver_ordered, payment, payment_with_receipt, record, Tables};

/// Partition 0: a payment of acct_1 asking for a receipt on a ledger with no outbox table
/// (retryable until the fix is deployed). Partition 1: acct_9, then a credit of acct_1, then
/// acct_8. Nothing orders the partitions, and no record of partition 1 follows the failed one
/// (neither its partition nor its event id), so the rounds post partition 1 whole and name only
/// the failed record. The ordered path must answer the same: not stall partition 1 (and acct_8,
/// an account the failure never touched) for as long as partition 0's record keeps failing.
#[tokio::test]
async fn a_failure_holds_no_other_partition_through_a_shared_account() {
    let batch = [
        record(0, 10, &payment_with_receipt("pay_0701", "acct_1", 500, "alice@example.com")),
        record(1, 20, &payment("pay_0702", "acct_9", 100)),
        record(1, 21, &payment("pay_0703", "acct_1", 300)),
        record(1, 22, &payment("pay_0704", "acct_8", 50)),
    ];
    let (ordered, batched) = (Tables::fresh().await, Tables::fresh().await);
    let by_batch = deliver(&batched.payments(), &batch).await;
    assert_eq!(by_batch.named, [("payments-0".to_owned(), 10)], "the rounds: only the failed record's partition");
    let by_order = deliver_ordered(&ordered.payments(), &batch).await;
    assert_eq!(by_order.named, by_batch.named, "the ordered path answers as the rounds: {by_order:?}");
    assert_eq!(balance(&ordered.payments(), "acct_8").await, Some((50, 1)), "acct_8 is not held behind acct_1");
}
