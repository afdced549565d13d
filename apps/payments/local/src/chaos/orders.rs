//! The chaos scenario's stream path: a hostile producer puts orders on the orders Kinesis stream
//! (producer retries under new sequence numbers, some under another partition key; several
//! orders per key; poison records, which the consumer parks in its park queue; refused
//! confirmation addresses; a shard split while records
//! are in flight), and an orders consumer ([`Orders`]) runs in process through the local AWS
//! tool's Kinesis mapping emulator, its AWS calls through the fault proxy, with crashes
//! after the commit and panics in records, two mappings on the stream at once. The on-failure
//! destination is replayed at the end, as the SQS path redrives its DLQ. What came of it is read
//! back by [`crate::invariants::orders`].

mod function;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::{DynamoDbStore, Table};
use effectively_once_effects::SesSender;
use effectively_once_lambda::Typed;
use serde_json::json;

use super::Crashes;
use local::error::{Result, ResultExt};
use local::esm::{poll_kinesis, replay_kinesis_failures, KinesisMapping, Replayed};
use local::invoke::{InProcess, KinesisFunction};
use local::resources::{create_stream, local_name, Clients};
use local::rng::Rng;

pub use self::function::{Order, Orders};
use crate::panicking::Panicking;
use crate::pipeline::Pipeline;
use crate::resources::RECEIPT_FROM;
use crate::workload::{PANIC_ALWAYS, PANIC_ONCE, REFUSED_PREFIX};

/// What a valid order put on the stream exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OrderKind {
    /// A plain order: stored once, confirmed once.
    Plain,
    /// Its confirmation address is refused by SES: stored, the confirmation recorded `FAILED`.
    RefusedAddress,
    /// The handler panics on its first delivery: the redelivery stores it.
    PanicOnce,
    /// The handler panics on every delivery: never stored, its batch ends in the on-failure
    /// destination (on a partition key of its own, so nothing behind it is held back).
    PanicAlways,
}

impl OrderKind {
    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            OrderKind::Plain => "order",
            OrderKind::RefusedAddress => "order, confirmation address refused by SES",
            OrderKind::PanicOnce => "order, handler panics once",
            OrderKind::PanicAlways => "order, handler panics every time",
        }
    }

    /// Whether the order must be stored (a valid order); else it is poison of a kind.
    pub fn valid(self) -> bool {
        self != OrderKind::PanicAlways
    }
}

/// One distinct order the producer put.
#[derive(Debug, Clone)]
pub struct OrderSent {
    /// The order as the consumer decodes it.
    pub order: Order,
    /// What it exercises.
    pub kind: OrderKind,
    /// The record's data, byte for byte.
    pub data: Vec<u8>,
}

/// A poison record: data that is not an order.
#[derive(Debug, Clone)]
pub struct Poison {
    /// The record's data.
    pub data: Vec<u8>,
    /// What is wrong with it.
    pub label: &'static str,
    /// The order id it names, if any (it must not be stored).
    pub order_id: Option<String>,
}

/// The records to put on the orders stream.
#[derive(Debug, Clone, Default)]
pub struct OrdersPlan {
    /// (partition key, data) in putting order, retries and poison included.
    pub puts: Vec<(String, Vec<u8>)>,
    /// Every distinct order, once.
    pub orders: Vec<OrderSent>,
    /// The poison records.
    pub poison: Vec<Poison>,
    /// Producer retries among `puts`, and of those, under another partition key.
    pub retries: usize,
    /// Retries under another partition key.
    pub rekeyed: usize,
}

/// `per_mille` of `n`, at least one when there are any.
fn share(n: usize, per_mille: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n * per_mille / 1000).max(1)
    }
}

/// The addresses' domain: apart from the payments receipts' `@{run}.example.com`.
pub fn email_domain(run: &str) -> String {
    format!("{run}.orders.example.com")
}

/// Plans `orders` orders and `poison` poison records for run `run`: one in four orders put again
/// by the producer (half under another partition key), a partition key per four orders, 1 %
/// refused confirmation addresses, 0.5 % panicking once, one panicking always; poison of three
/// kinds (not JSON, a field of the wrong type, a field missing) on shared keys.
pub fn plan(orders: usize, poison: usize, seed: u64, run: &str) -> OrdersPlan {
    let mut rng = Rng::new(seed ^ 0x6f72_6465_7273);
    let customers = (orders / 4).max(1);
    let (refused, panic_once, panic_always) = (share(orders, 10), share(orders, 5), usize::from(orders >= 20));
    let domain = email_domain(run);
    let mut plan = OrdersPlan::default();
    for i in 0..orders {
        let kind = match i {
            i if i < refused => OrderKind::RefusedAddress,
            i if i < refused + panic_once => OrderKind::PanicOnce,
            i if i < refused + panic_once + panic_always => OrderKind::PanicAlways,
            _ => OrderKind::Plain,
        };
        let order_id = match kind {
            OrderKind::PanicOnce => format!("ord-{run}-{PANIC_ONCE}-{i}"),
            OrderKind::PanicAlways => format!("ord-{run}-{PANIC_ALWAYS}-{i}"),
            _ => format!("ord-{run}-{i}"),
        };
        let prefix = if kind == OrderKind::RefusedAddress { REFUSED_PREFIX } else { "" };
        let email = format!("{prefix}order-{i}@{domain}");
        let order = Order { order_id, email, total_cents: 100 + rng.below(100_000) as i64 };
        let data = serde_json::to_vec(&order).expect("orders serialise");
        let key = match kind {
            OrderKind::PanicAlways => format!("cust-{run}-alone-{i}"),
            _ => format!("cust-{run}-{}", rng.below(customers)),
        };
        plan.puts.push((key, data.clone()));
        plan.orders.push(OrderSent { order, kind, data });
    }
    shuffle(&mut rng, &mut plan.puts);
    plan.retries(&mut rng, customers, run);
    plan.poison(&mut rng, poison, customers, run);
    plan
}

fn shuffle<T>(rng: &mut Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i + 1));
    }
}

impl OrdersPlan {
    /// One order in four put again after its first put, under a new sequence number; every
    /// other retry under another partition key (a producer that picks keys per attempt).
    fn retries(&mut self, rng: &mut Rng, customers: usize, run: &str) {
        let valid: Vec<usize> = (0..self.orders.len()).filter(|i| self.orders[*i].kind.valid()).collect();
        if valid.is_empty() {
            return;
        }
        for r in 0..self.orders.len() / 4 {
            let data = self.orders[valid[rng.below(valid.len())]].data.clone();
            let first = self.puts.iter().position(|(_, d)| *d == data).unwrap_or(0);
            let key = if r % 2 == 1 {
                self.rekeyed += 1;
                format!("cust-{run}-{}", rng.below(customers))
            } else {
                self.puts[first].0.clone()
            };
            let at = first + 1 + rng.below(self.puts.len() - first);
            self.puts.insert(at, (key, data));
            self.retries += 1;
        }
    }

    /// Poison of four kinds in the first nine tenths, on keys valid orders share.
    fn poison(&mut self, rng: &mut Rng, poison: usize, customers: usize, run: &str) {
        let domain = email_domain(run);
        for k in 0..poison {
            let id = format!("ord-{run}-poison-{k}");
            let (data, label, order_id) = match k % 4 {
                0 => (format!("{{\"order_id\": \"{id}\", \"email\": ").into_bytes(), "data is not JSON", None),
                1 => {
                    let wrong =
                        json!({"order_id": id, "email": format!("poison-{k}@{domain}"), "total_cents": "12.50"});
                    (wrong.to_string().into_bytes(), "JSON that is not an order (total_cents a string)", Some(id))
                }
                // serde's derive would build an `Order` from an array of its fields in order.
                2 => {
                    let array = json!([id, format!("poison-{k}@{domain}"), 100]);
                    (array.to_string().into_bytes(), "JSON that is not an order (an array of its fields)", Some(id))
                }
                _ => {
                    let short = json!({"order_id": id, "email": format!("poison-{k}@{domain}")});
                    (short.to_string().into_bytes(), "JSON that is not an order (no total_cents)", Some(id))
                }
            };
            let at = rng.below(self.puts.len() * 9 / 10 + 1);
            self.puts.insert(at, (format!("cust-{run}-{}", rng.below(customers)), data.clone()));
            self.poison.push(Poison { data, label, order_id });
        }
    }

    /// The records that must not be stored: the poison and the orders that always panic, with
    /// what each is.
    pub fn never_stored(&self) -> Vec<(&[u8], &'static str, Option<&str>)> {
        let panics = self.orders.iter().filter(|o| !o.kind.valid());
        let panics =
            panics.map(|o| (o.data.as_slice(), "handler panics on every delivery", Some(o.order.order_id.as_str())));
        panics.chain(self.poison.iter().map(|p| (p.data.as_slice(), p.label, p.order_id.as_deref()))).collect()
    }
}

/// What crashed the orders function after its effects committed.
pub(super) const CRASH_AFTER_COMMIT: &str = "orders: crash after commit, before the checkpoint";

/// The orders function, which sometimes dies after every effect of its batch committed and
/// before Lambda took its answer: a function error, so the batch is delivered again.
pub struct CrashingOrders<F> {
    inner: F,
    crashes: Arc<Crashes>,
    per_mille: u64,
}

impl<F: KinesisFunction> KinesisFunction for CrashingOrders<F> {
    async fn invoke(&self, event: KinesisEvent) -> Result<KinesisEventResponse> {
        let response = self.inner.invoke(event).await?;
        if self.crashes.roll(self.per_mille) {
            self.crashes.hit(CRASH_AFTER_COMMIT);
            return Err("the function's process died after its effects committed".into());
        }
        Ok(response)
    }
}

type Function = CrashingOrders<InProcess<Panicking<Typed<Orders<SesSender>>>>>;

/// The orders stream's shards: two, so after the split half way four are listed (the closed
/// parent, its two children, the other), and the mappings read a parent before its children
/// beside a shard that was never split.
pub const SHARDS: i32 = 2;

/// The stream path's own resources, created for the run: the payments template deploys no
/// Kinesis function.
#[derive(Debug, Clone, Default)]
pub struct OrdersResources {
    /// The orders stream's name.
    pub stream: String,
    /// The orders table.
    pub table: String,
    /// The mappings' on-failure destination.
    pub failures_url: String,
    /// The consumer's park queue (its `PARK_QUEUE_URL`).
    pub park_url: String,
}

impl OrdersResources {
    /// Creates the stream ([`SHARDS`] shards), the table and the two queues under `prefix`.
    pub async fn up(clients: &Clients, prefix: &str) -> Result<OrdersResources> {
        let stream = local_name(prefix, "OrdersStream");
        create_stream(&clients.kinesis, &stream, SHARDS).await?;
        let table = format!("{stream}-table");
        create_table(&clients.dynamodb, &table).await?;
        let queue = |id: &str| {
            let name = local_name(prefix, id);
            async move {
                let out = clients
                    .sqs
                    .create_queue()
                    .queue_name(&name)
                    .send()
                    .await
                    .context(format!("create queue {name}"))?;
                Ok::<_, local::Error>(out.queue_url().unwrap_or_default().to_owned())
            }
        };
        let (failures_url, park_url) = (queue("OrdersFailureQueue").await?, queue("OrdersParkQueue").await?);
        Ok(OrdersResources { stream, table, failures_url, park_url })
    }

    /// Deletes what [`OrdersResources::up`] created.
    pub async fn down(&self, clients: &Clients) {
        clients.kinesis.delete_stream().stream_name(&self.stream).send().await.ok();
        clients.dynamodb.delete_table().table_name(&self.table).send().await.ok();
        for url in [&self.failures_url, &self.park_url] {
            clients.sqs.delete_queue().queue_url(url).send().await.ok();
        }
    }
}

/// What the stream path did.
#[derive(Debug, Clone, Default)]
pub struct OrdersRun {
    /// What was put.
    pub plan: OrdersPlan,
    /// The stream, its queues and the orders table, created for the run.
    pub resources: OrdersResources,
    /// The orders table (created for the run).
    pub table: String,
    /// Records delivered to the function, both mappings, redeliveries included.
    pub delivered: usize,
    /// Records discarded to the on-failure destination by either mapping.
    pub discarded: usize,
    /// What the replays of the destination did, summed.
    pub replayed: Replayed,
    /// Records on the stream either mapping has not passed, after the run.
    pub unread: usize,
    /// Shards after the split (none when it failed).
    pub shards: usize,
    /// Wall time by phase.
    pub phases: Vec<(&'static str, Duration)>,
}

/// The orders table, created for the run with the consumer's key (`pk`).
async fn create_table(dynamodb: &aws_sdk_dynamodb::Client, name: &str) -> Result<()> {
    let attribute =
        AttributeDefinition::builder().attribute_name("pk").attribute_type(ScalarAttributeType::S).build()?;
    let key = KeySchemaElement::builder().attribute_name("pk").key_type(KeyType::Hash).build()?;
    let create = dynamodb.create_table().table_name(name).billing_mode(BillingMode::PayPerRequest);
    create.attribute_definitions(attribute).key_schema(key).send().await.context(format!("create table {name}"))?;
    Ok(())
}

/// The consumer behind the fault proxy (`sdk`), crashing `per_mille` after its commits, its
/// poison parked in the orders park queue (through the proxy too).
fn function(
    pipeline: &Pipeline,
    sdk: &aws_config::SdkConfig,
    resources: &OrdersResources,
    crashes: &Arc<Crashes>,
    per_mille: u64,
) -> Function {
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(sdk), &pipeline.resources.idempotency_table);
    let orders = Orders {
        idempotency: Idempotency::new(store, Config::default()),
        orders: Table::new(&resources.table, "pk"),
        sender: SesSender::new(aws_sdk_sesv2::Client::new(sdk), RECEIPT_FROM),
    };
    let park = &resources.park_url;
    let inner =
        InProcess::new(Panicking::new(Typed(orders)), "orders-consumer").park_in(&aws_sdk_sqs::Client::new(sdk), park);
    CrashingOrders { inner, crashes: crashes.clone(), per_mille }
}

/// Puts `puts` with `PutRecords`; each put gets its own sequence number.
async fn put(kinesis: &aws_sdk_kinesis::Client, stream: &str, puts: &[(String, Vec<u8>)]) -> Result<()> {
    let entries = puts
        .iter()
        .map(|(key, data)| PutRecordsRequestEntry::builder().partition_key(key).data(Blob::new(data.clone())).build())
        .collect::<Result<Vec<_>, _>>()?;
    let out =
        kinesis.put_records().stream_name(stream).set_records(Some(entries)).send().await.context("put records")?;
    if out.failed_record_count().unwrap_or(0) > 0 {
        return Err(format!("put records: {} refused", out.failed_record_count().unwrap_or(0)).into());
    }
    Ok(())
}

/// Splits the stream's first shard at the middle of its hash key range, while records are in
/// flight: its children take the records put after, and the mappings read the parent to its
/// end first. Returns the shards listed after.
async fn split(kinesis: &aws_sdk_kinesis::Client, stream: &str) -> Result<usize> {
    let shards = kinesis.list_shards().stream_name(stream).send().await.context("list shards")?;
    let shard = shards.shards().first().ok_or("stream without shards")?;
    let range = shard.hash_key_range().ok_or("shard without a hash key range")?;
    let (low, high): (u128, u128) = (range.starting_hash_key().parse()?, range.ending_hash_key().parse()?);
    let request = kinesis.split_shard().stream_name(stream).shard_to_split(shard.shard_id());
    request.new_starting_hash_key((low + (high - low) / 2).to_string()).send().await.context("split shard")?;
    let after = kinesis.list_shards().stream_name(stream).send().await.context("list shards")?;
    Ok(after.shards().len())
}

impl OrdersRun {
    /// A run of `plan` on `resources`, nothing done yet.
    pub fn new(plan: OrdersPlan, resources: OrdersResources) -> Self {
        let table = resources.table.clone();
        OrdersRun { plan, resources, table, ..OrdersRun::default() }
    }
}

/// The stream path of a chaos run, `run` on its own resources.
pub(super) async fn run(
    pipeline: &Pipeline,
    sdk: &aws_config::SdkConfig,
    crashes: &Arc<Crashes>,
    mut run: OrdersRun,
    crash_per_mille: u64,
) -> Result<OrdersRun> {
    let function = function(pipeline, sdk, &run.resources, crashes, crash_per_mille);
    drive(pipeline, &function, &mut run).await?;
    Ok(run)
}

/// Produces and consumes until drained, replays the destination, drains again, and reads how
/// much either mapping left unread.
async fn drive(pipeline: &Pipeline, function: &Function, run: &mut OrdersRun) -> Result<()> {
    let clients = &pipeline.clients;
    let stream = run.resources.stream.clone();
    let failures = Some(run.resources.failures_url.clone());
    let mut mappings = [KinesisMapping::new(&stream, failures.clone()), KinesisMapping::new(&stream, failures)];
    let started = Instant::now();
    let mut next = 0;
    let per_round = 25;
    let mut idle = 0;
    while idle < 2 {
        if next < run.plan.puts.len() {
            let end = (next + per_round).min(run.plan.puts.len());
            put(&clients.kinesis, &stream, &run.plan.puts[next..end]).await?;
            if next < run.plan.puts.len() / 2 && end >= run.plan.puts.len() / 2 {
                run.shards = split(&clients.kinesis, &stream).await?;
            }
            next = end;
        }
        let delivered = poll_both(pipeline, &mut mappings, function, run).await?;
        let busy = delivered > 0 || next < run.plan.puts.len();
        idle = if busy { 0 } else { idle + 1 };
        if !busy {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    run.phases.push(("orders: producer and two mappings until drained", started.elapsed()));
    let started = Instant::now();
    replay(pipeline, &mappings[0], function, run).await?;
    while poll_both(pipeline, &mut mappings, function, run).await? > 0 {}
    run.unread = mappings[0].unread(clients).await? + mappings[1].unread(clients).await?;
    run.phases.push(("orders: on-failure destination replayed, drained again", started.elapsed()));
    Ok(())
}

/// One poll of each mapping, at once; records delivered.
async fn poll_both(
    pipeline: &Pipeline,
    mappings: &mut [KinesisMapping; 2],
    function: &Function,
    run: &mut OrdersRun,
) -> Result<usize> {
    let [a, b] = mappings;
    let clients = &pipeline.clients;
    let (a, b) =
        futures_util::future::join(poll_kinesis(clients, a, function), poll_kinesis(clients, b, function)).await;
    let (a, b) = (a?, b?);
    run.delivered += a.delivered + b.delivered;
    run.discarded += a.given_up + b.given_up;
    Ok(a.delivered + b.delivered)
}

/// Replays the destination until a pass clears nothing more; a record whose lease held it the
/// first time is taken over on a later pass.
async fn replay(pipeline: &Pipeline, mapping: &KinesisMapping, function: &Function, run: &mut OrdersRun) -> Result<()> {
    for pass in 0..4 {
        let r = replay_kinesis_failures(&pipeline.clients, mapping, function).await?;
        run.replayed.batches += r.batches;
        run.replayed.records += r.records;
        run.replayed.kept = r.kept;
        if r.kept == 0 || (pass > 0 && r.batches == 0) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn an_orders_plan_has_every_hostile_kind() {
        let p = plan(200, 6, 7, "t");
        assert_eq!(p.orders.len(), 200);
        assert_eq!(p.puts.len(), 200 + 50 + 6);
        assert_eq!((p.retries, p.rekeyed), (50, 25));
        for kind in [OrderKind::Plain, OrderKind::RefusedAddress, OrderKind::PanicOnce, OrderKind::PanicAlways] {
            assert!(p.orders.iter().any(|o| o.kind == kind), "{kind:?}");
        }
        for poison in &p.poison {
            assert!(serde_json::from_slice::<Order>(&poison.data).is_err(), "{}", poison.label);
        }
        // The order that always panics is alone on its key: nothing queues behind it.
        let alone = p.orders.iter().find(|o| o.kind == OrderKind::PanicAlways).unwrap();
        let key = &p.puts.iter().find(|(_, d)| *d == alone.data).unwrap().0;
        assert_eq!(p.puts.iter().filter(|(k, _)| k == key).count(), 1);
        // Several orders per key.
        let keys: HashSet<&String> = p.puts.iter().map(|(k, _)| k).collect();
        assert!(keys.len() < p.orders.len() / 2);
    }
}
