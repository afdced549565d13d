//! A table's item collection (one partition key's items with a local secondary index) is full:
//! DynamoDB refuses every write to it until an operator moves data or the index. That is no
//! verdict on the message: a payment whose write meets it waits for the fix (retryable), and a
//! stream never goes past it. The local AWS never answers it, so a scripted endpoint does.

use effectively_once_lambda::Retry;
use end_to_end::scripted::{cancelled, scripted, scripted_store};
use end_to_end::LedgerHarness;
use payments::Ledger;

/// Every transaction is cancelled by a full item collection at its first write.
fn always_full(requests: usize) -> Vec<(u16, String)> {
    let reasons = ["ItemCollectionSizeLimitExceeded", "None", "None", "None", "None", "None", "None"];
    (0..requests).map(|_| cancelled(&reasons)).collect()
}

#[tokio::test]
async fn a_payment_whose_item_collection_is_full_waits_for_the_operator() {
    let (port, _) = scripted(always_full(64));
    let ledger = Ledger::new(scripted_store(port, "idempotency"), "ledger", None);
    let event = LedgerHarness::event("full-alone", "acct-full", 100, "USD");

    let result = ledger.post(&event).await;
    assert!(
        result.as_ref().is_err_and(|e| e.retry() != Retry::Never),
        "a full item collection is no verdict: {result:?}"
    );
    let answer = payments::lambda::post(&ledger, &event).await;
    assert!(matches!(answer, Err(ref e) if e.retry == Retry::Now), "the record is given up: {answer:?}");
}

#[tokio::test]
async fn a_batch_whose_item_collection_is_full_is_retried_whole() {
    let (port, _) = scripted(always_full(256));
    let ledger = Ledger::new(scripted_store(port, "idempotency"), "ledger", None);
    let events = vec![
        LedgerHarness::event("full-b0", "acct-full-a", 100, "USD"),
        LedgerHarness::event("full-b1", "acct-full-b", 5, "USD"),
        LedgerHarness::event("full-b2", "acct-full-a", -100, "USD"),
    ];

    let results = ledger.post_batch(&events).await;
    for (event, result) in events.iter().zip(&results) {
        assert!(
            result.as_ref().is_err_and(|e| e.retry() != Retry::Never),
            "{}: a full item collection is no verdict: {results:?}",
            event.event_id
        );
    }
    let answers = payments::lambda::post_batch(&ledger, events.into_iter().map(Ok).collect()).await;
    assert!(answers.iter().all(|a| matches!(a, Err(e) if e.retry == Retry::Now)), "a record is given up: {answers:?}");
}
