//! A batch's pre-check hold-back (`Ledger::admit`) passes on: an event held back because its
//! event id (or its account) waits makes its own account (and event id) wait too, so no later
//! event overtakes it and is decided for good in an order posting one by one never takes.

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

/// E1 (id k1, acct A, receipt, ledger without an outbox): retryable, holds account A and id k1.
/// E2 (id k1, acct B, +500): held back by its id, but account B is not made to wait.
/// E3 (id k3, acct B, -500): posted now, over an empty account: rejected and recorded for good.
/// One by one in batch order, E2 applies (E1 wrote nothing) and E3's debit is covered; and on
/// any redelivery E3 is a replayed rejection while E2 applies: E3 overtook E2.
#[tokio::test]
async fn an_event_held_by_its_id_does_not_hold_its_account() {
    let h = LedgerHarness::new().await;
    let no_outbox = payments::Ledger::new(h.ledger.store().clone(), h.ledger.table().to_owned(), None);
    let mut e1 = LedgerHarness::event("atk-k1", "atk-acct-A", 100, "USD");
    e1.receipt_email = Some("payer@example.com".into());
    let e2: PaymentEvent = LedgerHarness::event("atk-k1", "atk-acct-B", 500, "USD");
    let e3: PaymentEvent = LedgerHarness::event("atk-k3", "atk-acct-B", -500, "USD");
    let results = no_outbox.post_batch(&[e1, e2, e3]).await;
    let summaries: Vec<String> = results.iter().map(summary).collect();
    // E3 must not be decided before E2: held back (retryable) like E2, or applied after it.
    assert_ne!(
        summaries[2], "fresh Rejected { reason: InsufficientFunds { balance_cents: 0 } }",
        "E3 overtook E2 in account B and was rejected for good: {summaries:?}"
    );
    assert!(
        !summaries[2].starts_with("fresh Rejected"),
        "E3 overtook E2 in account B and was rejected for good: {summaries:?}"
    );
}

/// The other direction of the same hole: an event held back by its *account* does not make its
/// *event id* wait, so a later copy of that id for another account takes the id first.
/// E1 (id k1, acct A, receipt, no outbox): retryable, holds account A and id k1.
/// E2 (id k2, acct A, +700): held back by its account; id k2 is not made to wait.
/// E3 (id k2, acct C, +700): posted now: k2 credits account C, for good.
/// One by one in batch order, E2 credits account A with k2 and E3 is key reuse (DLQ); here the
/// money lands in account C, and E2, redelivered, is the key reuse.
#[tokio::test]
async fn an_event_held_by_its_account_does_not_hold_its_id() {
    let h = LedgerHarness::new().await;
    let no_outbox = payments::Ledger::new(h.ledger.store().clone(), h.ledger.table().to_owned(), None);
    let mut e1 = LedgerHarness::event("atk2-k1", "atk2-acct-A", 100, "USD");
    e1.receipt_email = Some("payer@example.com".into());
    let e2 = LedgerHarness::event("atk2-k2", "atk2-acct-A", 700, "USD");
    let e3 = LedgerHarness::event("atk2-k2", "atk2-acct-C", 700, "USD");
    let results = no_outbox.post_batch(&[e1, e2.clone(), e3]).await;
    let summaries: Vec<String> = results.iter().map(summary).collect();
    let credited_c = no_outbox.balance("atk2-acct-C").await.unwrap();
    // Redelivered E2 (as SQS would, after E1's fix): key reuse, where one by one applied it.
    let e2_again = summary(&no_outbox.post_batch(&[e2]).await[0]);
    assert!(
        credited_c.is_none(),
        "E3 took event id k2 for account C ahead of E2 (account A): {summaries:?}; C = {credited_c:?}; \
         E2 redelivered: {e2_again}"
    );
}
