//! Refusals in a batch (an overdraft, an event in another currency, a debit on a new account)
//! are decided on the account's balance item as a cancelled transaction returned it, and
//! committed with the account's other events in one transaction: a batch answers as posting its
//! events one by one in batch order, in a few requests whatever the number of events; and when
//! another writer changes the balance between the cancellation and the replay, the replay is
//! decided again on the item as it then is.

use std::sync::Arc;

use aws_config::retry::RetryConfig;
use effectively_once::Outcome;
use effectively_once_dynamodb::DynamoDbStore;
use end_to_end::{summary, LedgerHarness, Rng};
use local::proxy::{Fault, Proxy, Rules};
use payments::{Ledger, PaymentEvent, Posting};

/// Posts `events` as one batch on `batched` and one by one on `single` (both holding the same
/// state): every answer, and each account's balance (with its entry count) and entries, must be
/// the same. The answers, as the batch gave them.
async fn same_as_one_by_one(batched: &Ledger, single: &Ledger, events: &[PaymentEvent], what: &str) -> Vec<String> {
    let from_batch: Vec<String> = batched.post_batch(events).await.iter().map(summary).collect();
    let mut one_by_one = Vec::new();
    for event in events {
        one_by_one.push(summary(&single.post(event).await));
    }
    let differs: Vec<String> = from_batch
        .iter()
        .zip(&one_by_one)
        .enumerate()
        .filter(|(_, (b, s))| b != s)
        .map(|(i, (b, s))| format!("#{i} {}: batch {b}, one by one {s}", events[i].event_id))
        .collect();
    assert!(differs.is_empty(), "{what}: answers differ: {differs:?}");
    let mut accounts: Vec<&str> = events.iter().map(|e| e.account_id.as_str()).collect();
    accounts.sort_unstable();
    accounts.dedup();
    for account in accounts {
        assert_eq!(
            batched.balance(account).await.unwrap(),
            single.balance(account).await.unwrap(),
            "{what}: balance of {account}"
        );
        assert_eq!(
            batched.entries(account).await.unwrap(),
            single.entries(account).await.unwrap(),
            "{what}: entries of {account}"
        );
    }
    from_batch
}

/// Two ledgers on fresh tables, for the batch and for one by one.
async fn pair() -> (LedgerHarness, LedgerHarness) {
    (LedgerHarness::new().await, LedgerHarness::new().await)
}

/// Seeds `account` with a credit on both ledgers.
async fn seed(pair: &(LedgerHarness, LedgerHarness), account: &str, amount_cents: i64, currency: &str) {
    let event = LedgerHarness::event(&format!("seed-{account}"), account, amount_cents, currency);
    for h in [&pair.0, &pair.1] {
        assert!(matches!(h.ledger.post(&event).await, Ok(Outcome::Fresh(Posting::Applied))));
    }
}

/// A batch of 100 on three accounts holding 1,000 USD each, with one refusal per account (an
/// event in euros in two, an overdraft in the third): at most 5 requests (0.05 a message), and
/// the answers of one by one.
#[tokio::test]
async fn a_refusal_per_account_in_a_batch_of_100_costs_at_most_5_requests() {
    let pair = pair().await;
    let accounts = ["r100-a", "r100-b", "r100-c"];
    for account in accounts {
        seed(&pair, account, 1_000, "USD").await;
    }
    let events: Vec<PaymentEvent> = (0..100)
        .map(|i| {
            let account = accounts[i % 3];
            let (amount, currency) = match i {
                40 => (5, "EUR"),
                71 => (7, "EUR"),
                62 => (-5_000, "USD"),
                _ => (if i % 4 == 0 { -20 } else { 10 }, "USD"),
            };
            LedgerHarness::event(&format!("r100-{i}"), account, amount, currency)
        })
        .collect();
    pair.0.requests.reset();
    let answers: Vec<String> = pair.0.ledger.post_batch(&events).await.iter().map(summary).collect();
    let requests = pair.0.requests.total();
    let rejected = answers.iter().filter(|a| a.contains("Rejected")).count();
    assert_eq!(rejected, 3, "{answers:?}");
    eprintln!("a batch of 100 on 3 accounts, one refusal each: {requests} requests");
    assert!(requests <= 5, "a batch of 100 with one refusal per account cost {requests} requests");
    // The same batch one by one, on the other ledger, from its own copy of the answers.
    let single: Vec<String> = {
        let mut out = Vec::new();
        for event in &events {
            out.push(summary(&pair.1.ledger.post(event).await));
        }
        out
    };
    assert_eq!(answers, single);
    for account in accounts {
        assert_eq!(pair.0.ledger.balance(account).await.unwrap(), pair.1.ledger.balance(account).await.unwrap());
        assert_eq!(pair.0.ledger.entries(account).await.unwrap(), pair.1.ledger.entries(account).await.unwrap());
    }
}

/// A batch of 1,000 on two hot accounts, holding overdrafts and events in another currency
/// throughout (and a new account's debit first): at most 30 requests (0.03 a message), and the
/// answers of one by one.
#[tokio::test]
async fn a_batch_of_1000_on_two_hot_accounts_with_refusals_costs_at_most_30_requests() {
    let pair = pair().await;
    seed(&pair, "r1000-a", 500, "USD").await;
    let events: Vec<PaymentEvent> = (0..1000)
        .map(|i| {
            // Account b is new: its first event, a debit, is rejected (no funds).
            let account = if i % 2 == 0 { "r1000-a" } else { "r1000-b" };
            let (amount, currency) = match i {
                _ if i % 97 == 5 => (-100_000, "USD"),
                _ if i % 131 == 60 => (3, "EUR"),
                1 => (-1, "USD"),
                _ => (if i % 3 == 0 { -25 } else { 15 }, "USD"),
            };
            LedgerHarness::event(&format!("r1000-{i}"), account, amount, currency)
        })
        .collect();
    pair.0.requests.reset();
    let answers = same_as_one_by_one(&pair.0.ledger, &pair.1.ledger, &events, "batch of 1000").await;
    let requests = pair.0.requests.total();
    let rejected = answers.iter().filter(|a| a.contains("Rejected")).count();
    assert!(rejected >= 15, "refusals throughout: {rejected}");
    eprintln!("a batch of 1,000 on 2 accounts, {rejected} refusals: {requests} requests");
    assert!(requests <= 30, "a batch of 1,000 with {rejected} refusals cost {requests} requests");
}

/// One refusal of each kind (an overdraft, another currency, a debit on a new account) at every
/// position of a 60-event account batch (over 100 actions: two transactions), and at the edges
/// of the split, each on its own account: the answers, balances, entry counts and entries of one
/// by one.
#[tokio::test]
async fn a_refusal_in_any_position_answers_as_one_by_one() {
    let pair = pair().await;
    let mut events = Vec::new();
    for position in [0usize, 1, 2, 24, 47, 48, 49, 50, 51, 58, 59] {
        for kind in ["overdraft", "currency", "new"] {
            let account = format!("pos-{kind}-{position}");
            if kind != "new" {
                seed(&pair, &account, 100, "USD").await;
            }
            for i in 0..60 {
                let (amount, currency) = match (i == position, kind) {
                    (true, "overdraft") => (-10_000, "USD"),
                    (true, "currency") => (50, "EUR"),
                    (true, _) => (-30, "USD"),
                    // A new account's first event, when not the refusal, is a credit.
                    (false, _) => (if i % 5 == 4 { -12 } else { 8 }, "USD"),
                };
                events.push(LedgerHarness::event(&format!("{account}-{i}"), &account, amount, currency));
            }
        }
    }
    // Batches of 120 events over two accounts, as SQS could never send but a test can.
    for (n, batch) in events.chunks(120).enumerate() {
        same_as_one_by_one(&pair.0.ledger, &pair.1.ledger, batch, &format!("batch {n}")).await;
    }
}

/// Random batches of up to 130 events on three accounts (two starting new), with overdrafts,
/// euros, debits before their credits, duplicates and reused event ids in every position and
/// across the 100-action split: every answer, balance, entry count and entry of one by one.
#[tokio::test]
async fn random_batches_with_refusals_answer_as_one_by_one() {
    let pair = pair().await;
    seed(&pair, "rnd-a", 300, "USD").await;
    let accounts = ["rnd-a", "rnd-b", "rnd-c"];
    let mut rng = Rng(0x0bad_cafe_f00d_1234);
    for round in 0..8 {
        let size = 1 + rng.below(130) as usize;
        let events: Vec<PaymentEvent> = (0..size)
            .map(|_| {
                let id = format!("rnd-{}", rng.below(400));
                let account = accounts[rng.below(if round < 2 { 1 } else { 3 }) as usize];
                let amount = match rng.below(10) {
                    0 => -(1 + rng.below(5_000) as i64),
                    1..=3 => -(1 + rng.below(60) as i64),
                    _ => 1 + rng.below(50) as i64,
                };
                let currency = if rng.below(15) == 0 { "EUR" } else { "USD" };
                // Mostly a fixed payload per id (a duplicate when it comes again), sometimes
                // another (key reuse).
                if rng.below(6) == 0 {
                    LedgerHarness::event(&id, account, amount, currency)
                } else {
                    let n: i64 = id[4..].parse().unwrap();
                    let amount = if n % 4 == 0 { -(n % 90 + 1) } else { n % 40 + 1 };
                    let currency = if n % 29 == 0 { "EUR" } else { "USD" };
                    LedgerHarness::event(&id, accounts[(n % 3) as usize], amount, currency)
                }
            })
            .collect();
        same_as_one_by_one(&pair.0.ledger, &pair.1.ledger, &events, &format!("round {round}")).await;
    }
}

/// Lets every request through and, just before the `at`-th `TransactWriteItems` (from 1), posts
/// `event` to the same tables on a client of its own: another writer changing the balance
/// between a cancellation and the replay it led to.
struct WriterBefore {
    at: u64,
    seen: Arc<std::sync::atomic::AtomicU64>,
    write: Box<dyn Fn() + Send + Sync>,
}

impl Rules for WriterBefore {
    fn decide(&self, operation: &str) -> Fault {
        if operation.starts_with("dynamodb:TransactWriteItems") {
            let n = self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            if n == self.at {
                (self.write)();
            }
        }
        Fault::Pass
    }
}

/// Posts `event` to `h`'s tables from a thread and a runtime of its own, and waits.
fn post_elsewhere(tables: (String, String, String), event: PaymentEvent) {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let client = aws_sdk_dynamodb::Client::new(&effectively_once_dynamodb::testing::sdk_config().await);
            let ledger = Ledger::new(DynamoDbStore::new(client, tables.0), tables.1, Some(tables.2));
            assert!(matches!(ledger.post(&event).await, Ok(Outcome::Fresh(Posting::Applied))));
        });
    })
    .join()
    .unwrap();
}

/// The account holds 100; the batch credits 10, debits 200 and credits 5. Its first transaction
/// is refused (the debit is not covered) and returns the balance, 100, on which the debit is
/// rejected; before that replay is sent, another writer credits 200. The replay, conditioned on
/// a balance of 100, is refused in turn and returns 300, on which the debit applies: the answers
/// and the balance of posting the other writer's credit, then the batch, one by one.
#[tokio::test]
async fn a_balance_changed_before_the_replay_is_replayed_on_the_new_item() {
    let pair = pair().await;
    seed(&pair, "conflict", 100, "USD").await;
    let h = &pair.0;
    let other = LedgerHarness::event("conflict-other", "conflict", 200, "USD");
    let tables = (h.ledger.store().table().to_owned(), h.ledger.table().to_owned(), h.outbox_table.clone());
    let write_other = other.clone();
    let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let write = Box::new(move || post_elsewhere(tables.clone(), write_other.clone()));
    let rules = WriterBefore { at: 2, seen: seen.clone(), write };
    let proxy = Proxy::to_local_aws(Arc::new(rules)).await.unwrap();
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config(RetryConfig::disabled()).await);
    let through = Ledger::new(DynamoDbStore::new(client, h.ledger.store().table()), h.ledger.table(), None);
    let events = vec![
        LedgerHarness::event("conflict-1", "conflict", 10, "USD"),
        LedgerHarness::event("conflict-2", "conflict", -200, "USD"),
        LedgerHarness::event("conflict-3", "conflict", 5, "USD"),
    ];
    let answers: Vec<String> = through.post_batch(&events).await.iter().map(summary).collect();
    assert_eq!(answers, ["fresh Applied"; 3], "decided on 300, not on the 100 first seen");
    let transactions = seen.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(transactions, 3, "refused on 100, refused on 300 (the other writer's), committed");
    pair.1.ledger.post(&other).await.unwrap();
    let mut single = Vec::new();
    for event in &events {
        single.push(summary(&pair.1.ledger.post(event).await));
    }
    assert_eq!(answers, single);
    let balance = h.ledger.balance("conflict").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (115, 5));
    assert_eq!(Some(balance), pair.1.ledger.balance("conflict").await.unwrap());
    assert_eq!(h.ledger.entries("conflict").await.unwrap(), pair.1.ledger.entries("conflict").await.unwrap());
}
