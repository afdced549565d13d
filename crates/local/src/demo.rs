//! The demo: a hostile workload through the local pipeline (see [`crate::workload`]), a DLQ
//! redrive, and the invariants checked against what the tables, the DLQ and the local SES hold
//! ([`crate::audit`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::{Credentials, Region};
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{Ledger, Policy, SesSender};
use payments_consumer::Payments;
use receipts_relay::Receipts;

use crate::audit::{self, Audit};
use crate::esm::{self, Progress, SqsMapping, StreamMapping};
use crate::invoke::{InProcess, Panicking};
use crate::proxy::{NoFaults, Proxy, RefuseRecipients};
use crate::resources::{Clients, Resources, RECEIPT_FROM};
use crate::workload::{self, Workload, REFUSED_PREFIX};

/// The in-process payments function on `resources`.
pub fn payments(clients: &Clients, resources: &Resources) -> InProcess<Payments> {
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &resources.idempotency_table);
    let ledger = Ledger::new(store, &resources.ledger_table, Some(resources.outbox_table.clone()));
    InProcess::new(Payments::new(ledger), payments_consumer::FUNCTION)
}

/// The in-process receipts relay on `resources`, at most once.
pub fn relay(clients: &Clients, resources: &Resources) -> InProcess<Receipts<SesSender>> {
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &resources.idempotency_table);
    let markers = Idempotency::new(store, Config::default().lease(Duration::from_secs(60)));
    let sender = SesSender::new(clients.ses.clone(), RECEIPT_FROM);
    InProcess::new(Receipts::new(markers, sender, &resources.outbox_table, Policy::default()), receipts_relay::FUNCTION)
}

/// One invariant and whether it held.
#[derive(Debug, Clone)]
pub struct Check {
    /// What must hold.
    pub name: String,
    /// Whether it did.
    pub ok: bool,
    /// The figures behind it.
    pub detail: String,
}

/// The payments function as the demo runs it: the real handler behind [`Panicking`], which
/// panics where the workload marks an event id (the chaos scenario wraps it the same way,
/// behind its fault proxy).
pub fn hostile_payments(clients: &Clients, resources: &Resources) -> InProcess<Panicking<Payments>> {
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &resources.idempotency_table);
    let ledger = Ledger::new(store, &resources.ledger_table, Some(resources.outbox_table.clone()));
    InProcess::new(Panicking::new(Payments::new(ledger)), payments_consumer::FUNCTION)
}

/// An SES client whose sends to [`REFUSED_PREFIX`] addresses are refused (SES's
/// `MessageRejected`) by a fault proxy in front of the local AWS, which cannot refuse a
/// recipient itself; everything else passes through.
pub async fn refusing_ses() -> Result<(Proxy, aws_sdk_sesv2::Client), String> {
    let upstream =
        effectively_once_dynamodb::testing::endpoint().trim_start_matches("http://").trim_end_matches('/').to_owned();
    let proxy = Proxy::start(&upstream, Arc::new(RefuseRecipients::new(REFUSED_PREFIX, NoFaults)))
        .await
        .map_err(|e| format!("fault proxy: {e}"))?;
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(proxy.url())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "demo"))
        .load()
        .await;
    Ok((proxy, aws_sdk_sesv2::Client::new(&sdk)))
}

/// What the demo measured.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Unique event ids sent.
    pub events: usize,
    /// Messages sent (events, key-reuse copies, duplicates, poison).
    pub sent: usize,
    /// Deliveries the functions received, redeliveries included.
    pub deliveries: usize,
    /// Applied by this run (the handler's count).
    pub applied: u64,
    /// Duplicates skipped (the handler's count).
    pub duplicates: u64,
    /// Rejected (overdraft, currency), recorded (the handler's count).
    pub rejected: u64,
    /// Messages moved back by the redrive.
    pub redriven: usize,
    /// What the tables, the DLQ and the local SES hold, and the invariants.
    pub audit: Audit,
    /// Wall time of the pipeline.
    pub elapsed: Duration,
}

impl Summary {
    /// Whether every invariant held.
    pub fn ok(&self) -> bool {
        self.audit.ok()
    }

    /// Messages in the DLQ at the end, by reason.
    pub fn dlq(&self) -> &BTreeMap<String, usize> {
        &self.audit.dlq
    }

    /// The summary tables.
    pub fn table(&self) -> String {
        let mut t = String::from("| traffic | count |\n|---|---|\n");
        for (k, v) in [
            ("unique event ids", self.events),
            ("messages sent (key-reuse copies, duplicates, poison included)", self.sent),
            ("deliveries (with redeliveries)", self.deliveries),
            ("applied (handler count)", self.applied as usize),
            ("duplicates skipped (handler count)", self.duplicates as usize),
            ("rejected, recorded (handler count)", self.rejected as usize),
            ("redriven from the DLQ", self.redriven),
        ] {
            t.push_str(&format!("| {k} | {v} |\n"));
        }
        t.push('\n');
        t.push_str(&self.audit.table());
        t
    }
}

/// Runs the demo on `resources` and checks the invariants.
pub async fn run(
    clients: &Clients,
    resources: &Resources,
    workload: &Workload,
    pollers: usize,
) -> Result<Summary, String> {
    for url in [&resources.queue_url, &resources.dlq_url] {
        clients.sqs.purge_queue().queue_url(url).send().await.ok();
    }
    let plan = workload::plan(workload);
    let started = Instant::now();
    eprintln!(
        "sending {} messages as the consumers run: {} event ids ({} bodies), {} duplicates, {} poison (run {})",
        plan.deliveries.len(),
        plan.event_ids().len(),
        plan.sent.len(),
        plan.duplicates,
        plan.poison.len(),
        workload.run
    );
    let payments = hostile_payments(clients, resources);
    let (_proxy, ses) = refusing_ses().await?;
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &resources.idempotency_table);
    let markers = Idempotency::new(store, Config::default().lease(Duration::from_secs(60)));
    let relay = InProcess::new(
        Receipts::new(markers, SesSender::new(ses, RECEIPT_FROM), &resources.outbox_table, Policy::default()),
        receipts_relay::FUNCTION,
    );
    let sqs = SqsMapping::new(&resources.queue_url);
    let mut stream = StreamMapping::new(&resources.outbox_table, Some(resources.failures_url.clone()));
    // Skip what earlier runs left on the stream: this run's rows come after it.
    while esm::poll_stream(clients, &mut stream, &relay).await?.delivered > 0 {}
    let expected = plan.deliveries.len() + plan.poison.len() * (resources.max_receive_count as usize).saturating_sub(1);
    // The producer sends as the consumers run, a little faster than they drain.
    let mut feed = esm::Feed::new(plan.deliveries.clone(), 12 * pollers.max(1));
    let first =
        esm::run_fed(clients, &sqs, &mut stream, &payments, &relay, pollers, &mut feed, |p| progress_bar(p, expected))
            .await?;
    // After the bug fix: everything in the DLQ goes back. Poison is still poison, a reused key
    // still reused, a record that always panics still panics; the rest is harmless because
    // every effect is keyed.
    let redriven = esm::redrive(clients, &resources.dlq_url, &resources.queue_url).await?;
    let expected = expected + redriven * resources.max_receive_count as usize;
    let second = esm::run_until_drained(clients, &sqs, &mut stream, &payments, &relay, pollers, |p| {
        let total = Progress {
            deliveries: first.deliveries + p.deliveries,
            failed: first.failed + p.failed,
            stream_records: first.stream_records + p.stream_records,
        };
        progress_bar(total, expected)
    })
    .await?;
    eprintln!();
    let counts = payments.counts();
    // Refusals are the demo's only faults: no receipt may end AMBIGUOUS.
    let audit = audit::audit(clients, resources, &plan, &workload.run, 0).await?;
    Ok(Summary {
        events: plan.event_ids().len(),
        sent: plan.deliveries.len(),
        deliveries: first.deliveries + second.deliveries,
        applied: counts.applied,
        duplicates: counts.duplicate,
        rejected: counts.rejected,
        redriven,
        audit,
        elapsed: started.elapsed(),
    })
}

fn progress_bar(p: Progress, expected: usize) {
    let width = 30;
    let done = (p.deliveries * width / expected.max(1)).min(width);
    eprint!(
        "\r[{}{}] deliveries {:>5}/{:<5} failed {:>4}  receipts stream {:>4}",
        "#".repeat(done),
        ".".repeat(width - done),
        p.deliveries,
        expected,
        p.failed,
        p.stream_records
    );
    std::io::stderr().flush().ok();
}

/// Recipients of every email the local SES accepted.
pub fn sent_emails() -> Result<Vec<String>, String> {
    Ok(effectively_once_dynamodb::testing::sent_emails()?
        .iter()
        .flat_map(|m| m["destinations"]["ToAddresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect())
}
