//! Findings against deciding a group's refusals on its observed balance (branch `refuse`): each
//! test pins what posting one by one would do, and is ignored while the finding stands.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_config::retry::RetryConfig;
use effectively_once::Outcome;
use effectively_once_dynamodb::DynamoDbStore;
use end_to_end::LedgerHarness;
use local::proxy::{Fault, Proxy, Rules};
use payments::{Ledger, PaymentEvent, Posting};

fn summary(result: &Result<Outcome<Posting>, payments::Error>) -> String {
    match result {
        Ok(Outcome::Fresh(posting)) => format!("fresh {posting:?}"),
        Ok(Outcome::Replayed(posting)) => format!("replayed {posting:?}"),
        Err(payments::Error::Idempotency(error)) => format!("error {:?}", error.kind()),
        Err(error) => format!("error retryable={}", error.is_retryable()),
    }
}

/// Posts `event` to the tables from a thread and a runtime of its own (another sandbox), and
/// waits.
fn post_elsewhere(tables: &(String, String, String), event: PaymentEvent) {
    let tables = tables.clone();
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

/// Another sandbox on a hot account: before each of this ledger's `TransactWriteItems` from
/// the `from`-th on, it posts a credit of one cent to `account`.
struct HotAccount {
    from: u64,
    seen: Arc<AtomicU64>,
    tables: (String, String, String),
    account: String,
}

impl Rules for HotAccount {
    fn decide(&self, operation: &str) -> Fault {
        if operation.starts_with("dynamodb:TransactWriteItems") {
            let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
            if n >= self.from {
                let event = LedgerHarness::event(&format!("{}-elsewhere-{n}", self.account), &self.account, 1, "USD");
                post_elsewhere(&self.tables, event);
            }
        }
        Fault::Pass
    }
}

/// A hot account (another sandbox credits it between every two of our transactions) and a
/// batch holding one overdraft among credits. One by one, in any interleaving with the other
/// writer's credits, the overdraft is rejected and every credit applies; the old path (one
/// event per transaction, each conditioned on the balance covering it) decides them all. Once
/// the overdraft has shown the group its balance, every later transaction of the group is
/// conditioned on the balance being exactly as last seen, which the other writer has always
/// changed: each is cancelled, and after `MAX_ROUNDS` the whole batch is answered retryable.
/// SQS redelivers it to meet the same writer again, until the messages reach the DLQ; a quiet
/// account's event that shares the transactions is failed with it.
#[tokio::test]
async fn a_refusal_on_a_hot_account_still_decides_the_batch_while_another_writer_posts() {
    let h = LedgerHarness::new().await;
    let account = "hot-acct";
    let seed = LedgerHarness::event("hot-seed", account, 100, "USD");
    assert!(matches!(h.ledger.post(&seed).await, Ok(Outcome::Fresh(Posting::Applied))));
    let tables = (h.ledger.store().table().to_owned(), h.ledger.table().to_owned(), h.outbox_table.clone());
    let seen = Arc::new(AtomicU64::new(0));
    let rules = HotAccount { from: 2, seen: seen.clone(), tables, account: account.into() };
    let proxy = Proxy::to_local_aws(Arc::new(rules)).await.unwrap();
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config(RetryConfig::disabled()).await);
    let through = Ledger::new(DynamoDbStore::new(client, h.ledger.store().table()), h.ledger.table(), None);
    let mut events = vec![LedgerHarness::event("hot-0", account, -10_000, "USD")];
    events.extend((1..10).map(|i| LedgerHarness::event(&format!("hot-{i}"), account, 5, "USD")));
    // A quiet account's credit in the same batch: nobody else writes it.
    events.push(LedgerHarness::event("quiet-1", "quiet-acct", 5, "USD"));
    let answers: Vec<String> = through.post_batch(&events).await.iter().map(summary).collect();
    let transactions = seen.load(Ordering::SeqCst);
    eprintln!("{transactions} transactions: {answers:?}");
    assert!(answers[0].starts_with("fresh Rejected { reason: InsufficientFunds"), "{answers:?}");
    assert!(answers[1..].iter().all(|a| a == "fresh Applied"), "every credit applies one by one: {answers:?}");
}
