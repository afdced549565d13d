//! A batch's rejection decided on a balance item another sandbox changed before the commit:
//! the recorded answer must be the one posting one by one records.

use std::sync::atomic::Ordering;

use effectively_once::Outcome;
use end_to_end::other_writer::OtherSandbox;
use end_to_end::{summary, LedgerHarness};
use payments::Posting;

/// The account holds 100; the batch credits 10, debits 150 and credits 5. The first
/// transaction is refused (the debit is not covered) and returns 100; replayed on it, the credit
/// of 10 applies and the debit is refused on 110. Before the replay is sent, another sandbox
/// credits 1 cent. 101 crosses no threshold of the decisions (the debit needs 140 before the
/// credit of 10), but the debit's never-expiring record, replayed to every duplicate, holds the
/// balance it was refused on, and the batch's credit of 10 takes effect at the commit, after the
/// cent: one by one, the debit sees 111. So the replay is conditioned on the balance seen
/// exactly; the cent refuses it, and the batch decides again on 101, recording 111.
#[tokio::test]
async fn a_batch_rejection_records_the_balance_one_by_one_sees() {
    let batched = LedgerHarness::new().await;
    let single = LedgerHarness::new().await;
    let seed = LedgerHarness::event("stale-seed", "stale", 100, "USD");
    for h in [&batched, &single] {
        assert!(matches!(h.ledger.post(&seed).await, Ok(Outcome::Fresh(Posting::Applied))));
    }
    let other = LedgerHarness::event("stale-other", "stale", 1, "USD");
    let h = &batched;
    let before_second = other.clone();
    let rules = OtherSandbox::beside(h, move |n| (n == 2).then(|| before_second.clone()));
    let (through, _proxy, seen) = rules.ledger(h).await;
    let events = [
        LedgerHarness::event("stale-10", "stale", 10, "USD"),
        LedgerHarness::event("stale-150", "stale", -150, "USD"),
        LedgerHarness::event("stale-5", "stale", 5, "USD"),
    ];
    let answers: Vec<String> = through.post_batch(&events).await.iter().map(summary).collect();
    let transactions = seen.load(Ordering::SeqCst);
    assert_eq!(transactions, 3, "refused on 100, refused by the other writer's cent, committed on 101");
    // One by one, with the other writer's credit where it landed: before the batch's credit of
    // 10 was written, so before the debit that follows that credit.
    single.ledger.post(&other).await.unwrap();
    let mut one_by_one = Vec::new();
    for event in &events {
        one_by_one.push(summary(&single.ledger.post(event).await));
    }
    assert_eq!(
        (h.ledger.balance("stale").await.unwrap(), h.ledger.entries("stale").await.unwrap()),
        (single.ledger.balance("stale").await.unwrap(), single.ledger.entries("stale").await.unwrap()),
        "the same effects"
    );
    assert_eq!(answers, one_by_one, "the recorded answers (replayed to every duplicate) as one by one");
    // What the records hold: a sandbox that never saw the batch gets the same answers, replayed.
    let replays: Vec<String> = h.ledger.clone_forgetting().post_batch(&events).await.iter().map(summary).collect();
    let recorded: Vec<String> = answers.iter().map(|a| a.replacen("fresh", "replayed", 1)).collect();
    assert_eq!(replays, recorded, "every duplicate is answered from the record");
}
