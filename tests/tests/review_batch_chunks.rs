//! Review of issue 15 (batch commit): an account whose events need more than one transaction
//! (over 100 actions) is split in chunks; the chunks are sent as separate transactions of one
//! round, so a later chunk can commit while an earlier chunk is cancelled, and the earlier
//! chunk's members then run after it: not in batch order.

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
/// 1000, 51 events of one account (103 actions: two chunks). The second chunk (a credit of 1 and
/// the 1000) commits on its own condition while the first is cancelled by its aggregate
/// condition; the first chunk then goes one at a time, after the 1000 arrived, and the debit
/// that must be rejected is applied.
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
/// the first debit is applied and the last rejected; in the batch the first chunk is cancelled by
/// the seed's record, the second chunk (a credit and the last debit) commits, and the first debit
/// is then rejected in its place.
#[tokio::test]
async fn a_duplicate_in_the_first_chunk_lets_the_second_overtake() {
    let account = "acct-chunk-seeded";
    let seed = LedgerHarness::event("chunk-seed", account, 100, "USD");
    let mut events = vec![seed.clone(), LedgerHarness::event("chunk-first-debit", account, -100, "USD")];
    events.extend((0..48).map(|i| LedgerHarness::event(&format!("chunk-credit-{i}"), account, 1, "USD")));
    events.push(LedgerHarness::event("chunk-last-debit", account, -100, "USD"));
    differential(account, &[seed], &events).await;
}
