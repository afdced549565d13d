//! A real process killed at a crash point: the emulator process aborts after the ledger commit
//! and before the ack; a new process finishes the work, and nothing is applied twice.

use std::process::Command;

use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::DynamoDbStore;
use local::esm;
use payments::Ledger;
use payments_local::resources::{self, Clients};
use payments_local::workload;

#[tokio::test]
async fn a_process_killed_after_the_commit_and_before_the_ack_applies_nothing_twice() {
    let clients = Clients::local().await;
    let prefix = unique_name("kill");
    let r = resources::up(&clients, &prefix).await.unwrap();
    let bodies: Vec<String> = (0..10)
        .map(|i| {
            format!(
                r#"{{"event_id": "pay-{prefix}-{i}", "account_id": "acct-k", "amount_cents": {}, "currency": "USD"}}"#,
                100 + i
            )
        })
        .collect();
    workload::send(&clients.sqs, &r.queue_url, &bodies).await.unwrap();

    let local = env!("CARGO_BIN_EXE_payments-local");
    let crashed =
        Command::new(local).args(["run", "--prefix", &prefix]).env("LOCAL_CRASH_AFTER_COMMIT", "1").output().unwrap();
    assert!(!crashed.status.success(), "the process died at the crash point");
    assert!(String::from_utf8_lossy(&crashed.stderr).contains("crash point reached"));

    let ledger = Ledger::new(DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table), &r.ledger_table, None);
    let committed = ledger.entries("acct-k").await.unwrap().len();
    assert!(committed > 0, "its batch committed before it died");
    assert!(esm::queue_depth(&clients, &r.queue_url).await.unwrap() >= 10, "and nothing was acknowledged");

    let finished = Command::new(local).args(["run", "--prefix", &prefix]).output().unwrap();
    assert!(finished.status.success(), "{}", String::from_utf8_lossy(&finished.stderr));
    let balance = ledger.balance("acct-k").await.unwrap().unwrap();
    let expected: i64 = (0..10).map(|i| 100 + i).sum();
    assert_eq!(
        (balance.balance_cents, balance.entry_count),
        (expected, 10),
        "the redelivered batch replayed, not re-applied"
    );
    assert_eq!(esm::queue_depth(&clients, &r.queue_url).await.unwrap(), 0);
    resources::down(&clients, &r).await.unwrap();
}
