//! Another sandbox on the same tables, posting between our transactions: the fault proxy's
//! rules for tests of a ledger batch decided while another writer posts to its accounts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_config::retry::RetryConfig;
use effectively_once::Outcome;
use effectively_once_dynamodb::DynamoDbStore;
use local::proxy::{Fault, Proxy, Rules};
use payments::{Ledger, PaymentEvent};

use crate::LedgerHarness;

/// What the other sandbox posts before our `n`-th `TransactWriteItems` (from 1), if anything.
type Posts = Box<dyn Fn(u64) -> Option<PaymentEvent> + Send + Sync>;

/// Lets every request through and, just before our `n`-th `TransactWriteItems`, has another
/// sandbox post what `posts(n)` names to the same tables, and waits for its answer.
pub struct OtherSandbox {
    posts: Posts,
    seen: Arc<AtomicU64>,
    tables: (String, String, String),
}

impl OtherSandbox {
    /// Beside `h`'s tables.
    pub fn beside(h: &LedgerHarness, posts: impl Fn(u64) -> Option<PaymentEvent> + Send + Sync + 'static) -> Self {
        let tables = (h.ledger.store().table().to_owned(), h.ledger.table().to_owned(), h.outbox_table.clone());
        OtherSandbox { posts: Box::new(posts), seen: Arc::default(), tables }
    }

    /// A ledger on `h`'s tables whose requests go through these rules (no SDK retries), the
    /// proxy that serves them (keep it alive while the ledger is used), and the count of its
    /// `TransactWriteItems` so far.
    pub async fn ledger(self, h: &LedgerHarness) -> (Ledger, Proxy, Arc<AtomicU64>) {
        let seen = self.seen.clone();
        let proxy = Proxy::to_local_aws(Arc::new(self)).await.expect("the fault proxy");
        let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config(RetryConfig::disabled()).await);
        let through = Ledger::new(DynamoDbStore::new(client, h.ledger.store().table()), h.ledger.table(), None);
        (through, proxy, seen)
    }
}

impl Rules for OtherSandbox {
    fn decide(&self, operation: &str) -> Fault {
        if operation.starts_with("dynamodb:TransactWriteItems") {
            let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some(event) = (self.posts)(n) {
                post_elsewhere(&self.tables, event);
            }
        }
        Fault::Pass
    }
}

/// Posts `event` to `tables` (idempotency, ledger, outbox) from a thread and a runtime of its
/// own (another sandbox), and waits for its answer: decided (a debit elsewhere may be refused;
/// the tests check the balances).
pub fn post_elsewhere(tables: &(String, String, String), event: PaymentEvent) {
    let tables = tables.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let client = aws_sdk_dynamodb::Client::new(&effectively_once_dynamodb::testing::sdk_config().await);
            let ledger = Ledger::new(DynamoDbStore::new(client, tables.0), tables.1, Some(tables.2));
            assert!(matches!(ledger.post(&event).await, Ok(Outcome::Fresh(_))));
        });
    })
    .join()
    .unwrap();
}
