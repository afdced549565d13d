//! Review (final): an in-batch copy of an event id with another payload, whose first copy failed
//! for good without taking the key, is committed after the whole batch, out of its account's
//! order: a later debit of that account that posting one by one applies is rejected for good.

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::Outcome;
use end_to_end::LedgerHarness;
use payments::{PaymentEvent, Posting};

fn summary(result: &Result<Outcome<Posting>, payments::Error>) -> String {
    match result {
        Ok(Outcome::Fresh(posting)) => format!("fresh {posting:?}"),
        Ok(Outcome::Replayed(posting)) => format!("replayed {posting:?}"),
        Err(payments::Error::Idempotency(error)) => format!("error {:?}", error.kind()),
        Err(error) => format!("error retryable={}", error.is_retryable()),
    }
}

/// An entry with no record (written before records were kept apart, or its record deleted): the
/// ledger handles it as the effect, so another amount under its event id is key reuse.
async fn legacy_entry(h: &LedgerHarness, account: &str, event_id: &str, amount_cents: i64) {
    h.ledger
        .client()
        .put_item()
        .table_name(h.ledger.table())
        .item("pk", AttributeValue::S(format!("account#{account}")))
        .item("sk", AttributeValue::S(format!("entry#{event_id}")))
        .item("amount_cents", AttributeValue::N(amount_cents.to_string()))
        .item("currency", AttributeValue::S("USD".into()))
        .item("event_id", AttributeValue::S(event_id.into()))
        .item("posted_at", AttributeValue::S("2026-01-01T00:00:00Z".into()))
        .send()
        .await
        .expect("legacy entry");
}

fn batch() -> Vec<PaymentEvent> {
    vec![
        // The entry of acct-a holds 999 under this id: key reuse, no record written.
        LedgerHarness::event("ord-x", "acct-a", 100, "USD"),
        // The same id, another payload: one by one, the key is free, so it applies (a credit).
        LedgerHarness::event("ord-x", "acct-b", 100, "USD"),
        // A debit of acct-b after that credit: one by one, it is covered.
        LedgerHarness::event("ord-y", "acct-b", -100, "USD"),
    ]
}

#[tokio::test]
async fn a_copy_with_another_payload_keeps_its_accounts_order() {
    // One by one, in batch order.
    let one = LedgerHarness::new().await;
    legacy_entry(&one, "acct-a", "ord-x", 999).await;
    let mut sequential = Vec::new();
    for event in batch() {
        sequential.push(summary(&one.ledger.post(&event).await));
    }
    assert_eq!(sequential, ["error KeyReused", "fresh Applied", "fresh Applied"], "the reference");

    // The batch path, on fresh tables in the same state.
    let h = LedgerHarness::new().await;
    legacy_entry(&h, "acct-a", "ord-x", 999).await;
    let batched: Vec<String> = h.ledger.post_batch(&batch()).await.iter().map(summary).collect();
    let balance = h.ledger.balance("acct-b").await.unwrap().map(|b| b.balance_cents);
    assert_eq!(
        (batched, balance),
        (sequential, Some(0)),
        "the batch answers as posting one by one would (acct-b: +100 then -100)"
    );
}
