//! A batch's refusals decided on an account's balance while another writer (another sandbox)
//! posts to the same account between our transactions: each test pins what posting one by one,
//! interleaved with those posts, would do.

use std::sync::atomic::Ordering;

use effectively_once::Outcome;
use end_to_end::other_writer::OtherSandbox;
use end_to_end::{summary, LedgerHarness};
use payments::Posting;

/// Before our `n`-th transaction, another sandbox posts `elsewhere(n)` cents (if any) to
/// `account`.
fn hot_account(h: &LedgerHarness, account: &str, elsewhere: fn(u64) -> Option<i64>) -> OtherSandbox {
    let account = account.to_owned();
    OtherSandbox::beside(h, move |n| {
        elsewhere(n).map(|amount| LedgerHarness::event(&format!("{account}-elsewhere-{n}"), &account, amount, "USD"))
    })
}

/// A hot account (another sandbox credits it between every two of our transactions) and a
/// batch holding one overdraft among credits. One by one, in any interleaving with the other
/// writer's credits, the overdraft is rejected and every credit applies. The overdraft's record
/// holds the balance it was decided on, so the group's decided transaction is conditioned on
/// that balance exactly, which the other writer has always changed: each is cancelled and
/// decided again on what it left, and after `MAX_ROUNDS` changes the hot account goes one event
/// per transaction, where each post decides itself; the quiet account's credit is never held
/// back with it. Every event is decided, and the rejection names a balance the account held.
#[tokio::test]
async fn a_refusal_on_a_hot_account_still_decides_the_batch_while_another_writer_posts() {
    let h = LedgerHarness::new().await;
    let account = "hot-acct";
    let seed = LedgerHarness::event("hot-seed", account, 100, "USD");
    assert!(matches!(h.ledger.post(&seed).await, Ok(Outcome::Fresh(Posting::Applied))));
    let (through, _proxy, seen) = hot_account(&h, account, |n| (n >= 2).then_some(1)).ledger(&h).await;
    let mut events = vec![LedgerHarness::event("hot-0", account, -10_000, "USD")];
    events.extend((1..10).map(|i| LedgerHarness::event(&format!("hot-{i}"), account, 5, "USD")));
    // A quiet account's credit in the same batch: nobody else writes it.
    events.push(LedgerHarness::event("quiet-1", "quiet-acct", 5, "USD"));
    let answers: Vec<String> = through.post_batch(&events).await.iter().map(summary).collect();
    let transactions = seen.load(Ordering::SeqCst);
    eprintln!("{transactions} transactions: {answers:?}");
    assert!(answers[0].starts_with("fresh Rejected { reason: InsufficientFunds"), "{answers:?}");
    assert!(answers[1..].iter().all(|a| a == "fresh Applied"), "every credit applies one by one: {answers:?}");
    // The overdraft is first in batch order: one by one it sees the seed and the other
    // writer's cents before it, never the batch's own credits.
    let held = h.ledger.balance(account).await.unwrap().unwrap();
    let cents = held.balance_cents - 100 - 9 * 5;
    let balance: i64 = answers[0]
        .trim_start_matches("fresh Rejected { reason: InsufficientFunds { balance_cents: ")
        .trim_end_matches(" } }")
        .parse()
        .unwrap_or_else(|_| panic!("{answers:?}"));
    assert!((100..=100 + cents).contains(&balance), "{balance} not a balance one by one sees: {answers:?}");
    // The first sight, a change per round up to `MAX_ROUNDS` and one past it, then each of the
    // hot account's ten events alone (a refusal's record a second transaction).
    let bound = 2 + u64::from(effectively_once_dynamodb::MAX_ROUNDS) + 2 * 10;
    assert!(transactions <= bound, "bounded: {transactions}");
}

/// Another writer's post that crosses a threshold of the decisions between the cancellation
/// that showed the balance and the commit: the decided update is refused, the batch sees the
/// balance the other writer left and decides again on it, as posting one by one after that
/// post would. A credit of 60 on 100 covers the debit of 150 first refused (and the debit of
/// 70 after it is then refused); a debit of 60 leaves the debit of 70 first applied uncovered.
/// Then a credit of one cent before the third transaction changes the balance the refusals were
/// decided on (their records hold it): seen once more, and decided again on it.
#[tokio::test]
async fn another_writers_post_across_a_threshold_changes_the_decisions_as_one_by_one() {
    // Another writer's post before our second transaction, then a cent before the third; one by
    // one after that post, the answers, and the balance at the end.
    type Case = (fn(u64) -> Option<i64>, i64, [&'static str; 3], i64);
    let cases: [Case; 2] = [
        (
            |n| [None, Some(60), Some(1)].get(n as usize - 1).copied().flatten(),
            60,
            ["Applied", "Rejected", "Applied"],
            11 + 5,
        ),
        (
            |n| [None, Some(-60), Some(1)].get(n as usize - 1).copied().flatten(),
            -60,
            ["Rejected", "Rejected", "Applied"],
            41 + 5,
        ),
    ];
    for (case, (elsewhere, moved, expected, balance)) in cases.into_iter().enumerate() {
        let h = LedgerHarness::new().await;
        let account = format!("cross-{case}");
        let seed = LedgerHarness::event(&format!("cross-{case}-seed"), &account, 100, "USD");
        assert!(matches!(h.ledger.post(&seed).await, Ok(Outcome::Fresh(Posting::Applied))));
        let (through, _proxy, seen) = hot_account(&h, &account, elsewhere).ledger(&h).await;
        let events = [
            LedgerHarness::event(&format!("cross-{case}-150"), &account, -150, "USD"),
            LedgerHarness::event(&format!("cross-{case}-70"), &account, -70, "USD"),
            LedgerHarness::event(&format!("cross-{case}-5"), &account, 5, "USD"),
        ];
        let answers: Vec<String> = through.post_batch(&events).await.iter().map(summary).collect();
        let transactions = seen.load(Ordering::SeqCst);
        eprintln!("{moved:+} elsewhere, {transactions} transactions: {answers:?}");
        // One by one, after the other writer's post: 100 + moved, then the batch's events.
        for (answer, outcome) in answers.iter().zip(expected) {
            assert!(answer.starts_with(&format!("fresh {outcome}")), "{moved:+}: {answers:?}");
        }
        assert_eq!(transactions, 4, "seen, refused across the threshold, refused by the cent, decided again");
        let held = h.ledger.balance(&account).await.unwrap().unwrap();
        assert_eq!(held.balance_cents, balance, "{moved:+}: the other writer's posts and the applied events");
        let entries = h.ledger.entries(&account).await.unwrap();
        let applied = expected.iter().filter(|e| **e == "Applied").count();
        assert_eq!((entries.len(), held.entry_count as usize), (3 + applied, 3 + applied), "{entries:?}");
    }
}

/// Another writer that crosses a threshold before every transaction (a credit of 60 that covers
/// the debit of 150, then a debit of 60 that uncovers it again): each decided transaction of the
/// hot account is refused. Those cancellations do not count towards `MAX_ROUNDS`, so the quiet
/// account's credit in the same transactions is not failed with it; after `MAX_ROUNDS` changes
/// the hot account goes one event per transaction, where each post decides itself. Every event
/// is decided, and the balance is the sum of the entries.
#[tokio::test]
async fn a_writer_crossing_every_threshold_does_not_fail_the_batch() {
    let h = LedgerHarness::new().await;
    let account = "flip-acct";
    let seed = LedgerHarness::event("flip-seed", account, 100, "USD");
    assert!(matches!(h.ledger.post(&seed).await, Ok(Outcome::Fresh(Posting::Applied))));
    let elsewhere = |n: u64| (n >= 2).then_some(if n.is_multiple_of(2) { 60 } else { -60 });
    let (through, _proxy, seen) = hot_account(&h, account, elsewhere).ledger(&h).await;
    let events = [
        LedgerHarness::event("flip-150", account, -150, "USD"),
        LedgerHarness::event("flip-5", account, 5, "USD"),
        LedgerHarness::event("flip-quiet", "flip-quiet-acct", 5, "USD"),
    ];
    let answers: Vec<String> = through.post_batch(&events).await.iter().map(summary).collect();
    let transactions = seen.load(Ordering::SeqCst);
    eprintln!("{transactions} transactions: {answers:?}");
    assert!(answers.iter().all(|a| a.starts_with("fresh ")), "every event decided: {answers:?}");
    assert_eq!((answers[1].as_str(), answers[2].as_str()), ("fresh Applied", "fresh Applied"), "{answers:?}");
    let held = h.ledger.balance(account).await.unwrap().unwrap();
    let entries = h.ledger.entries(account).await.unwrap();
    let sum: i64 = entries.iter().map(|(_, amount)| amount).sum();
    assert_eq!((held.balance_cents, held.entry_count as usize), (sum, entries.len()), "{entries:?}");
    let debit_applied = entries.iter().any(|(id, _)| id == "flip-150");
    assert_eq!(debit_applied, answers[0] == "fresh Applied", "{answers:?} {entries:?}");
    assert!(transactions <= 2 + u64::from(effectively_once_dynamodb::MAX_ROUNDS) + 3, "bounded: {transactions}");
}
