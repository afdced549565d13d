//! A batch keeps each account's order: its answers, entries and balances are those of posting
//! its events one by one in batch order, on the local AWS, when an account's events need more
//! than one transaction (over 100 actions: chunks) and when an in-batch copy of an event id
//! carries another payload.

use aws_sdk_dynamodb::types::AttributeValue;
use end_to_end::{summary, LedgerHarness};
use payments::PaymentEvent;

/// Posts `events` as a batch on one ledger and one by one on another; every answer and the
/// account's balance must be the same.
async fn differential(account: &str, seed: &[PaymentEvent], events: &[PaymentEvent]) {
    let batched = LedgerHarness::new().await;
    let single = LedgerHarness::new().await;
    for event in seed {
        batched.ledger.post(event).await.unwrap();
        single.ledger.post(event).await.unwrap();
    }
    let from_batch: Vec<String> = batched.ledger.post_batch(events).await.iter().map(summary).collect();
    let mut one_by_one = Vec::new();
    for event in events {
        one_by_one.push(summary(&single.ledger.post(event).await));
    }
    let differs: Vec<String> = from_batch
        .iter()
        .zip(&one_by_one)
        .enumerate()
        .filter(|(_, (b, s))| b != s)
        .map(|(i, (b, s))| format!("#{i} {}: batch {b}, one by one {s}", events[i].event_id))
        .collect();
    assert!(differs.is_empty(), "answers differ: {differs:?}");
    assert_eq!(batched.ledger.entries(account).await.unwrap(), single.ledger.entries(account).await.unwrap());
    assert_eq!(batched.ledger.balance(account).await.unwrap(), single.ledger.balance(account).await.unwrap());
}

/// A new account: a debit that one by one is rejected (no funds), 49 credits of 1 and a credit of
/// 1000, 51 events of one account (103 actions: two chunks). Were the chunks independent, the
/// second (a credit of 1 and the 1000) could commit on its own condition while the first is
/// cancelled by its aggregate condition, and the first then go one at a time after the 1000
/// arrived: the debit that must be rejected would be applied.
#[tokio::test]
async fn a_later_chunk_does_not_fund_an_earlier_debit() {
    let account = "acct-chunk-new";
    let mut events = vec![LedgerHarness::event("chunk-debit", account, -10, "USD")];
    events.extend((0..49).map(|i| LedgerHarness::event(&format!("chunk-credit-{i}"), account, 1, "USD")));
    events.push(LedgerHarness::event("chunk-big", account, 1000, "USD"));
    differential(account, &[], &events).await;
}

/// The same split the other way: the account holds 100 (its seed event); the batch repeats the
/// seed (a duplicate), debits 100, credits 1 forty-eight times and debits 100 again. One by one
/// the first debit is applied and the last rejected; were the chunks independent, the first
/// chunk would be cancelled by the seed's record, the second (a credit and the last debit)
/// commit, and the first debit be rejected in its place.
#[tokio::test]
async fn a_duplicate_in_the_first_chunk_lets_the_second_overtake() {
    let account = "acct-chunk-seeded";
    let seed = LedgerHarness::event("chunk-seed", account, 100, "USD");
    let mut events = vec![seed.clone(), LedgerHarness::event("chunk-first-debit", account, -100, "USD")];
    events.extend((0..48).map(|i| LedgerHarness::event(&format!("chunk-credit-{i}"), account, 1, "USD")));
    events.push(LedgerHarness::event("chunk-last-debit", account, -100, "USD"));
    differential(account, &[seed], &events).await;
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

/// Two accounts; `ord-x` first under acct-a (whose legacy entry holds 999 under that id: key
/// reuse), then under acct-b, then acct-b's debit.
fn copy_batch() -> Vec<PaymentEvent> {
    vec![
        // The entry of acct-a holds 999 under this id: key reuse, no record written.
        LedgerHarness::event("ord-x", "acct-a", 100, "USD"),
        // The same id, another payload: one by one, the key is free, so it applies (a credit).
        LedgerHarness::event("ord-x", "acct-b", 100, "USD"),
        // A debit of acct-b after that credit: one by one, it is covered.
        LedgerHarness::event("ord-y", "acct-b", -100, "USD"),
    ]
}

/// An in-batch copy of an event id with another payload, whose first copy failed for good
/// without taking the key, is committed in its account's order, not after the whole batch (where
/// a later debit of that account that posting one by one applies would be rejected for good).
#[tokio::test]
async fn a_copy_with_another_payload_keeps_its_accounts_order() {
    // One by one, in batch order.
    let one = LedgerHarness::new().await;
    legacy_entry(&one, "acct-a", "ord-x", 999).await;
    let mut sequential = Vec::new();
    for event in copy_batch() {
        sequential.push(summary(&one.ledger.post(&event).await));
    }
    assert_eq!(sequential, ["error KeyReused", "fresh Applied", "fresh Applied"], "the reference");

    // The batch path, on fresh tables in the same state.
    let h = LedgerHarness::new().await;
    legacy_entry(&h, "acct-a", "ord-x", 999).await;
    let batched: Vec<String> = h.ledger.post_batch(&copy_batch()).await.iter().map(summary).collect();
    let balance = h.ledger.balance("acct-b").await.unwrap().map(|b| b.balance_cents);
    assert_eq!(
        (batched, balance),
        (sequential, Some(0)),
        "the batch answers as posting one by one would (acct-b: +100 then -100)"
    );
}

/// An ordered batch (`payments::lambda::post_batch_in_lanes`) where a record of lane L1 fails
/// before the ledger sees it, in a way a retry may undo: the credit behind it in L1 is held, and
/// so is a copy of that credit in lane L2 (its event id) and L2 behind it; the same account's
/// debit in lane L3 is not: the trigger orders nothing across lanes (Lambda may run L3 in
/// another invocation at once), so it is posted, here refused for the balance, and L3 goes on.
#[tokio::test]
async fn an_event_held_before_the_ledger_holds_its_lane_and_id_not_its_account_elsewhere() {
    use effectively_once_lambda::{Handled, RecordError, Retry};
    let h = LedgerHarness::new().await;
    let account = "acct-held".to_owned();
    let other = format!("{account}-b");
    let parsed = vec![
        Err(RecordError::retryable("not decoded yet")),
        Ok(LedgerHarness::event("order-credit", &account, 500, "USD")),
        Ok(LedgerHarness::event("order-credit", &account, 500, "USD")),
        Ok(LedgerHarness::event("order-after-copy", &other, 70, "USD")),
        Ok(LedgerHarness::event("order-debit", &account, -300, "USD")),
        Ok(LedgerHarness::event("order-other", &other, 100, "USD")),
    ];
    let lanes = [Some("L1"), Some("L1"), Some("L2"), Some("L2"), Some("L3"), Some("L3")];
    let results = payments::lambda::post_batch_in_lanes(&h.ledger, parsed, &lanes, payments::Delivery::Unknown).await;
    for (at, result) in results.iter().enumerate().take(4) {
        let error = result.as_ref().expect_err("held");
        assert!(error.retry != Retry::Never, "#{at}: {error}");
    }
    assert!(
        matches!(&results[4], Ok(Handled::Rejected)) || results[4].as_ref().is_err_and(|e| e.retry == Retry::Never),
        "the debit in L3 is posted and refused for the balance: {:?}",
        results[4]
    );
    assert!(matches!(&results[5], Ok(Handled::Applied)), "L3 goes on: {:?}", results[5]);
    assert_eq!(h.ledger.balance(&other).await.unwrap().map(|b| (b.balance_cents, b.entry_count)), Some((100, 1)));
    let credit = h.ledger.balance(&account).await.unwrap().map(|b| b.balance_cents);
    assert!(credit.is_none_or(|cents| cents == 0), "the held credit is not posted: {credit:?}");
}
