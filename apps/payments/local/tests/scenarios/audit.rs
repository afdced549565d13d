//! The audit reads outcomes back from the tables: a lost event, an event id posted on two
//! accounts and a balance that is not the sum of its entries are each caught, whatever the plan
//! says.

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::DynamoDbStore;
use payments::{Ledger, PaymentEvent};
use payments_local::invariants::audit;
use payments_local::resources::{self, Clients};
use payments_local::workload::{Kind, Plan, Sent};

fn sent(id: &str, account: &str, amount: i64, kind: Kind) -> Sent {
    let event = PaymentEvent {
        event_id: id.into(),
        account_id: account.into(),
        amount_cents: amount,
        currency: "USD".into(),
        receipt_email: None,
    };
    Sent { body: serde_json::to_string(&event).unwrap(), event, kind, reuses: false }
}

fn holds(audit: &payments_local::invariants::Audit, name_starts: &str) -> bool {
    audit.checks.iter().find(|c| c.name.starts_with(name_starts)).unwrap_or_else(|| panic!("no check {name_starts}")).ok
}

#[tokio::test]
async fn what_the_tables_hold_decides_not_the_plan() {
    let clients = Clients::local().await;
    let run = unique_name("aud");
    let r = resources::up(&clients, &run).await.unwrap();
    let ledger = Ledger::new(
        DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table),
        &r.ledger_table,
        Some(r.outbox_table.clone()),
    );
    let (a, b) = (format!("{run}-a"), format!("{run}-b"));
    let credit = sent(&format!("{run}-1"), &a, 500, Kind::Credit);
    let overdraft = sent(&format!("{run}-2"), &b, -100, Kind::Overdraft);
    ledger.post(&credit.event).await.unwrap();
    ledger.post(&overdraft.event).await.unwrap();
    let mut plan = Plan { sent: vec![credit.clone(), overdraft], ..Plan::default() };

    let clean = audit(&pipeline(&clients, &r), &plan, &run, 0).await.unwrap();
    assert!(clean.ok(), "{}", clean.table());
    assert_eq!(clean.outcomes[&Kind::Overdraft].get("rejected: insufficient funds"), Some(&1), "read back");

    // Sent but never processed: lost. The credit's id posted again on another account (written
    // by hand, as a broken ledger would): two effects, and a balance that is not its entries'.
    plan.sent.push(sent(&format!("{run}-3"), &a, 700, Kind::Credit));
    let entry = |account: &str| {
        clients
            .dynamodb
            .put_item()
            .table_name(&r.ledger_table)
            .item("pk", AttributeValue::S(format!("account#{account}")))
            .item("sk", AttributeValue::S(format!("entry#{}", credit.event.event_id)))
            .item("event_id", AttributeValue::S(credit.event.event_id.clone()))
            .item("amount_cents", AttributeValue::N("500".into()))
            .item("currency", AttributeValue::S("USD".into()))
            .send()
    };
    entry(&b).await.unwrap();
    let broken = audit(&pipeline(&clients, &r), &plan, &run, 0).await.unwrap();
    assert!(!holds(&broken, "nothing lost"), "{}", broken.table());
    assert!(!holds(&broken, "an event id takes effect once"), "{}", broken.table());
    assert!(!holds(&broken, "balances"), "{}", broken.table());
    assert!(holds(&broken, "key reuse"), "no reused ids in this plan");
    resources::down(&clients, &r).await.unwrap();
}

fn pipeline(clients: &Clients, r: &payments_local::Resources) -> payments_local::Pipeline {
    payments_local::Pipeline { clients: clients.clone(), resources: r.clone() }
}
