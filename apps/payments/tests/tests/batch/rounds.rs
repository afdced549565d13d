//! When a batch's rounds run out, the members still live are reported retryable (undecided), and
//! the group's later members that had gone alone wait with them: no later event of an account is
//! decided before an earlier one. Needs transaction conflicts, which the local AWS never answers,
//! so the scripted DynamoDB endpoint (`end_to_end::scripted`) on loopback answers instead.

use effectively_once::Outcome;
use effectively_once_dynamodb::MAX_ROUNDS;
use end_to_end::scripted::{cancelled, scripted, scripted_store};
use end_to_end::LedgerHarness;
use payments::{Ledger, Posting};

/// One account, `[a0: +100, a1, a2: -100]`. Round 1's transaction (a0, a1, a2 each an entry
/// and a record, then the balance) is cancelled by a1's entry: a1 goes alone and takes a2 with
/// it; a0 is sent again. Every later round is cancelled by a conflict on the balance, until the
/// rounds run out and a0 is reported retryable: undecided, redelivered later. a1 and a2 must not
/// then be committed alone: a2, after a0 in its account, would be decided before a0 (here
/// applied; on a real table, the debit without a0's credit rejected and recorded for good).
#[tokio::test]
async fn rounds_run_out_and_a_later_member_is_not_committed_alone() {
    let mut script = vec![cancelled(&["None", "None", "ConditionalCheckFailed", "None", "None", "None", "None"])];
    for _ in 1..MAX_ROUNDS {
        script.push(cancelled(&["None", "None", "TransactionConflict"]));
    }
    let (port, seen) = scripted(script);
    let store = scripted_store(port, "idempotency");
    let ledger = Ledger::new(store, "ledger", None);
    let events = vec![
        LedgerHarness::event("rounds-a0", "acct-rounds", 100, "USD"),
        LedgerHarness::event("rounds-a1", "acct-rounds", 5, "USD"),
        LedgerHarness::event("rounds-a2", "acct-rounds", -100, "USD"),
    ];
    let results = ledger.post_batch(&events).await;
    let requests = seen.lock().unwrap().clone();
    assert!(
        results[0].as_ref().is_err_and(|e| e.retry() != effectively_once::Retry::Never),
        "a0 is undecided after {} requests: {results:?}",
        requests.len()
    );
    assert!(
        !matches!(results[2], Ok(Outcome::Fresh(Posting::Applied)) | Ok(Outcome::Fresh(Posting::Rejected { .. }))),
        "a2 decided while a0, before it in its account, is undecided: {results:?}; requests {requests:?}"
    );
}
