//! A batch's rejection decided on a balance item another sandbox changed before the commit:
//! the recorded answer must be the one posting one by one records.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_config::retry::RetryConfig;
use effectively_once::Outcome;
use effectively_once_dynamodb::DynamoDbStore;
use end_to_end::{summary, LedgerHarness};
use local::proxy::{Fault, Proxy, Rules};
use payments::{Ledger, PaymentEvent, Posting};

/// Lets every request through and, just before the `at`-th `TransactWriteItems` (from 1), posts
/// `event` to the same tables from a ledger of its own (another sandbox).
struct WriterBefore {
    at: u64,
    seen: Arc<AtomicU64>,
    tables: (String, String, String),
    event: PaymentEvent,
}

impl Rules for WriterBefore {
    fn decide(&self, operation: &str) -> Fault {
        if operation.starts_with("dynamodb:TransactWriteItems") {
            let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
            if n == self.at {
                let (tables, event) = (self.tables.clone(), self.event.clone());
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                    runtime.block_on(async {
                        let client =
                            aws_sdk_dynamodb::Client::new(&effectively_once_dynamodb::testing::sdk_config().await);
                        let ledger = Ledger::new(DynamoDbStore::new(client, tables.0), tables.1, Some(tables.2));
                        assert!(matches!(ledger.post(&event).await, Ok(Outcome::Fresh(Posting::Applied))));
                    });
                })
                .join()
                .unwrap();
            }
        }
        Fault::Pass
    }
}

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
    let tables = (h.ledger.store().table().to_owned(), h.ledger.table().to_owned(), h.outbox_table.clone());
    let seen = Arc::new(AtomicU64::new(0));
    let rules = WriterBefore { at: 2, seen: seen.clone(), tables, event: other.clone() };
    let proxy = Proxy::to_local_aws(Arc::new(rules)).await.unwrap();
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config(RetryConfig::disabled()).await);
    let through = Ledger::new(DynamoDbStore::new(client, h.ledger.store().table()), h.ledger.table(), None);
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
}
