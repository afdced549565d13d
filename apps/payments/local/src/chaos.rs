//! The chaos scenario: a hostile workload ([`crate::workload`]: racing debits, overdrafts,
//! currency mismatches, reused event ids, panicking records, bodies at the SQS limit, refused
//! receipt addresses) through the local pipeline with faults injected at every layer (lost
//! responses, throttling and 500s from the fault proxy; invocations that die after the ledger
//! commit and before the ack, or mid-batch; a relay that dies after SES accepted and before its
//! marker completed), two consumers at once, and a redrive of the DLQ at the end; then the
//! invariants, read back from the tables ([`crate::invariants`]), with counts. Alongside, the
//! stream path ([`orders`]): orders on a Kinesis stream through an orders consumer of its own,
//! and the Kafka path ([`kafka`]): payments on a Kafka topic through the Kafka payments
//! consumer, each under the same faults, with its own invariants.

pub mod kafka;
pub mod orders;
mod report;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use effectively_once_effects::{EmailMessage, EmailSender, Policy, SesSender};
use payments_consumer::Payments;
use receipts_relay::Receipts;

use crate::invariants::kafka::KafkaReadBack;
use crate::invariants::orders::OrdersReadBack;
use crate::invariants::{self, Audit, Tally};
use crate::panicking::Panicking;
use crate::pipeline::Pipeline;
use crate::resources::{Clients, RECEIPT_FROM};
use crate::workload::{self, Workload, REFUSED_PREFIX};
use local::error::Result;
use local::esm::kafka::Reading;
use local::esm::{Emulator, Feed};
use local::invoke::{InProcess, Ordered, SqsFunction, StreamFunction};
use local::progress::Tracker;
use local::proxy::{Fault, Proxy, RandomFaults, RefuseRecipients};
use local::rng::SharedRng;
pub use report::{KafkaReport, OrdersReport, Report};

/// Scenario settings: `local chaos`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Unique valid events
    #[arg(long, default_value_t = 2000)]
    pub events: usize,
    /// Duplicate share of deliveries, percent
    #[arg(long = "duplicates", value_name = "PERCENT", default_value_t = 30)]
    pub duplicate_pct: u32,
    /// Poison messages
    #[arg(long, default_value_t = 10)]
    pub poison: usize,
    /// Concurrent consumers
    #[arg(long, default_value_t = 2)]
    pub pollers: usize,
    /// Per mille of invocations that crash (each crash point separately)
    #[arg(long = "crash", value_name = "PER_MILLE", default_value_t = 40)]
    pub crash_per_mille: u64,
    /// Seed of faults and workload
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Orders on the Kinesis orders stream, beside the payments (default: half of --events;
    /// 0 leaves the stream path out)
    #[arg(long)]
    pub orders: Option<usize>,
    /// Payments on the Kafka path's topic (default: a quarter of --events; 0 leaves the Kafka
    /// path out)
    #[arg(long)]
    pub kafka: Option<usize>,
    /// How the Kafka path's mapping reads the records an answer names: retry exactly those
    /// (per-record), or resume each named partition at the lowest (resume)
    #[arg(long, value_enum, value_name = "READING", default_value_t = Reading::PerRecord)]
    pub kafka_reading: Reading,
}

impl Default for Options {
    /// The flags' defaults.
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            options: Options,
        }
        <Defaults as clap::Parser>::parse_from(["chaos"]).options
    }
}

impl Options {
    /// Orders the stream path puts.
    pub fn orders(&self) -> usize {
        self.orders.unwrap_or(self.events / 2)
    }

    /// Payments the Kafka path writes.
    pub fn kafka(&self) -> usize {
        self.kafka.unwrap_or(self.events / 4)
    }

    /// The workload these settings send, under a fresh run id.
    fn workload(&self) -> Workload {
        let mut w = Workload::new(self.events);
        w.duplicate_pct = self.duplicate_pct;
        w.poison = self.poison;
        w.seed = self.seed;
        w
    }
}

/// Crash points hit, by name, and the generator that decides them.
#[derive(Debug)]
struct Crashes {
    counts: std::sync::Mutex<BTreeMap<&'static str, u64>>,
    rng: SharedRng,
}

impl Crashes {
    fn new(seed: u64) -> Crashes {
        Crashes { counts: Default::default(), rng: SharedRng::new(seed | 1) }
    }

    fn roll(&self, per_mille: u64) -> bool {
        self.rng.chance(per_mille)
    }

    fn hit(&self, point: &'static str) {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner()).entry(point).or_default() += 1;
    }

    fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The payments function with crash points around it.
struct CrashingPayments<F> {
    inner: F,
    crashes: Arc<Crashes>,
    per_mille: u64,
}

fn all_failed(event: &SqsEvent) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for m in &event.records {
        let mut f = BatchItemFailure::default();
        f.item_identifier = m.message_id.clone().unwrap_or_default();
        response.batch_item_failures.push(f);
    }
    response
}

impl<F: SqsFunction> SqsFunction for CrashingPayments<F> {
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse> {
        if self.crashes.roll(self.per_mille) {
            // Dies mid-batch: the invocation's future is dropped wherever it is; some records
            // committed, none acknowledged.
            self.crashes.hit("invocation dies mid-batch (future dropped)");
            let cut = Duration::from_millis(self.crashes.rng.with(|rng| rng.below(40)) as u64);
            let _ = tokio::time::timeout(cut, self.inner.invoke(event.clone())).await;
            return Ok(all_failed(&event));
        }
        let response = self.inner.invoke(event.clone()).await?;
        if self.crashes.roll(self.per_mille) {
            // Every effect committed, then the process died before Lambda deleted anything.
            self.crashes.hit("crash after ledger commit, before ack");
            return Ok(all_failed(&event));
        }
        Ok(response)
    }
}

/// The relay function, bounded by a deadline: an invocation that hangs is dropped there.
struct TimedRelay<F> {
    inner: F,
    crashes: Arc<Crashes>,
}

impl<F: StreamFunction> StreamFunction for TimedRelay<F> {
    async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse> {
        match tokio::time::timeout(Duration::from_secs(3), self.inner.invoke(event.clone())).await {
            Ok(response) => response,
            Err(_) => {
                self.crashes.hit(RELAY_TIMED_OUT);
                let mut response = DynamoDbEventResponse::default();
                let mut f = DynamoDbBatchItemFailure::default();
                f.item_identifier = event.records.first().and_then(|r| r.change.sequence_number.clone());
                response.batch_item_failures.push(f);
                Ok(response)
            }
        }
    }
}

/// SES that sometimes accepts the message and then the attempt dies before the marker completes.
struct AcceptThenDie {
    inner: SesSender,
    crashes: Arc<Crashes>,
    per_mille: u64,
}

impl EmailSender for AcceptThenDie {
    async fn send(&self, message: &EmailMessage) -> Result<String, effectively_once_effects::email::SendError> {
        let id = self.inner.send(message).await?;
        if self.crashes.roll(self.per_mille) {
            self.crashes.hit("crash after SES accepted, before the marker completed");
            std::future::pending::<()>().await;
        }
        Ok(id)
    }
}

/// The relay's invocations dropped at their deadline, as [`TimedRelay`] counts them.
const RELAY_TIMED_OUT: &str = "relay invocation timed out (dropped)";

/// How many receipts the faults counted in `faults` (by `fault operation`, as the proxy and the
/// crash points count them) can leave `AMBIGUOUS` under at most once; each of these does so to
/// one receipt at most:
///
/// - a lost answer or a 500 from `ses:SendEmail`: the message may have gone out, so it is flagged;
/// - a relay invocation dropped at its deadline: the marker it held is taken over after its lease
///   and flagged. Every crash after SES accepted ends so (the attempt hangs until the deadline),
///   so those crashes are counted here, once;
/// - a completion or release of a marker (`UpdateItem`, `DeleteItem`) lost, throttled or
///   failed past the retries: the marker stays held and is taken over after its lease.
///
/// A lost answer to a marker's claim (`PutItem`) explains none on its own: the SDK's retry
/// meets the claim's own record, which names what the first write replaced.
///
/// An upper bound: the same faults hit the outbox rows' updates and the rejection records too,
/// and most are absorbed by a retry. Delays, throttled or refused sends (definite: the marker
/// is released or records the refusal) and throttled claims (nothing written) explain none.
pub fn ambiguous_receipts_explained(faults: &BTreeMap<String, u64>) -> usize {
    let explains = |key: &str| match key.rsplit_once(' ') {
        Some(("lost response" | "500", "ses:SendEmail")) => true,
        Some(("lost response" | "throttled" | "500", "dynamodb:UpdateItem" | "dynamodb:DeleteItem")) => true,
        _ => key == RELAY_TIMED_OUT,
    };
    faults.iter().filter(|(key, _)| explains(key)).map(|(_, n)| *n as usize).sum()
}

/// The proxy's faults, from `seed`; receipt addresses the provider refuses get SES's
/// `MessageRejected`.
fn fault_rules(seed: u64) -> RefuseRecipients<RandomFaults> {
    let transactions = [
        (Fault::DropResponse, 30),
        (Fault::Throttle, 20),
        (Fault::ServerError, 10),
        (Fault::Delay(Duration::from_millis(30)), 20),
    ];
    let faults = RandomFaults::new(seed)
        .on("dynamodb:TransactWriteItems", &transactions)
        .on("dynamodb:PutItem", &[(Fault::DropResponse, 20), (Fault::Throttle, 20)])
        .on("dynamodb:UpdateItem", &[(Fault::DropResponse, 20), (Fault::Throttle, 20)])
        .on("dynamodb:DeleteItem", &[(Fault::DropResponse, 20)])
        .on("ses:SendEmail", &[(Fault::Throttle, 30), (Fault::DropResponse, 10), (Fault::ServerError, 10)])
        // The stream functions' parks: a lost answer parks a record twice (the SDK's retry), a
        // park that fails past the retries holds the record until a later delivery parks it.
        .on("amazonsqs:SendMessageBatch", &[(Fault::DropResponse, 30), (Fault::ServerError, 30)]);
    RefuseRecipients::new(REFUSED_PREFIX, faults)
}

type Faulty = Emulator<CrashingPayments<Ordered<Panicking<Payments>>>, TimedRelay<InProcess<Receipts<AcceptThenDie>>>>;

/// The emulator with the payments consumer and the receipts relay behind the fault proxy (SDK configuration `sdk`) and the
/// crash points: the payments function crashes `crash_per_mille`, SES half as often.
fn faulty_emulator(
    pipeline: &Pipeline,
    sdk: &aws_config::SdkConfig,
    crashes: &Arc<Crashes>,
    options: &Options,
) -> Faulty {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let ledger = pipeline.ledger(&dynamodb);
    let payments = CrashingPayments {
        inner: Ordered::new(Panicking::new(Payments::new(ledger)), payments_consumer::FUNCTION),
        crashes: crashes.clone(),
        per_mille: options.crash_per_mille,
    };
    // Short marker leases, so dead attempts are taken over within the run.
    let markers = pipeline.markers(&dynamodb, Duration::from_secs(2));
    let sender = AcceptThenDie {
        inner: SesSender::new(aws_sdk_sesv2::Client::new(sdk), RECEIPT_FROM),
        crashes: crashes.clone(),
        per_mille: options.crash_per_mille / 2,
    };
    let receipts = Receipts::new(markers, sender, &pipeline.resources.outbox_table, Policy::AtMostOnce);
    let relay = InProcess::new(receipts, receipts_relay::FUNCTION)
        .park_in(&aws_sdk_sqs::Client::new(sdk), &pipeline.resources.receipts_park_url);
    let relay = TimedRelay { inner: relay, crashes: crashes.clone() };
    let mut esm = pipeline.emulator(payments, relay).pollers(options.pollers);
    esm.stream.max_retries = 1000; // the at-most-once takeover needs the lease to end, not a give-up
    esm
}

/// Runs the scenario on fresh resources, deleted at the end.
pub async fn run(clients: &Clients, options: &Options) -> Result<Report> {
    let started = Instant::now();
    let workload = options.workload();
    let prefix = format!("chaos-{}", workload.run);
    let pipeline = Pipeline::up(clients.clone(), &prefix).await?;
    let orders = match options.orders() {
        0 => None,
        _ => Some(orders::OrdersResources::up(clients, &prefix).await?),
    };
    let report = scenario(&pipeline, options, &workload, orders.clone())
        .await
        .map(|report| Report { elapsed: started.elapsed(), ..report });
    if let Some(orders) = orders {
        orders.down(clients).await;
    }
    let queue = pipeline.clients.sqs.get_queue_url().queue_name(kafka::failure_queue(&workload.run)).send().await;
    if let Some(url) = queue.ok().and_then(|q| q.queue_url().map(str::to_owned)) {
        pipeline.clients.sqs.delete_queue().queue_url(url).send().await.ok();
    }
    pipeline.down().await.ok();
    report
}

async fn scenario(
    pipeline: &Pipeline,
    options: &Options,
    workload: &Workload,
    orders: Option<orders::OrdersResources>,
) -> Result<Report> {
    let proxy = Proxy::to_local_aws(Arc::new(fault_rules(options.seed))).await?;
    // The SDK's own retries, with a 50 ms first backoff instead of 1 s: every injected fault is
    // retried as in production, but a batch no longer waits a second for each, so the scenario's
    // time goes to work, not to sleep.
    let retries = aws_config::retry::RetryConfig::standard().with_initial_backoff(Duration::from_millis(50));
    let sdk = proxy.sdk_config(retries).await;
    let crashes = Arc::new(Crashes::new(options.seed));
    let plan = workload::plan(workload);
    let mut tracker = Tracker::new(plan.deliveries.len());
    // The stream path runs beside the payments, through the same proxy and crash points.
    let stream = async {
        let Some(resources) = orders else { return Ok(None) };
        let plan = orders::plan(options.orders(), options.poison, options.seed, &workload.run);
        let run = orders::OrdersRun::new(plan, resources);
        orders::run(pipeline, &sdk, &crashes, run, options.crash_per_mille).await.map(Some)
    };
    // And the Kafka path, through the same proxy and crash points (boxed: the scenario's future
    // is deep enough already).
    let kafka = Box::pin(async {
        if options.kafka() == 0 {
            return Ok(None);
        }
        kafka::run(pipeline, &sdk, &crashes, options, &workload.run).await.map(Some)
    });
    let payments = payments_path(pipeline, faulty_emulator(pipeline, &sdk, &crashes, options), &plan, &mut tracker);
    let (redriven, stream, kafka) = futures_util::future::join3(payments, stream, kafka).await;
    let (redriven, stream, kafka) = (redriven?, stream?, kafka?);
    let mut faults = proxy.injected();
    faults.extend(crashes.counts().into_iter().map(|(k, v)| (k.to_owned(), v)));
    faults.insert("DLQ redrive (messages moved back)".into(), redriven as u64);
    // The invariants, read from the tables, the DLQ and the local SES, not from the plan; no more
    // AMBIGUOUS receipts and confirmations than the faults counted above can explain.
    let explained = ambiguous_receipts_explained(&faults);
    let mut audit = invariants::audit(pipeline, &plan, &workload.run, explained).await?;
    let mut report_orders = None;
    if let Some(run) = &stream {
        let read = OrdersReadBack::read(pipeline, run, &workload.run).await?;
        let left = explained.saturating_sub(audit.rows.get("AMBIGUOUS").copied().unwrap_or(0));
        let (mut outcomes, mut tally) = (BTreeMap::new(), Tally::new("Kinesis: orders"));
        audit.checks.extend(invariants::orders::judge(run, &read, left, &mut outcomes, &mut tally));
        audit.tallies.push(tally);
        report_orders = Some(OrdersReport::of(run, &read, outcomes));
    }
    let report_kafka = match &kafka {
        Some(run) => Some(audit_kafka(pipeline, run, &mut audit).await?),
        None => None,
    };
    tracker.lap("audit (tables, DLQ, SES, orders, Kafka, destinations read back)");
    let total = tracker.total();
    let mut phases = tracker.into_phases();
    phases.extend(stream.iter().flat_map(|run| run.phases.iter().copied()));
    phases.extend(kafka.iter().flat_map(|run| run.phases.iter().copied()));
    Ok(Report {
        faults,
        events: plan.event_ids().len(),
        sent: plan.deliveries.len(),
        deliveries: total.deliveries,
        stream_records: total.stream_records,
        audit,
        elapsed: Duration::ZERO,
        phases,
        orders: report_orders,
        kafka: report_kafka,
    })
}

/// The Kafka path's invariants, into `audit`, and its report.
async fn audit_kafka(pipeline: &Pipeline, run: &kafka::KafkaRun, audit: &mut Audit) -> Result<KafkaReport> {
    let read = KafkaReadBack::read(pipeline, run).await?;
    let (mut outcomes, mut tally) = (BTreeMap::new(), Tally::new("Kafka: payments"));
    audit.checks.extend(invariants::kafka::judge(run, &read, &mut outcomes, &mut tally));
    audit.tallies.push(tally);
    Ok(KafkaReport::of(run, &read, outcomes))
}

/// The payments workload through the faulty pipeline: fed, drained, the DLQ redriven and
/// drained again, the relay's leases waited out. Returns how many messages the redrive moved.
async fn payments_path(
    pipeline: &Pipeline,
    mut esm: Faulty,
    plan: &workload::Plan,
    tracker: &mut Tracker,
) -> Result<usize> {
    // The producer sends as the consumers run, a little faster than they drain.
    let mut feed = Feed::new(plan.deliveries.clone(), 12 * esm.pollers);
    let redriven = esm.run_and_redrive(&pipeline.clients, &mut feed, tracker).await?;
    // Relay records still held by a dead attempt's lease: let it end and drain again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let third = esm.run_until_drained(&pipeline.clients, |p| tracker.show(p)).await?;
    tracker.phase_done("lease wait, last drain", third);
    tracker.finish();
    Ok(redriven)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ambiguous_receipts_are_explained_by_the_faults_on_the_receipts_path_only() {
        // The 20,000-event run's counts (docs/chaos.md).
        let faults: BTreeMap<String, u64> = [
            ("500 dynamodb:TransactWriteItems", 350),
            ("500 ses:SendEmail", 38),
            ("DLQ redrive (messages moved back)", 240),
            ("crash after SES accepted, before the marker completed", 97),
            ("crash after ledger commit, before ack", 138),
            ("delay dynamodb:TransactWriteItems", 745),
            ("invocation dies mid-batch (future dropped)", 138),
            ("lost response dynamodb:DeleteItem", 5),
            ("lost response dynamodb:PutItem", 125),
            ("lost response dynamodb:TransactWriteItems", 1081),
            ("lost response dynamodb:UpdateItem", 177),
            ("lost response ses:SendEmail", 48),
            ("refused ses:SendEmail", 96),
            (RELAY_TIMED_OUT, 97),
            ("throttled dynamodb:PutItem", 117),
            ("throttled dynamodb:TransactWriteItems", 728),
            ("throttled dynamodb:UpdateItem", 194),
            ("throttled ses:SendEmail", 126),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        // SES 500s and lost answers, dropped relays (each crash after SES accepted is one of
        // them, counted once), and marker claims, completions or releases that failed.
        assert_eq!(ambiguous_receipts_explained(&faults), 38 + 48 + 97 + 5 + 177 + 194);
        assert_eq!(ambiguous_receipts_explained(&BTreeMap::new()), 0, "no faults, nothing ambiguous");
    }
}
