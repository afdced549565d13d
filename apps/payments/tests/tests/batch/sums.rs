//! A batch whose amounts sum past `i64` (events built by hand past the contract's bounds): it
//! must post as one by one does, not panic in the middle or move the balance by a wrapped sum.

use effectively_once::Outcome;
use end_to_end::{summary, LedgerHarness};
use payments::Posting;

/// Two credits whose sum leaves `i64` (each an `i64` DynamoDB holds, built by hand past the
/// contract's 10^12, as `PaymentEvent::is_plain` and `replay`'s checked sums expect) on an
/// account holding 5. One by one, each credit applies (DynamoDB numbers hold 38 digits). The
/// batch's first transaction is decided on the assumed currency (`replay::assume`), whose
/// running sum is added unchecked: debug builds panic in the middle of the batch; release builds
/// wrap the sum to -2, condition the update on the balance covering 2, and commit both credits
/// as a debit of 2 (balance 3, two entries of `i64::MAX`).
#[tokio::test]
async fn credits_summing_past_i64_are_not_posted_as_a_debit_or_a_panic() {
    let h = LedgerHarness::new().await;
    let seed = LedgerHarness::event("ovf-seed", "ovf", 5, "USD");
    assert!(matches!(h.ledger.post(&seed).await, Ok(Outcome::Fresh(Posting::Applied))));
    let events = vec![
        LedgerHarness::event("ovf-1", "ovf", i64::MAX, "USD"),
        LedgerHarness::event("ovf-2", "ovf", i64::MAX, "USD"),
    ];
    // One by one, on another ledger: each post's own condition (no sum) applies it.
    let single = LedgerHarness::new().await;
    assert!(matches!(single.ledger.post(&seed).await, Ok(Outcome::Fresh(Posting::Applied))));
    let mut one_by_one = Vec::new();
    for event in &events {
        one_by_one.push(summary(&single.ledger.post(event).await));
    }
    assert_eq!(one_by_one, ["fresh Applied", "fresh Applied"]);
    let ledger = h.ledger.clone();
    let batch = events.clone();
    let posted =
        tokio::spawn(async move { ledger.post_batch(&batch).await.iter().map(summary).collect::<Vec<_>>() }).await;
    let answers = match posted {
        Ok(answers) => answers,
        Err(error) => panic!("post_batch panicked in the middle of the batch: {error}"),
    };
    assert_eq!(answers, one_by_one, "the batch answers as one by one");
    // The balance (past i64, so read as a number string) must be 5 + 2 * i64::MAX, never 3.
    let item = h
        .ledger
        .client()
        .get_item()
        .table_name(h.ledger.table())
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("account#ovf".into()))
        .key("sk", aws_sdk_dynamodb::types::AttributeValue::S("balance".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let balance = item.item().and_then(|i| i.get("balance_cents")).cloned();
    let expected = (5i128 + 2 * i64::MAX as i128).to_string();
    assert_eq!(balance, Some(aws_sdk_dynamodb::types::AttributeValue::N(expected)), "the two credits moved it");
}
