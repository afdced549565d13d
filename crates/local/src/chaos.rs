//! The chaos scenario: a hostile workload ([`crate::workload`]: racing debits, overdrafts,
//! currency mismatches, reused event ids, panicking records, bodies at the SQS limit, refused
//! receipt addresses) through the local pipeline with faults injected at every layer (lost
//! responses, throttling and 500s from the fault proxy; invocations that die after the ledger
//! commit and before the ack, or mid-batch; a relay that dies after SES accepted and before its
//! marker completed), two consumers at once, and a redrive of the DLQ at the end; then the
//! invariants, read back from the tables ([`crate::audit`]), with counts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_dynamodb::config::{Credentials, Region};
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{EmailMessage, EmailSender, Ledger, Policy, SesSender};
use payments_consumer::Payments;
use receipts_relay::Receipts;

use crate::audit::Audit;
use crate::esm::{self, SqsMapping, StreamMapping};
use crate::invoke::{InProcess, Panicking, SqsFunction, StreamFunction};
use crate::proxy::{Fault, Proxy, RandomFaults, RefuseRecipients};
use crate::resources::{self, Clients, RECEIPT_FROM};
use crate::workload::{self, Workload, REFUSED_PREFIX};

/// Scenario settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Unique valid events.
    pub events: usize,
    /// Duplicate share of deliveries, percent.
    pub duplicate_pct: u32,
    /// Poison messages.
    pub poison: usize,
    /// Concurrent consumers.
    pub pollers: usize,
    /// Per mille of invocations that crash (each crash point separately).
    pub crash_per_mille: u64,
    /// Seed of faults and workload.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { events: 2000, duplicate_pct: 30, poison: 10, pollers: 2, crash_per_mille: 40, seed: 42 }
    }
}

/// What the scenario did and whether the invariants held.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Unique valid events.
    pub events: usize,
    /// Messages sent.
    pub sent: usize,
    /// SQS deliveries, redeliveries included.
    pub deliveries: usize,
    /// Stream records delivered to the relay, redeliveries included.
    pub stream_records: usize,
    /// What the tables, the DLQ and the local SES hold, and the invariants.
    pub audit: Audit,
    /// Wall time.
    pub elapsed: Duration,
    /// Wall time by phase: the fed run, the redrive and its drain, the lease wait and last
    /// drain, the audit.
    pub phases: Vec<(&'static str, Duration)>,
}

impl Report {
    /// Whether every invariant held.
    pub fn ok(&self) -> bool {
        self.audit.ok()
    }

    /// The table `make chaos` prints.
    pub fn table(&self) -> String {
        let mut t = String::from("| fault injected | count |\n|---|---|\n");
        for (k, v) in &self.faults {
            t.push_str(&format!("| {k} | {v} |\n"));
        }
        t.push_str(&format!("| **total** | {} |\n", self.faults.values().sum::<u64>()));
        t.push_str("\n| traffic | count |\n|---|---|\n");
        t.push_str(&format!(
            "| unique event ids | {} |\n| messages sent (key-reuse copies, duplicates and poison included) | {} |\n",
            self.events, self.sent
        ));
        t.push_str(&format!(
            "| SQS deliveries (with redeliveries) | {} |\n| stream records delivered | {} |\n",
            self.deliveries, self.stream_records
        ));
        t.push('\n');
        t.push_str(&self.audit.table());
        t.push_str("\n| phase | seconds |\n|---|---|\n");
        for (name, d) in &self.phases {
            t.push_str(&format!("| {name} | {:.1} |\n", d.as_secs_f64()));
        }
        t.push_str(&format!(
            "| **total** | {:.1} ({:.3} s per event) |\n",
            self.elapsed.as_secs_f64(),
            self.elapsed.as_secs_f64() / self.events.max(1) as f64
        ));
        t
    }
}

/// Counts crash points hit.
#[derive(Debug, Default)]
struct Crashes {
    counts: Mutex<BTreeMap<&'static str, u64>>,
    state: AtomicU64,
}

impl Crashes {
    fn roll(&self, per_mille: u64) -> bool {
        let mut s = self.state.load(Ordering::SeqCst);
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        self.state.store(s, Ordering::SeqCst);
        s % 1000 < per_mille
    }

    fn hit(&self, point: &'static str) {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner()).entry(point).or_default() += 1;
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
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse, String> {
        if self.crashes.roll(self.per_mille) {
            // Dies mid-batch: the invocation's future is dropped wherever it is; some records
            // committed, none acknowledged.
            self.crashes.hit("invocation dies mid-batch (future dropped)");
            let cut = Duration::from_millis(self.crashes.state.load(Ordering::SeqCst) % 40);
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
    async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse, String> {
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
/// - a lost answer to a marker's claim (`PutItem`): what the claim replaced is unknown, so it is
///   taken for a takeover;
/// - a completion or release of a marker (`UpdateItem`, `DeleteItem`) lost, throttled or
///   failed past the retries: the marker stays held and is taken over after its lease.
///
/// An upper bound: the same faults hit the outbox rows' updates and the rejection records too,
/// and most are absorbed by a retry. Delays, throttled or refused sends (definite: the marker
/// is released or records the refusal) and throttled claims (nothing written) explain none.
pub fn ambiguous_receipts_explained(faults: &BTreeMap<String, u64>) -> usize {
    let explains = |key: &str| match key.rsplit_once(' ') {
        Some(("lost response" | "500", "ses:SendEmail")) => true,
        Some(("lost response", "dynamodb:PutItem")) => true,
        Some(("lost response" | "throttled" | "500", "dynamodb:UpdateItem" | "dynamodb:DeleteItem")) => true,
        _ => key == RELAY_TIMED_OUT,
    };
    faults.iter().filter(|(key, _)| explains(key)).map(|(_, n)| *n as usize).sum()
}

/// Runs the scenario on fresh resources.
pub async fn run(clients: &Clients, options: &Options) -> Result<Report, String> {
    let started = Instant::now();
    let mut w = Workload::new(options.events);
    w.duplicate_pct = options.duplicate_pct;
    w.poison = options.poison;
    w.seed = options.seed;
    let r = resources::up(clients, &format!("chaos-{}", w.run)).await?;
    let endpoint = effectively_once_dynamodb::testing::endpoint();
    let upstream = endpoint.trim_start_matches("http://").trim_end_matches('/').to_owned();
    // Receipt addresses the provider refuses: the proxy answers SES's MessageRejected for them.
    let rules = RefuseRecipients::new(
        REFUSED_PREFIX,
        RandomFaults::new(options.seed)
            .on(
                "dynamodb:TransactWriteItems",
                &[
                    (Fault::DropResponse, 30),
                    (Fault::Throttle, 20),
                    (Fault::ServerError, 10),
                    (Fault::Delay(Duration::from_millis(30)), 20),
                ],
            )
            .on("dynamodb:PutItem", &[(Fault::DropResponse, 20), (Fault::Throttle, 20)])
            .on("dynamodb:UpdateItem", &[(Fault::DropResponse, 20), (Fault::Throttle, 20)])
            .on("dynamodb:DeleteItem", &[(Fault::DropResponse, 20)])
            .on("ses:SendEmail", &[(Fault::Throttle, 30), (Fault::DropResponse, 10), (Fault::ServerError, 10)]),
    );
    let proxy = Proxy::start(&upstream, Arc::new(rules)).await.map_err(|e| e.to_string())?;
    // The SDK's own retries, with a 50 ms first backoff instead of 1 s: every injected fault is
    // retried as in production, but a batch no longer waits a second for each, so the scenario's
    // time goes to work, not to sleep.
    let retries = aws_config::retry::RetryConfig::standard().with_initial_backoff(Duration::from_millis(50));
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(proxy.url())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "chaos"))
        .retry_config(retries)
        .load()
        .await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let crashes = Arc::new(Crashes { state: AtomicU64::new(options.seed | 1), ..Default::default() });

    let ledger = Ledger::new(
        DynamoDbStore::new(dynamodb.clone(), &r.idempotency_table),
        &r.ledger_table,
        Some(r.outbox_table.clone()),
    );
    let payments = CrashingPayments {
        inner: InProcess::new(Panicking::new(Payments::new(ledger)), payments_consumer::FUNCTION),
        crashes: crashes.clone(),
        per_mille: options.crash_per_mille,
    };
    // Short marker leases, so dead attempts are taken over within the run.
    let markers = Idempotency::new(
        DynamoDbStore::new(dynamodb.clone(), &r.idempotency_table),
        Config::default().lease(Duration::from_secs(2)),
    );
    let sender = AcceptThenDie {
        inner: SesSender::new(aws_sdk_sesv2::Client::new(&sdk), RECEIPT_FROM),
        crashes: crashes.clone(),
        per_mille: options.crash_per_mille / 2,
    };
    let relay = TimedRelay {
        inner: InProcess::new(
            Receipts::new(markers, sender, &r.outbox_table, Policy::AtMostOnce),
            receipts_relay::FUNCTION,
        ),
        crashes: crashes.clone(),
    };

    let plan = workload::plan(&w);
    let sqs = SqsMapping::new(&r.queue_url);
    let mut stream = StreamMapping::new(&r.outbox_table, Some(r.failures_url.clone()));
    stream.max_retries = 1000; // the at-most-once takeover needs the lease to end, not a give-up
    let expected = plan.deliveries.len();
    let bar = |p: esm::Progress| {
        eprint!(
            "\rdeliveries {:>6} (sent {expected})  failed {:>5}  stream {:>5}",
            p.deliveries, p.failed, p.stream_records
        )
    };
    // The producer sends as the consumers run, a little faster than they drain.
    let mut feed = esm::Feed::new(plan.deliveries.clone(), 12 * options.pollers.max(1));
    let mut phase = Instant::now();
    let mut phases = Vec::new();
    let mut lap = |name: &'static str| {
        phases.push((name, phase.elapsed()));
        phase = Instant::now();
    };
    let first = esm::run_fed(clients, &sqs, &mut stream, &payments, &relay, options.pollers, &mut feed, bar).await?;
    lap("producer and consumers until drained");
    let redriven = esm::redrive(clients, &r.dlq_url, &r.queue_url).await?;
    let second = esm::run_until_drained(clients, &sqs, &mut stream, &payments, &relay, options.pollers, bar).await?;
    lap("DLQ redrive, drained again");
    // Relay records still held by a dead attempt's lease: let it end and drain again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let third = esm::run_until_drained(clients, &sqs, &mut stream, &payments, &relay, options.pollers, bar).await?;
    lap("lease wait, last drain");
    eprintln!();

    let mut report = Report {
        events: plan.event_ids().len(),
        sent: plan.deliveries.len(),
        deliveries: first.deliveries + second.deliveries + third.deliveries,
        stream_records: first.stream_records + second.stream_records + third.stream_records,
        ..Report::default()
    };
    for (k, v) in proxy.injected() {
        report.faults.insert(k, v);
    }
    for (k, v) in crashes.counts.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        report.faults.insert((*k).to_owned(), *v);
    }
    report.faults.insert("DLQ redrive (messages moved back)".into(), redriven as u64);
    // The invariants, read from the tables, the DLQ and the local SES, not from the plan; no more
    // AMBIGUOUS receipts than the faults counted above can explain.
    let explained = ambiguous_receipts_explained(&report.faults);
    report.audit = crate::audit::audit(clients, &r, &plan, &w.run, explained).await?;
    lap("audit (tables, DLQ, SES read back)");
    report.phases = phases;
    report.elapsed = started.elapsed();
    resources::down(clients, &r).await.ok();
    Ok(report)
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
        // them, counted once), lost claims, and marker completions or releases that failed.
        assert_eq!(ambiguous_receipts_explained(&faults), 38 + 48 + 97 + 125 + 5 + 177 + 194);
        assert_eq!(ambiguous_receipts_explained(&BTreeMap::new()), 0, "no faults, nothing ambiguous");
    }
}
