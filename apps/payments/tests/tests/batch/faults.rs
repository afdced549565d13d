//! The ledger's batch path under injected faults, each event posted once: the fault proxy between
//! the ledger's client and the local AWS throttles a transaction of the batch or loses its
//! answer; and two consumers post to one hot account at once.

use std::sync::Arc;

use aws_config::retry::RetryConfig;
use effectively_once_dynamodb::DynamoDbStore;
use end_to_end::{summary, LedgerHarness};
use local::proxy::{Fault, Proxy, Rules, ScriptedFaults};
use payments::Ledger;

/// The harness's tables, through a proxy with `rules`, retrying as `retries` says.
async fn through(h: &LedgerHarness, rules: Arc<dyn Rules>, retries: RetryConfig) -> (Ledger, Proxy) {
    let proxy = Proxy::to_local_aws(rules).await.unwrap();
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config(retries).await);
    let store = DynamoDbStore::new(client, h.ledger.store().table());
    (Ledger::new(store, h.ledger.table(), Some(h.outbox_table.clone())), proxy)
}

/// Batch `[d: account A debits 10 (a new account), x: id X credits A 5, x2: id X credits B 5]`.
/// Account A's aggregate fails (no funds), so A goes one at a time; d's own transaction is
/// throttled (retryable), which holds back x ("not started"). x2, the copy of X with another
/// payload, must not be committed alone because its first copy did not commit: X would be
/// applied to account B, with the payload that one by one is key reuse, and x, when
/// redelivered, be key reuse and go to the DLQ although it was never even tried.
#[tokio::test]
async fn a_copy_does_not_take_the_id_of_a_held_back_first_copy() {
    let h = LedgerHarness::new().await;
    // The batch's transaction passes; the next (d alone) is throttled.
    let rules = ScriptedFaults::new()
        .then("dynamodb:TransactWriteItems", Fault::Pass)
        .then("dynamodb:TransactWriteItems", Fault::Throttle);
    let (ledger, _proxy) = through(&h, Arc::new(rules), RetryConfig::disabled()).await;
    let events = vec![
        LedgerHarness::event("held-d", "acct-held-a", -10, "USD"),
        LedgerHarness::event("held-x", "acct-held-a", 5, "USD"),
        LedgerHarness::event("held-x", "acct-held-b", 5, "USD"),
    ];
    let answers: Vec<String> = ledger.post_batch(&events).await.iter().map(summary).collect();
    assert!(answers[0].starts_with("error"), "d was throttled: {answers:?}");
    // One by one (d throttled or not), x is posted and x2 is key reuse; the batch may defer x,
    // but then x2 must not take the id with its own payload.
    assert_ne!(answers[2], "fresh Applied", "{answers:?}");
    assert_eq!(h.ledger.entries("acct-held-b").await.unwrap(), vec![], "X applied to account B: {answers:?}");
}

/// A lost answer of the batch's transaction, the SDK retrying: every member comes back applied
/// (fresh or replayed), once.
#[tokio::test]
async fn a_lost_batch_answer_is_replayed_once() {
    for retries in [RetryConfig::standard(), RetryConfig::disabled()] {
        let h = LedgerHarness::new().await;
        let rules = ScriptedFaults::new().then("dynamodb:TransactWriteItems", Fault::DropResponse);
        let (ledger, proxy) = through(&h, Arc::new(rules), retries).await;
        let mut events = vec![
            LedgerHarness::event("lost-1", "acct-lost-a", 100, "USD"),
            LedgerHarness::event("lost-2", "acct-lost-a", -30, "USD"),
            LedgerHarness::event("lost-3", "acct-lost-b", 5, "USD"),
            LedgerHarness::event("lost-2", "acct-lost-a", -30, "USD"),
        ];
        events[2].receipt_email = Some("x@example.com".into());
        let first: Vec<String> = ledger.post_batch(&events).await.iter().map(summary).collect();
        let again: Vec<String> = ledger.post_batch(&events).await.iter().map(summary).collect();
        assert_eq!(proxy.injected().values().sum::<u64>(), 1, "one answer lost");
        assert!(first.iter().all(|a| a.ends_with("Applied") || a.starts_with("error")), "{first:?}");
        assert!(again.iter().all(|a| a == "replayed Applied"), "{again:?}");
        let b = h.ledger.balance("acct-lost-a").await.unwrap().unwrap();
        assert_eq!((b.balance_cents, b.entry_count), (70, 2));
    }
}

/// Two consumers post overlapping batches on one hot account at once: each event once, the
/// balance the sum of the entries and never below zero, and both answer each event alike.
#[tokio::test]
async fn two_consumers_on_a_hot_account_post_each_event_once() {
    for seed in 0..6u64 {
        let h = LedgerHarness::new().await;
        let other = Ledger::new(h.ledger.store().clone(), h.ledger.table(), Some(h.outbox_table.clone()));
        let acct = "acct-hot";
        let ev = |i: u64| {
            let amount = if (i + seed).is_multiple_of(3) { -40 } else { 25 };
            LedgerHarness::event(&format!("hot-{i}"), acct, amount, "USD")
        };
        let a: Vec<_> = (0..10).map(ev).collect();
        let b: Vec<_> = (0..10).rev().map(ev).collect();
        let (ra, rb) = tokio::join!(h.ledger.post_batch(&a), other.post_batch(&b));
        let ra: Vec<String> = ra.iter().map(summary).collect();
        let rb: Vec<String> = rb.iter().map(summary).collect();
        let entries = h.ledger.entries(acct).await.unwrap();
        let bal = h.ledger.balance(acct).await.unwrap();
        let sum: i64 = entries.iter().map(|e| e.1).sum();
        let bal = bal.unwrap();
        assert_eq!((bal.balance_cents, bal.entry_count as usize), (sum, entries.len()));
        for i in 0..10usize {
            let (x, y) = (&ra[i], &rb[9 - i]);
            let strip = |s: &str| s.replace("fresh ", "").replace("replayed ", "");
            if !x.starts_with("error") && !y.starts_with("error") {
                assert_eq!(strip(x), strip(y), "hot-{i}");
            }
            let applied = x.ends_with("Applied") || y.ends_with("Applied");
            assert_eq!(applied, entries.iter().any(|e| e.0 == format!("hot-{i}")), "hot-{i}");
        }
    }
}
