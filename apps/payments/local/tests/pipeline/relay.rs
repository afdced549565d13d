//! Receipts the outbox stream gave up on, through the event source mapping emulator (the
//! template's mapping: retries until the 6 h record age, bisection, on-failure queue; the
//! stream's 24 h retention) and the real relay: the Streams driver goes past a permanent
//! failure, and the relay skips a receipt whose row is gone; and a receipt the stream lost for
//! good (its record trimmed, so the on-failure record names sequence numbers no replay reaches)
//! is sent by the outbox sweep, once, the outbox row being the source of truth.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{EmailSender, Policy, SesSender};
use local::esm::{self, StreamMapping};
use local::invoke::{InProcess, StreamFunction};
use payments::{Ledger, PaymentEvent};
use payments_local::invariants::sent_emails;
use payments_local::resources::{self, Clients, Resources};
use receipts_relay::{Alert, Alerts, Receipts, Sweep, Sweeper};

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
    InProcess::new(receipts(clients, r, sender, counted()), "review").park_in(&clients.sqs, &r.receipts_park_url)
}

/// The relay's handler on `r`, as `main` builds it, its alerts counted in `alerts`.
fn receipts<E: EmailSender>(clients: &Clients, r: &Resources, sender: E, alerts: Alerts) -> Receipts<E> {
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table);
    let markers = Idempotency::new(store, Config::default().with_lease(Duration::from_secs(60)));
    Receipts::new(markers, sender, &r.outbox_table, Policy::default()).with_alerts(alerts)
}

fn counted() -> Alerts {
    Alerts::new(effectively_once_lambda::metrics::Emf::named("review")).published(false)
}

async fn verified_ses(clients: &Clients) -> SesSender {
    clients.ses.create_email_identity().email_identity(FROM).send().await.unwrap();
    SesSender::new(clients.ses.clone(), FROM)
}

/// An outbox row deleted before the relay reaches its INSERT (an erasure request, a manual
/// cleanup, a TTL): the relay still emails the stream image's address, then `outbox::mark`
/// finds no row and the record fails *permanently*. The stream driver reports a permanent
/// failure exactly like a retryable one, so the mapping retries it on every delivery; with
/// MaximumRetryAttempts -1 the shard is held until the record is past its age limit, then the
/// batch is discarded together with every record behind it: the other payments' receipts wait
/// for hours, are never sent by the relay, and their rows stay PENDING. (With the earlier 5
/// retries the same batch was discarded after six deliveries.)
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
    let mut stream = StreamMapping::with(
        &r.outbox_table,
        &payments_local::resources::mapping("OutboxTable"),
        Some(r.failures_url.clone()),
    );
    // Twenty deliveries: before the fix, the permanent failure was retried every time and held
    // the shard.
    for _ in 0..20 {
        esm::poll_stream(&clients, &mut stream, &function).await.unwrap();
    }
    let mut held = Vec::new();
    for (event_id, _) in &posted[1..] {
        held.push(row_status(&clients, &r, event_id).await);
    }
    // Six hours later by the mapping's clock: the held batch is past MaximumRecordAgeInSeconds.
    stream.clock = || SystemTime::now() + Duration::from_secs(21_600 + 60);
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

/// A day and a minute, in the emulator's clock and the sweep's: past the stream's 24 h retention.
const A_DAY_LATER: Duration = Duration::from_secs(86_400 + 60);

/// Epoch milliseconds a day and a minute from now.
fn a_day_later_ms() -> u64 {
    (SystemTime::now() + A_DAY_LATER).duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// SES refuses the sender (here: an identity not verified yet, as SES refuses a paused account:
/// `Blocked`) for longer than the stream keeps the receipt's record. The relay releases the
/// marker and fails the record; the mapping discards it at its age limit, the stream trims it a
/// day after it was written, and a replay of the on-failure destination reaches nothing. The
/// row is still PENDING: the outbox sweep finds it, sends it once the block clears, through the
/// relay's marker, and marks it; a second sweep and a late stream delivery send nothing more.
#[tokio::test]
async fn a_receipt_the_stream_lost_is_sent_once_by_the_outbox_sweep() {
    let (clients, r) = setup().await;
    let run = unique_name("swp");
    let posted = post(&clients, &r, &run, 1).await;
    let (event_id, to) = &posted[0];
    let from = format!("receipts@{run}.example.com");
    let sender = SesSender::new(clients.ses.clone(), &from);
    let alerts = counted();
    let function = InProcess::new(receipts(&clients, &r, sender.clone(), alerts.clone()), "review");
    let mut stream = StreamMapping::with(
        &r.outbox_table,
        &payments_local::resources::mapping("OutboxTable"),
        Some(r.failures_url.clone()),
    );
    for _ in 0..5 {
        esm::poll_stream(&clients, &mut stream, &function).await.unwrap();
    }
    assert_eq!(row_status(&clients, &r, event_id).await.as_deref(), Some("PENDING"));
    assert_eq!(alerts.count(Alert::EmailBlocked), 5, "blocked on every delivery");
    // Past the age limit the mapping discards the record; a day on, the stream has trimmed it.
    stream.clock = || SystemTime::now() + Duration::from_secs(21_600 + 60);
    let poll = esm::poll_stream(&clients, &mut stream, &function).await.unwrap();
    assert_eq!((poll.delivered, poll.given_up), (0, 1), "discarded to the on-failure destination");
    stream.clock = || SystemTime::now() + A_DAY_LATER;
    let sweeper = Sweeper::new(receipts(&clients, &r, sender, alerts.clone()), Sweep::default());
    let blocked = sweeper.run(a_day_later_ms(), None).await;
    assert_eq!((blocked.found, blocked.unsent, blocked.sent), (1, 1, 0), "still blocked: {blocked:?}");

    // The block clears (the sender is verified). A replay reaches nothing; the sweep sends.
    clients.ses.create_email_identity().email_identity(&from).send().await.unwrap();
    let replayed = esm::replay_stream_failures(&clients, &stream, &function).await.unwrap();
    assert_eq!((replayed.records, replayed.kept), (0, 1), "the trimmed record cannot be replayed");
    let swept = sweeper.run(a_day_later_ms(), None).await;
    let emails = || sent_emails().unwrap().iter().filter(|e| *e == to).count();
    assert_eq!(
        (row_status(&clients, &r, event_id).await.as_deref(), emails()),
        (Some("SENT"), 1),
        "the sweep sends the receipt the stream lost, once: {swept:?}"
    );
    assert_eq!((swept.found, swept.sent, swept.unsent, swept.complete), (1, 1, 0, true));

    // Again: the row left the pending index. And a late delivery of the record (a mapping read
    // from the stream's start by a clock inside its retention) meets the marked row.
    let again = sweeper.run(a_day_later_ms(), None).await;
    assert_eq!((again.found, again.sent), (0, 0), "{again:?}");
    let mut late = StreamMapping::with(&r.outbox_table, &payments_local::resources::mapping("OutboxTable"), None);
    assert!(drain_counting(&clients, &mut late, &function).await > 0, "the record was delivered late");
    assert_eq!(emails(), 1, "one receipt, whoever came first");
    assert_eq!(row_status(&clients, &r, event_id).await.as_deref(), Some("SENT"));
}

/// Drains like [`drain`]; the records delivered.
async fn drain_counting<F: StreamFunction>(clients: &Clients, stream: &mut StreamMapping, function: &F) -> usize {
    let mut delivered = 0;
    for _ in 0..60 {
        let poll = esm::poll_stream(clients, stream, function).await.unwrap();
        if poll.delivered == 0 {
            return delivered;
        }
        delivered += poll.delivered;
    }
    panic!("the stream never settled");
}

/// A sweep leaves rows younger than its threshold to the stream, takes at most its budget of
/// the older ones (pages of the pending index's shards in turn), and says it is not complete;
/// the next sweep takes the rest. Each receipt goes out once.
#[tokio::test]
async fn a_sweep_takes_its_budget_of_rows_and_the_next_sweep_the_rest() {
    let (clients, r) = setup().await;
    let run = unique_name("bdg");
    let posted = post(&clients, &r, &run, 7).await;
    let sender = SesSender::new(clients.ses.clone(), FROM);
    let sweep = Sweep { page_size: 2, max_rows: 5, ..Sweep::default() };
    let sweeper = Sweeper::new(receipts(&clients, &r, sender, counted()), sweep);
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let fresh = sweeper.run(now_ms, None).await;
    assert_eq!((fresh.found, fresh.complete), (0, true), "younger than the threshold: the stream's");

    let first = sweeper.run(a_day_later_ms(), None).await;
    assert_eq!((first.found, first.sent, first.complete), (5, 5, false), "{first:?}");
    let second = sweeper.run(a_day_later_ms(), None).await;
    assert_eq!((second.found, second.sent, second.complete), (2, 2, true), "{second:?}");
    let sent = sent_emails().unwrap();
    for (event_id, to) in &posted {
        assert_eq!(row_status(&clients, &r, event_id).await.as_deref(), Some("SENT"), "{event_id}");
        assert_eq!(sent.iter().filter(|e| *e == to).count(), 1, "{event_id}");
    }
    assert_eq!(sweeper.run(a_day_later_ms(), None).await.found, 0);
}
