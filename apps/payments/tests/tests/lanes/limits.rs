//! An ordered batch in lanes (`Ledger::post_batch_in_lanes`) never sends a transaction past
//! DynamoDB's limits (100 actions, 4 MB), whatever its lanes, accounts, copies across lanes and
//! receipts: every `TransactWriteItems` body is read on its way to the local AWS (which does not
//! refuse them itself).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use aws_config::retry::RetryConfig;
use effectively_once_dynamodb::DynamoDbStore;
use end_to_end::LedgerHarness;
use local::proxy::{Fault, Proxy, Rules};
use payments::{Ledger, PaymentEvent};

/// The largest transaction seen: its actions and its bytes.
#[derive(Default)]
struct Largest {
    actions: AtomicUsize,
    bytes: AtomicUsize,
}

impl Rules for Largest {
    fn decide(&self, _operation: &str) -> Fault {
        Fault::Pass
    }

    fn decide_request(&self, operation: &str, body: &[u8]) -> Fault {
        if operation.starts_with("dynamodb:TransactWriteItems") {
            let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            let actions = value["TransactItems"].as_array().map_or(0, Vec::len);
            self.actions.fetch_max(actions, Ordering::SeqCst);
            self.bytes.fetch_max(body.len(), Ordering::SeqCst);
        }
        Fault::Pass
    }
}

fn event(id: String, account: String, amount: i64, receipt: bool) -> PaymentEvent {
    let mut event = LedgerHarness::event(&id, &account, amount, "USD");
    if receipt {
        event.receipt_email = Some(format!("{}@example.com", "r".repeat(40)));
    }
    event
}

/// `len` events on `accounts` accounts spread over `lanes` lanes, every fifth asking for a
/// receipt, every seventh (given `copies`) a copy of the one before it in the next lane.
fn batch(len: usize, accounts: usize, lanes: usize, copies: bool) -> (Vec<PaymentEvent>, Vec<String>) {
    let (mut events, mut lanes_of) = (Vec::new(), Vec::new());
    for n in 0..len {
        if copies && n % 7 == 6 {
            let previous: PaymentEvent = events.last().cloned().unwrap();
            events.push(previous);
        } else {
            events.push(event(format!("lim-{n}"), format!("lim-acct-{}", n % accounts), 10, n % 5 == 0));
        }
        lanes_of.push(format!("p-{}", n % lanes));
    }
    (events, lanes_of)
}

/// Hot accounts, many accounts, many lanes; with and without copies across lanes; every fifth
/// event with a receipt (an outbox row more).
#[tokio::test]
async fn no_transaction_passes_dynamodbs_limits_in_lanes() {
    for (len, accounts, lanes, copies) in [
        (100, 1, 3, true),
        (150, 20, 3, true),
        (200, 3, 10, true),
        (120, 60, 2, true),
        (100, 1, 3, false),
        (150, 20, 3, false),
        (300, 7, 4, false),
    ] {
        let h = LedgerHarness::new().await;
        let largest = Arc::new(Largest::default());
        let proxy = Proxy::to_local_aws(largest.clone()).await.expect("the fault proxy");
        let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config(RetryConfig::disabled()).await);
        let store = DynamoDbStore::new(client, h.ledger.store().table());
        let ledger = Ledger::new(store, h.ledger.table(), Some(h.outbox_table.clone()));
        let (events, lanes_of) = batch(len, accounts, lanes, copies);
        let lane_refs: Vec<Option<&str>> = lanes_of.iter().map(|lane| Some(lane.as_str())).collect();
        let results = ledger.post_batch_in_lanes(&events, &lane_refs, payments::Delivery::Unknown).await;
        let failed: Vec<String> =
            results.iter().enumerate().filter(|(_, r)| r.is_err()).map(|(i, r)| format!("#{i}: {r:?}")).collect();
        assert!(failed.is_empty(), "{len}/{accounts}/{lanes}: {failed:#?}");
        let (actions, bytes) = (largest.actions.load(Ordering::SeqCst), largest.bytes.load(Ordering::SeqCst));
        assert!(actions <= 100 && bytes <= 4 << 20, "{len}/{accounts}/{lanes}: {actions} actions, {bytes} bytes");
    }
}
