//! The chaos audit accounts for every `AMBIGUOUS` receipt row: each needs its email marker
//! recorded `Ambiguous`, no more of them than the run's faults explain (crashes after SES
//! accepted, lost claim or SES answers, SES 5xx), and some email where receipts were due.
//! Otherwise its invariant "one receipt per applied event with an address" would hold for a run
//! in which no receipt was ever sent.

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Record, Status};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::{DynamoDbStore, NEVER_EXPIRES};
use effectively_once_effects::{EmailMessage, EmailSender, SendOutcome, SesSender};
use payments::{Ledger, PaymentEvent};
use payments_local::invariants::{audit, Audit};
use payments_local::resources::{self, Clients, Resources, RECEIPT_FROM};
use payments_local::workload::{Kind, Plan, Sent};

fn receipts_hold(found: &Audit) -> bool {
    found.checks.iter().find(|c| c.name.starts_with("one receipt per applied event")).unwrap().ok
}

/// Posts `count` credits with an address at `@{domain}.example.com` and returns their plan.
async fn post(clients: &Clients, r: &Resources, domain: &str, count: usize) -> Plan {
    let ledger = Ledger::new(
        DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table),
        &r.ledger_table,
        Some(r.outbox_table.clone()),
    );
    let mut plan = Plan::default();
    for i in 0..count {
        let event = PaymentEvent {
            event_id: format!("{domain}-{i}"),
            account_id: format!("{domain}-acct-{i}"),
            amount_cents: 500,
            currency: "USD".into(),
            receipt_email: Some(format!("cust{i}@{domain}.example.com")),
        };
        ledger.post(&event).await.unwrap();
        plan.sent.push(Sent { body: serde_json::to_string(&event).unwrap(), event, kind: Kind::Credit, reuses: false });
    }
    plan
}

/// Marks the receipt row `status` through the relay's own `Outbox::mark` (a `SENT` row drops its
/// address there, as the relay's does).
async fn mark_row(clients: &Clients, r: &Resources, event_id: &str, status: &str) {
    let status = payments::RowStatus::parse(status).expect("a row status");
    payments::Outbox::new(clients.dynamodb.clone(), &r.outbox_table)
        .mark(event_id, status, None, "2026-12-02T10:00:00.000Z")
        .await
        .unwrap();
}

/// Records the email marker `email#{event_id}` completed with `receipt`, as `send_once` leaves it.
async fn record_marker(clients: &Clients, r: &Resources, event_id: &str, receipt: &SendOutcome) {
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table);
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let record = Record {
        id: format!("email#{event_id}"),
        status: Status::Completed,
        lease_expires_at_ms: 0,
        expiration_s: NEVER_EXPIRES,
        payload_hash: effectively_once::Config::default().payload_hash(event_id).unwrap().into(),
        owner: String::new(),
        response: Some(serde_json::to_string(receipt).unwrap()),
    };
    assert!(store.record_outcome(&record, now_ms, None).await.unwrap().is_none());
}

#[tokio::test]
async fn no_email_sent_at_all_fails_the_receipt_invariant() {
    let clients = Clients::local().await;
    let run = unique_name("aud2");
    let r = resources::up(&clients, &run).await.unwrap();
    let plan = post(&clients, &r, &run, 5).await;
    for s in &plan.sent {
        // A relay that never sends and flags every row AMBIGUOUS.
        mark_row(&clients, &r, &s.event.event_id, "AMBIGUOUS").await;
    }
    // Even with faults enough to explain every row.
    let found = audit(&pipeline(&clients, &r), &plan, &run, 5).await.unwrap();
    resources::down(&clients, &r).await.ok();
    assert_eq!(found.emails, 0, "no email was sent");
    let receipts = found.checks.iter().find(|c| c.name.starts_with("one receipt per applied event")).unwrap();
    assert!(
        !receipts.ok,
        "'{}' holds with 0 emails for 5 applied events with an address:\n{}",
        receipts.name,
        found.table()
    );
}

#[tokio::test]
async fn ambiguous_rows_need_their_marker_the_faults_to_explain_them_and_some_email_sent() {
    let clients = Clients::local().await;
    let run = unique_name("aud4");
    let r = resources::up(&clients, &run).await.unwrap();

    // One receipt sent (to the local SES, row SENT, marker Sent); three flagged ambiguous by the
    // at-most-once path (marker Ambiguous, row AMBIGUOUS).
    let plan = post(&clients, &r, &run, 4).await;
    let first = &plan.sent[0].event;
    let message = EmailMessage {
        to: first.receipt_email.clone().unwrap(),
        subject: "Payment received".into(),
        text: "500 USD".into(),
    };
    let message_id = SesSender::new(clients.ses.clone(), RECEIPT_FROM).send(&message).await.unwrap();
    record_marker(&clients, &r, &first.event_id, &SendOutcome::Sent { message_id }).await;
    mark_row(&clients, &r, &first.event_id, "SENT").await;
    for s in &plan.sent[1..] {
        record_marker(&clients, &r, &s.event.event_id, &SendOutcome::Ambiguous).await;
        mark_row(&clients, &r, &s.event.event_id, "AMBIGUOUS").await;
    }
    let explained = audit(&pipeline(&clients, &r), &plan, &run, 3).await.unwrap();
    assert_eq!(explained.emails, 1);
    assert!(
        explained.ok(),
        "three ambiguous rows, each with its marker, three faults to explain them:\n{}",
        explained.table()
    );
    let unexplained = audit(&pipeline(&clients, &r), &plan, &run, 2).await.unwrap();
    assert!(!receipts_hold(&unexplained), "three ambiguous rows, faults for two:\n{}", unexplained.table());

    // A row flagged AMBIGUOUS whose marker says the email was sent: not the at-most-once path.
    let last = &plan.sent[3].event;
    clients
        .dynamodb
        .delete_item()
        .table_name(&r.idempotency_table)
        .key("id", AttributeValue::S(format!("email#{}", last.event_id)))
        .send()
        .await
        .unwrap();
    record_marker(&clients, &r, &last.event_id, &SendOutcome::Sent { message_id: "m-1".into() }).await;
    let unbacked = audit(&pipeline(&clients, &r), &plan, &run, 3).await.unwrap();
    assert!(!receipts_hold(&unbacked), "an AMBIGUOUS row whose marker says Sent:\n{}", unbacked.table());

    // Every receipt ambiguous, each with its marker, faults for all: none sent still fails.
    let silent = format!("{run}q");
    let quiet = post(&clients, &r, &silent, 3).await;
    for s in &quiet.sent {
        record_marker(&clients, &r, &s.event.event_id, &SendOutcome::Ambiguous).await;
        mark_row(&clients, &r, &s.event.event_id, "AMBIGUOUS").await;
    }
    let none_sent = audit(&pipeline(&clients, &r), &quiet, &silent, 3).await.unwrap();
    resources::down(&clients, &r).await.ok();
    assert_eq!(none_sent.emails, 0);
    assert!(!receipts_hold(&none_sent), "3 receipts due, 0 emails:\n{}", none_sent.table());
}

fn pipeline(clients: &Clients, r: &payments_local::Resources) -> payments_local::Pipeline {
    payments_local::Pipeline { clients: clients.clone(), resources: r.clone() }
}
