//! The event source mapping emulator against the local AWS: redelivery, the DLQ, the stream
//! checkpoint and the redrive, observed in the queues, the ledger and the local SES.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::sqs::SqsMessage;
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::{RecordError, RecordResult};
use local::esm::{self, Emulator, SqsMapping, StreamMapping};
use local::invariants::sent_emails;
use local::invoke::{InProcess, SqsFunction, StreamFunction};
use local::resources::{self, Clients, Resources};
use local::{workload, Pipeline};
use payments::{Ledger, PaymentEvent};

async fn setup() -> (Clients, Resources) {
    let clients = Clients::local().await;
    let r = resources::up(&clients, &unique_name("esm")).await.expect("local resources");
    (clients, r)
}

fn ledger(clients: &Clients, r: &Resources) -> Ledger {
    Ledger::new(DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table), &r.ledger_table, None)
}

fn payment(event_id: &str, account: &str, amount: i64) -> String {
    format!(r#"{{"event_id": "{event_id}", "account_id": "{account}", "amount_cents": {amount}, "currency": "USD"}}"#)
}

fn fast(queue_url: &str) -> SqsMapping {
    let mut mapping = SqsMapping::new(queue_url);
    mapping.visibility_timeout = 1;
    mapping
}

fn pipeline(clients: &Clients, r: &Resources) -> Pipeline {
    Pipeline { clients: clients.clone(), resources: r.clone() }
}

/// The emulator on `r`, one poller, failed messages back after a second, no on-failure queue.
fn emulator<P: SqsFunction, R: StreamFunction>(r: &Resources, payments: P, relay: R) -> Emulator<P, R> {
    let mut esm = Emulator::new(r, payments, relay);
    esm.sqs = fast(&r.queue_url);
    esm.stream = StreamMapping::new(&r.outbox_table, None);
    esm
}

/// The real payments handler, which first fails every message whose body contains `needle`
/// while `broken` is set, and counts deliveries per body.
struct Flaky<H> {
    inner: H,
    needle: String,
    broken: AtomicBool,
    once: bool,
    deliveries: Mutex<HashMap<String, usize>>,
}

impl<H> Flaky<H> {
    fn new(inner: H, needle: &str, once: bool) -> Self {
        Flaky { inner, needle: needle.into(), broken: AtomicBool::new(true), once, deliveries: Mutex::default() }
    }

    fn deliveries(&self, needle: &str) -> usize {
        self.deliveries.lock().unwrap().iter().filter(|(k, _)| k.contains(needle)).map(|(_, v)| v).sum()
    }

    fn fail(&self, text: &str) -> bool {
        *self.deliveries.lock().unwrap().entry(text.to_owned()).or_default() += 1;
        if !text.contains(&self.needle) || !self.broken.load(Ordering::SeqCst) {
            return false;
        }
        if self.once {
            self.broken.store(false, Ordering::SeqCst);
        }
        true
    }
}

impl<H: effectively_once_lambda::Handler<SqsMessage>> effectively_once_lambda::Handler<SqsMessage> for Flaky<H> {
    async fn handle(&self, message: &SqsMessage, context: &effectively_once_lambda::events::Context) -> RecordResult {
        if self.fail(message.body.as_deref().unwrap_or("")) {
            return Err(RecordError::retryable("injected: downstream unavailable"));
        }
        self.inner.handle(message, context).await
    }
}

impl<H: effectively_once_lambda::Handler<EventRecord>> effectively_once_lambda::Handler<EventRecord> for Flaky<H> {
    async fn handle(&self, record: &EventRecord, context: &effectively_once_lambda::events::Context) -> RecordResult {
        let text = serde_json::to_string(&record.change.new_image).unwrap();
        if self.fail(&text) {
            return Err(RecordError::retryable("injected: SES throttled"));
        }
        self.inner.handle(record, context).await
    }
}

#[tokio::test]
async fn a_failed_message_is_redelivered_and_applied_once() {
    let (clients, r) = setup().await;
    let bodies = vec![payment("pay-a", "acct-r", 100), payment("pay-b", "acct-r", 200)];
    workload::send(&clients.sqs, &r.queue_url, &bodies).await.unwrap();
    let inner = pipeline(&clients, &r).payments();
    let handler = InProcess::new(Flaky::new(inner.handler().clone(), "pay-b", true), "t");
    let relay = pipeline(&clients, &r).relay();
    let p = emulator(&r, &handler, &relay).run_until_drained(&clients, |_| {}).await.unwrap();
    assert_eq!((p.deliveries, p.failed), (3, 1), "pay-b delivered twice");
    assert_eq!(handler.handler().deliveries("pay-b"), 2);
    let balance = ledger(&clients, &r).balance("acct-r").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (300, 2));
    assert_eq!(esm::queue_depth(&clients, &r.queue_url).await.unwrap(), 0, "both acknowledged");
    assert_eq!(esm::queue_depth(&clients, &r.dlq_url).await.unwrap(), 0);
}

#[tokio::test]
async fn poison_reaches_the_dlq_after_the_maximum_receive_count() {
    let (clients, r) = setup().await;
    let poison = r#"{"event_id": "pay-poison", "amount_cents": 0}"#.to_owned();
    workload::send(&clients.sqs, &r.queue_url, &[poison.clone(), payment("pay-ok", "acct-p", 5)]).await.unwrap();
    let (handler, relay) = (pipeline(&clients, &r).payments(), pipeline(&clients, &r).relay());
    let p = emulator(&r, &handler, &relay).run_until_drained(&clients, |_| {}).await.unwrap();
    assert_eq!(p.failed, r.max_receive_count as usize, "received {} times, then moved", r.max_receive_count);
    assert_eq!(esm::peek_bodies(&clients, &r.dlq_url).await.unwrap(), vec![poison]);
    assert_eq!(esm::queue_depth(&clients, &r.queue_url).await.unwrap(), 0);
    assert_eq!(ledger(&clients, &r).balance("acct-p").await.unwrap().unwrap().balance_cents, 5);
}

#[tokio::test]
async fn a_relay_failure_holds_the_stream_checkpoint_until_it_succeeds() {
    let (clients, r) = setup().await;
    let run = unique_name("ck");
    let ledger = Ledger::new(
        DynamoDbStore::new(clients.dynamodb.clone(), &r.idempotency_table),
        &r.ledger_table,
        Some(r.outbox_table.clone()),
    );
    let recipients: Vec<String> = (0..3).map(|i| format!("c{i}@{run}.example.com")).collect();
    for (i, to) in recipients.iter().enumerate() {
        let mut e = PaymentEvent::parse(&payment(&format!("pay-{run}-{i}"), "acct-s", 10)).unwrap();
        e.receipt_email = Some(to.clone());
        ledger.post(&e).await.unwrap();
    }
    let inner = pipeline(&clients, &r).relay();
    let relay = InProcess::new(Flaky::new(inner.handler().clone(), &recipients[1], true), "t");
    let mut stream = StreamMapping::new(&r.outbox_table, None);
    let first = esm::poll_stream(&clients, &mut stream, &relay).await.unwrap();
    assert_eq!((first.delivered, first.failed_batches), (3, 1));
    assert_eq!(relay.handler().deliveries(&recipients[2]), 0, "nothing after the failed record in that batch");
    let second = esm::poll_stream(&clients, &mut stream, &relay).await.unwrap();
    assert_eq!((second.delivered, second.failed_batches), (2, 0), "resumed at the failed record");
    let third = esm::poll_stream(&clients, &mut stream, &relay).await.unwrap();
    assert_eq!(third.delivered, 0, "checkpoint past the batch");
    let emails = sent_emails().unwrap();
    for to in &recipients {
        assert_eq!(emails.iter().filter(|e| *e == to).count(), 1, "{to}");
    }
    assert_eq!(relay.handler().deliveries(&recipients[0]), 1);
    assert_eq!(relay.handler().deliveries(&recipients[1]), 2);
}

#[tokio::test]
async fn a_redrive_after_the_fix_applies_what_failed_and_nothing_twice() {
    let (clients, r) = setup().await;
    let (good, victim) = (payment("pay-good", "acct-d", 100), payment("pay-victim", "acct-d", 40));
    workload::send(&clients.sqs, &r.queue_url, &[good.clone(), victim.clone()]).await.unwrap();
    let inner = pipeline(&clients, &r).payments();
    // A bug rejects pay-victim until the fix: it ends in the DLQ.
    let handler = InProcess::new(Flaky::new(inner.handler().clone(), "pay-victim", false), "t");
    let relay = pipeline(&clients, &r).relay();
    let mut consumers = emulator(&r, &handler, &relay);
    consumers.run_until_drained(&clients, |_| {}).await.unwrap();
    assert_eq!(esm::peek_bodies(&clients, &r.dlq_url).await.unwrap(), vec![victim.clone()]);
    // An operator also drops an already-applied message into the DLQ by mistake.
    workload::send(&clients.sqs, &r.dlq_url, &[good]).await.unwrap();
    handler.handler().broken.store(false, Ordering::SeqCst);
    assert_eq!(esm::redrive(&clients, &r.dlq_url, &r.queue_url).await.unwrap(), 2);
    consumers.run_until_drained(&clients, |_| {}).await.unwrap();
    let balance = ledger(&clients, &r).balance("acct-d").await.unwrap().unwrap();
    assert_eq!(
        (balance.balance_cents, balance.entry_count),
        (140, 2),
        "the victim applied once; the good one not again"
    );
    assert_eq!(esm::queue_depth(&clients, &r.dlq_url).await.unwrap(), 0);
}

/// The emulator hands the function stream images in Lambda's DynamoDB JSON whatever the types
/// (it turned binary and binary sets into NULL), and the relay reads them: a receipt row that
/// carries binary, set, list, map, null and boolean attributes gets its email, and the
/// checkpoint moves past it.
#[tokio::test]
async fn a_receipt_row_with_attributes_of_every_type_is_relayed() {
    use aws_sdk_dynamodb::primitives::Blob;
    use aws_sdk_dynamodb::types::AttributeValue as Av;
    let (clients, r) = setup().await;
    let run = unique_name("types");
    let to = format!("all@{run}.example.com");
    let mut e = PaymentEvent::parse(&payment(&format!("pay-{run}"), "acct-t", 10)).unwrap();
    e.receipt_email = Some(to.clone());
    let mut item = payments::outbox::row_item(&e, &to, "2026-11-18T11:06:40.123Z");
    item.extend([
        ("blob".to_owned(), Av::B(Blob::new(vec![0u8, 1, 2]))),
        ("numbers".to_owned(), Av::Ns(vec!["1".into(), "2.5".into()])),
        ("blobs".to_owned(), Av::Bs(vec![Blob::new(vec![0u8]), Blob::new(vec![1u8])])),
        ("list".to_owned(), Av::L(vec![Av::B(Blob::new(vec![7u8])), Av::Null(true)])),
        ("map".to_owned(), Av::M([("flag".to_owned(), Av::Bool(true))].into())),
        ("nothing".to_owned(), Av::Null(true)),
        ("flag".to_owned(), Av::Bool(false)),
    ]);
    clients.dynamodb.put_item().table_name(&r.outbox_table).set_item(Some(item)).send().await.unwrap();
    struct Images<H>(H, Mutex<Vec<String>>);
    impl<H: effectively_once_lambda::Handler<EventRecord>> effectively_once_lambda::Handler<EventRecord> for Images<H> {
        async fn handle(
            &self,
            record: &EventRecord,
            context: &effectively_once_lambda::events::Context,
        ) -> RecordResult {
            self.1.lock().unwrap().push(serde_json::to_string(&record.change.new_image).unwrap());
            self.0.handle(record, context).await
        }
    }
    let relay = InProcess::new(Images(pipeline(&clients, &r).relay().handler().clone(), Mutex::default()), "t");
    let mut stream = StreamMapping::new(&r.outbox_table, None);
    let first = esm::poll_stream(&clients, &mut stream, &relay).await.unwrap();
    assert_eq!((first.delivered, first.failed_batches), (1, 0));
    let image: serde_json::Value = serde_json::from_str(&relay.handler().1.lock().unwrap()[0]).unwrap();
    assert_eq!(image["blob"], serde_json::json!({"B": "AAEC"}), "binary as base64, as Lambda sends it");
    assert_eq!(image["list"]["L"][0], serde_json::json!({"B": "Bw=="}));
    assert_eq!(sent_emails().unwrap().iter().filter(|a| **a == to).count(), 1, "the receipt went out");
    let row = clients
        .dynamodb
        .get_item()
        .table_name(&r.outbox_table)
        .key("pk", Av::S(payments::outbox::row_key(&e.event_id)))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert_eq!(row.item().unwrap()["status"].as_s().unwrap(), "SENT");
}
