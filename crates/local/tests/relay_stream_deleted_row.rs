//! Receipts the outbox stream gave up on, through the event source mapping emulator (the
//! template's mapping: retries until the 24 h record age, bisection, on-failure queue) and the
//! real relay: the Streams driver goes past a permanent failure, and the relay skips a receipt
//! whose row is gone, so no row is left PENDING with nothing to retry it (the on-failure record
//! holds only shard and sequence numbers, and no tool redrives it).

use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{EmailSender, Policy, SesSender};
use local::esm::{self, StreamMapping};
use local::invariants::sent_emails;
use local::invoke::{InProcess, StreamFunction};
use local::resources::{self, Clients, Resources};
use payments::{Ledger, PaymentEvent};
use receipts_relay::{Alerts, Receipts};

const FROM: &str = "receipts@example.com";

async fn setup() -> (Clients, Resources) {
    let clients = Clients::local().await;
    let r = resources::up(&clients, &unique_name("rv")).await.expect("local resources");
    (clients, r)
}

/// Posts `n` payments with receipts; their recipients.
async fn post(clients: &Clients, r: &Resources, run: &str, n: usize) -> Vec<(String, String)> {
    let ledger = Ledger::new(
        DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table),
        &r.ledger_table,
        Some(r.outbox_table.clone()),
    );
    let mut out = Vec::new();
    for i in 0..n {
        let event_id = format!("pay-{run}-{i}");
        let to = format!("c{i}@{run}.example.com");
        let mut e = PaymentEvent::parse(&format!(
            r#"{{"event_id": "{event_id}", "account_id": "acct-{run}", "amount_cents": 10, "currency": "USD"}}"#
        ))
        .unwrap();
        e.receipt_email = Some(to.clone());
        ledger.post(&e).await.unwrap();
        out.push((event_id, to));
    }
    out
}

async fn row_status(clients: &Clients, r: &Resources, event_id: &str) -> Option<String> {
    let out = clients
        .dynamodb
        .get_item()
        .table_name(&r.outbox_table)
        .key("pk", AttributeValue::S(payments::outbox::row_key(event_id)))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item().map(|i| i["status"].as_s().unwrap().clone())
}

async fn drain<F: StreamFunction>(clients: &Clients, stream: &mut StreamMapping, function: &F) {
    for _ in 0..60 {
        if esm::poll_stream(clients, stream, function).await.unwrap().delivered == 0 {
            return;
        }
    }
    panic!("the stream never settled");
}

/// The relay as deployed: a permanent failure parked in its park queue.
fn relay<E: EmailSender>(clients: &Clients, r: &Resources, sender: E) -> InProcess<Receipts<E>> {
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table);
    let markers = Idempotency::new(store, Config::default().with_lease(Duration::from_secs(60)));
    let receipts = Receipts::new(markers, sender, &r.outbox_table, Policy::default())
        .with_alerts(Alerts::new(effectively_once_lambda::metrics::Emf::named("review")).published(false));
    InProcess::new(receipts, "review").park_in(&clients.sqs, &r.receipts_park_url)
}

async fn verified_ses(clients: &Clients) -> SesSender {
    clients.ses.create_email_identity().email_identity(FROM).send().await.unwrap();
    SesSender::new(clients.ses.clone(), FROM)
}

/// An outbox row deleted before the relay reaches its INSERT (an erasure request, a manual
/// cleanup, a TTL): the relay still emails the stream image's address, then `outbox::mark`
/// finds no row and the record fails *permanently*. The stream driver reports a permanent
/// failure exactly like a retryable one, so the mapping retries it on every delivery; with
/// MaximumRetryAttempts -1 the shard is held until the record is 24 h old, then the batch is
/// discarded together with every record behind it: the other payments' receipts wait a day,
/// are never sent, and their rows stay PENDING for good. (With the earlier 5 retries the same
/// batch was discarded after six deliveries.)
#[tokio::test]
async fn a_deleted_row_does_not_take_the_receipts_behind_it_down() {
    let (clients, r) = setup().await;
    let run = unique_name("del");
    let posted = post(&clients, &r, &run, 3).await;
    // The first row is deleted before the relay gets to it.
    clients
        .dynamodb
        .delete_item()
        .table_name(&r.outbox_table)
        .key("pk", AttributeValue::S(payments::outbox::row_key(&posted[0].0)))
        .send()
        .await
        .unwrap();
    let function = relay(&clients, &r, verified_ses(&clients).await);
    let mut stream = StreamMapping::new(&r.outbox_table, Some(r.failures_url.clone()));
    // Twenty deliveries: before the fix, the permanent failure was retried every time and held
    // the shard.
    for _ in 0..20 {
        esm::poll_stream(&clients, &mut stream, &function).await.unwrap();
    }
    let mut held = Vec::new();
    for (event_id, _) in &posted[1..] {
        held.push(row_status(&clients, &r, event_id).await);
    }
    // A day later by the mapping's clock: the held batch is past MaximumRecordAgeInSeconds.
    stream.clock = || SystemTime::now() + Duration::from_secs(86_400 + 60);
    drain(&clients, &mut stream, &function).await;
    let sent = sent_emails().unwrap();
    let discarded = esm::peek_bodies(&clients, &r.failures_url).await.unwrap();
    let erased = sent.iter().filter(|e| **e == posted[0].1).count();
    for (event_id, to) in &posted[1..] {
        assert_eq!(
            row_status(&clients, &r, event_id).await.as_deref(),
            Some("SENT"),
            "{event_id}: an innocent receipt behind the deleted row; after 20 deliveries: {held:?}; \
             on-failure records: {discarded:?}; emails sent to the deleted row's address: {erased}"
        );
        assert_eq!(sent.iter().filter(|e| *e == to).count(), 1, "{event_id}");
    }
    // The deleted row's receipt is skipped, not a failure: nothing parked, nothing discarded.
    let parked = local::park::parcels(&clients, &r.receipts_park_url).await.unwrap();
    assert!(parked.is_empty() && discarded.is_empty(), "parked: {parked:?}; on-failure records: {discarded:?}");
}
