//! Review round 2: the audit let a funding credit end `Rejected` (`Kind::FundingCredit` allowed
//! any fate but the DLQ), though the debit race's funding credit is a USD credit on a fresh
//! account and has no legitimate rejection: a ledger that refused it ("insufficient funds", for
//! a credit) and its debit passed every invariant. "Nothing lost" counts the refused credit as
//! rejected, recorded, and nothing checked that a rejection has a reason the contract gives.
//! Now the funding credit must apply, and each rejection's reason must be one its kind can get.

use effectively_once::{Record, Status};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::{DynamoDbStore, NEVER_EXPIRES};
use payments::{Ledger, PaymentEvent, Posting, Rejection};
use payments_local::invariants::audit;
use payments_local::resources::{self, Clients};
use payments_local::workload::{Kind, Plan, Sent};

#[tokio::test]
async fn a_rejected_funding_credit_fails_an_invariant() {
    let clients = Clients::local().await;
    let run = unique_name("aud3");
    let r = resources::up(&clients, &run).await.unwrap();
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table);
    let _ledger = Ledger::new(store.clone(), &r.ledger_table, Some(r.outbox_table.clone()));
    let account = format!("{run}-acct");
    let credit = PaymentEvent {
        event_id: format!("{run}-credit"),
        account_id: account.clone(),
        amount_cents: 5_000,
        currency: "USD".into(),
        receipt_email: None,
    };
    let debit = PaymentEvent { event_id: format!("{run}-debit"), amount_cents: -3_000, ..credit.clone() };
    // A broken ledger: both refused, both recorded, nothing posted.
    let hasher = effectively_once::Config::default();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    for e in [&credit, &debit] {
        let posting = Posting::Rejected { reason: Rejection::InsufficientFunds { balance_cents: 0 } };
        let record = Record {
            id: format!("payments#{}", e.event_id),
            status: Status::Completed,
            lease_expires_at_ms: 0,
            expiration_s: NEVER_EXPIRES,
            payload_hash: hasher.payload_hash(e).unwrap().into(),
            owner: String::new(),
            response: Some(serde_json::to_string(&posting).unwrap()),
        };
        assert!(store.record_outcome(&record, now_ms, None).await.unwrap().is_none());
    }
    let sent =
        |event: PaymentEvent, kind| Sent { body: serde_json::to_string(&event).unwrap(), event, kind, reuses: false };
    let plan =
        Plan { sent: vec![sent(credit, Kind::FundingCredit), sent(debit, Kind::RacingDebit)], ..Plan::default() };
    let found = audit(&pipeline(&clients, &r), &plan, &run, 0).await.unwrap();
    resources::down(&clients, &r).await.ok();
    assert!(!found.ok(), "every invariant holds with the funding credit refused:\n{}", found.table());
    let kinds = found.checks.iter().find(|c| c.name.starts_with("each kind ends as the contract allows")).unwrap();
    assert!(
        !kinds.ok,
        "a funding credit refused for insufficient funds is no fate the contract gives:\n{}",
        found.table()
    );
}

fn pipeline(clients: &Clients, r: &payments_local::Resources) -> payments_local::Pipeline {
    payments_local::Pipeline { clients: clients.clone(), resources: r.clone() }
}
