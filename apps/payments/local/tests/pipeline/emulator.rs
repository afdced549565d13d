//! The event source mapping emulator against the local AWS: redelivery, the DLQ, the stream
//! checkpoint and the redrive, observed in the queues, the ledger and the local SES; and the
//! stream drivers' park destination replayed after a fix, each trigger's parked record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::kafka::KafkaRecord;
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::sqs::SqsMessage;
use aws_lambda_events::event::streams::KinesisEventResponse;
use base64::Engine as _;
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::{Handled, RecordError, RecordResult};
use local::esm::{self, Emulator, SqsMapping, StreamMapping};
use local::invoke::{InProcess, KinesisFunction, SqsFunction, StreamFunction};
use payments::{Ledger, PaymentEvent};
use payments_local::invariants::sent_emails;
use payments_local::resources::{self, Clients, Resources};
use payments_local::{workload, Pipeline};

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
    let stream = StreamMapping::with(&r.outbox_table, &resources::mapping("OutboxTable"), None);
    Emulator::new(fast(&r.queue_url), stream, payments, relay).dead_letter(&r.dlq_url, r.max_receive_count)
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
    let mut stream = StreamMapping::with(&r.outbox_table, &resources::mapping("OutboxTable"), None);
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
    let mut stream = StreamMapping::with(&r.outbox_table, &resources::mapping("OutboxTable"), None);
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

/// A stream function for every trigger that refuses each record whose data holds `value` while
/// `broken` is set, and applies the others: the data it applied is its effect. It refuses
/// retryably, so the driver's answer names the record; a permanent refusal is not named (the
/// driver passes it, or parks it anew), and a replay deletes the old message for it.
struct Refusing {
    value: String,
    broken: AtomicBool,
    handed: AtomicUsize,
    applied: Mutex<Vec<String>>,
}

impl Refusing {
    fn new(value: &str) -> Self {
        Refusing {
            value: value.into(),
            broken: AtomicBool::new(true),
            handed: AtomicUsize::new(0),
            applied: Mutex::default(),
        }
    }

    fn take(&self, data: String) -> RecordResult {
        self.handed.fetch_add(1, Ordering::SeqCst);
        if data.contains(&self.value) && self.broken.load(Ordering::SeqCst) {
            return Err(RecordError::retryable(format!("the downstream refuses {}", self.value)));
        }
        self.applied.lock().unwrap().push(data);
        Ok(Handled::Applied)
    }

    fn applied(&self) -> Vec<String> {
        let mut applied = self.applied.lock().unwrap().clone();
        applied.sort();
        applied
    }
}

type Context = effectively_once_lambda::events::Context;

impl effectively_once_lambda::Handler<KafkaRecord> for Refusing {
    async fn handle(&self, record: &KafkaRecord, _: &Context) -> RecordResult {
        let value = effectively_once_lambda::kafka::value_bytes(record).unwrap_or_default();
        self.take(String::from_utf8(value).unwrap())
    }
}

impl effectively_once_lambda::Handler<KinesisEventRecord> for Refusing {
    async fn handle(&self, record: &KinesisEventRecord, _: &Context) -> RecordResult {
        self.take(String::from_utf8(record.kinesis.data.to_vec()).unwrap())
    }
}

impl effectively_once_lambda::Handler<EventRecord> for Refusing {
    async fn handle(&self, record: &EventRecord, _: &Context) -> RecordResult {
        let image = serde_json::to_value(&record.change.new_image).unwrap();
        self.take(image["data"]["S"].as_str().unwrap_or_default().to_owned())
    }
}

fn base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

const KINESIS_SEQUENCE: &str = "49590338271490256608559692538361571095921575989136588898";

/// One hand-made parked message per trigger, as the drivers' park destination writes them.
fn parked_messages(value: &str) -> [serde_json::Value; 3] {
    use serde_json::json;
    let kafka = json!({"topic": "orders", "partition": 0, "offset": 42, "timestamp": "1700000000000",
        "timestampType": "CREATE_TIME", "key": base64("k"), "value": base64(&format!("{value} via kafka")), "headers": []});
    let kinesis = json!({"eventSource": "aws:kinesis", "eventVersion": "1.0", "eventName": "aws:kinesis:record",
        "eventID": format!("shardId-000000000000:{KINESIS_SEQUENCE}"), "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:kinesis:us-east-1:000000000000:stream/orders",
        "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": "k", "sequenceNumber": KINESIS_SEQUENCE,
            "data": base64(&format!("{value} via kinesis")), "approximateArrivalTimestamp": 1_700_000_000.5}});
    let dynamodb = json!({"eventID": "e1", "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1", "eventSourceARN": "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/s",
        "dynamodb": {"ApproximateCreationDateTime": 1_700_000_000, "Keys": {"pk": {"S": "a"}},
            "NewImage": {"pk": {"S": "a"}, "data": {"S": format!("{value} via dynamodb")}},
            "SequenceNumber": "111100000000000000001", "SizeBytes": 40, "StreamViewType": "NEW_IMAGE"}});
    [
        json!({"trigger": "aws:kafka", "event_source_arn": "arn:aws:kafka:us-east-1:000000000000:cluster/c/1",
            "coordinates": {"topic_partition": "orders-0", "offset": 42}, "reason": "refused",
            "record": kafka, "bootstrap_servers": "127.0.0.1:9092"}),
        json!({"trigger": "aws:kinesis", "event_source_arn": "arn:aws:kinesis:us-east-1:000000000000:stream/orders",
            "coordinates": {"shard_id": "shardId-000000000000", "sequence_number": KINESIS_SEQUENCE},
            "reason": "refused", "record": kinesis, "bootstrap_servers": null}),
        json!({"trigger": "aws:dynamodb", "event_source_arn": "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/s",
            "coordinates": {"sequence_number": "111100000000000000001"}, "reason": "refused",
            "record": dynamodb, "bootstrap_servers": null}),
    ]
}

/// A queue of the test's own holding `bodies`.
async fn park_queue(clients: &Clients, bodies: &[serde_json::Value]) -> String {
    let queue = clients.sqs.create_queue().queue_name(unique_name("park")).send().await.expect("create queue");
    let url = queue.queue_url().unwrap().to_owned();
    let bodies: Vec<String> = bodies.iter().map(|b| b.to_string()).collect();
    workload::send(&clients.sqs, &url, &bodies).await.unwrap();
    url
}

#[tokio::test]
async fn parked_records_of_each_trigger_are_kept_until_the_fix_then_applied_once_and_deleted() {
    let clients = Clients::local().await;
    let queue = park_queue(&clients, &parked_messages("order-7")).await;
    let function = InProcess::new(Refusing::new("order-7"), "parked");
    let targets = esm::Targets::all(&function);

    // The cause persists: each record is handed over, refused, and its message kept with why.
    let kept = esm::replay_parked(&clients, &queue, &targets).await.unwrap();
    assert_eq!((kept.batches, kept.kept), (0, 3), "{kept:?}");
    assert_eq!(function.handler().handed.load(Ordering::SeqCst), 3);
    assert!(function.handler().applied().is_empty());
    let mut why: Vec<&str> = kept.kept_messages.iter().map(|k| k.why.as_str()).collect();
    why.sort();
    assert_eq!(
        why,
        [
            "aws:dynamodb 111100000000000000001: the answer names it failed (parked for: refused)",
            "aws:kafka orders-0 offset 42: the answer names it failed (parked for: refused)",
            &format!(
                "aws:kinesis shardId-000000000000:{KINESIS_SEQUENCE}: the answer names it failed (parked for: refused)"
            ),
        ]
    );
    assert_eq!(esm::peek_bodies(&clients, &queue).await.unwrap().len(), 3, "kept, and visible again");

    // Fixed: each record applied once, each message deleted, the queue empty.
    function.handler().broken.store(false, Ordering::SeqCst);
    let replayed = esm::replay_parked(&clients, &queue, &targets).await.unwrap();
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (3, 3, 0), "{replayed:?}");
    assert_eq!(function.handler().applied(), ["order-7 via dynamodb", "order-7 via kafka", "order-7 via kinesis"]);
    assert_eq!(esm::queue_depth(&clients, &queue).await.unwrap(), 0);
    let again = esm::replay_parked(&clients, &queue, &targets).await.unwrap();
    assert_eq!((again.batches, function.handler().handed.load(Ordering::SeqCst)), (0, 6), "nothing left to hand over");
}

/// A Kinesis function that, as a driver with a park destination does for a record that fails
/// permanently again, parks the record anew on `queue` and answers success.
struct Reparking<'a> {
    clients: &'a Clients,
    queue: String,
    body: serde_json::Value,
    handed: AtomicUsize,
}

impl KinesisFunction for Reparking<'_> {
    async fn invoke(&self, _event: KinesisEvent) -> local::Result<KinesisEventResponse> {
        self.handed.fetch_add(1, Ordering::SeqCst);
        workload::send(&self.clients.sqs, &self.queue, &[self.body.to_string()]).await?;
        Ok(KinesisEventResponse::default())
    }
}

#[tokio::test]
async fn a_record_the_function_parks_anew_is_replayed_once_and_stays_parked() {
    let clients = Clients::local().await;
    let [_, kinesis, _] = parked_messages("order-8");
    let queue = park_queue(&clients, std::slice::from_ref(&kinesis)).await;
    let function =
        Reparking { clients: &clients, queue: queue.clone(), body: kinesis.clone(), handed: AtomicUsize::new(0) };
    let none = None::<local::invoke::Http>;
    let targets = esm::Targets { kafka: none.clone(), kinesis: Some(&function), dynamodb: none };
    let replayed = esm::replay_parked(&clients, &queue, &targets).await.unwrap();
    assert_eq!((replayed.batches, replayed.kept, function.handed.load(Ordering::SeqCst)), (1, 1, 1), "{replayed:?}");
    assert!(replayed.kept_messages[0].why.contains("parked again during this replay"), "{replayed:?}");
    assert_eq!(esm::peek_bodies(&clients, &queue).await.unwrap(), vec![kinesis.to_string()], "the new one stays");
}
