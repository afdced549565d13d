//! The demo: a workload through the local pipeline, a DLQ redrive, and the invariants checked
//! against what the tables and the local SES hold.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use effects::{Ledger, PaymentEvent, Policy, SesSender};
use idempotency::{Config, Idempotency};
use idempotency_dynamodb::DynamoDbStore;
use payments_consumer::Payments;
use receipts_relay::Receipts;

use crate::esm::{self, Progress, SqsMapping, StreamMapping};
use crate::invoke::InProcess;
use crate::resources::{Clients, Resources, RECEIPT_FROM};
use crate::workload::{self, Plan, Workload};

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

/// What the demo measured.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Unique valid events sent.
    pub events: usize,
    /// Messages sent (events, duplicates, poison).
    pub sent: usize,
    /// Deliveries the functions received, redeliveries included.
    pub deliveries: usize,
    /// Applied by this run.
    pub applied: u64,
    /// Duplicates skipped.
    pub duplicates: u64,
    /// Rejected (overdraft, currency), recorded.
    pub rejected: u64,
    /// Messages in the DLQ at the end, by reason.
    pub dlq: BTreeMap<String, usize>,
    /// Messages moved back by the redrive.
    pub redriven: usize,
    /// Receipt emails the local SES accepted for this run.
    pub receipts: usize,
    /// The invariants.
    pub checks: Vec<Check>,
    /// Wall time of the pipeline.
    pub elapsed: Duration,
}

impl Summary {
    /// Whether every invariant held.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The summary table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let row = |t: &mut String, k: &str, v: String| t.push_str(&format!("| {k:<60} | {v:>7} |\n"));
        t.push_str(&format!("| {:<60} | {:>7} |\n|{}|{}|\n", "", "count", "-".repeat(62), "-".repeat(9)));
        row(&mut t, "events (unique, valid)", self.events.to_string());
        row(&mut t, "messages sent (with duplicates)", self.sent.to_string());
        row(&mut t, "deliveries (with redeliveries)", self.deliveries.to_string());
        row(&mut t, "applied", self.applied.to_string());
        row(&mut t, "duplicates skipped", self.duplicates.to_string());
        row(&mut t, "rejected (recorded, not retried)", self.rejected.to_string());
        row(&mut t, "redriven from the DLQ", self.redriven.to_string());
        row(&mut t, "in the DLQ", self.dlq.values().sum::<usize>().to_string());
        for (reason, n) in &self.dlq {
            row(&mut t, &format!("  {}", truncate(reason, 58)), n.to_string());
        }
        row(&mut t, "receipts sent", self.receipts.to_string());
        t.push_str("\n| invariant | holds | figures |\n|---|---|---|\n");
        for c in &self.checks {
            t.push_str(&format!("| {} | {} | {} |\n", c.name, if c.ok { "yes" } else { "NO" }, c.detail));
        }
        t
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
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
        "sending {} messages as the consumers run: {} events, {} duplicates, {} poison (run {})",
        plan.deliveries.len(),
        plan.events.len(),
        plan.duplicates,
        plan.poison.len(),
        workload.run
    );
    let payments = payments(clients, resources);
    let relay = relay(clients, resources);
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
    // After the bug fix: everything in the DLQ goes back. Poison is still poison; the rest is
    // harmless because every effect is keyed.
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
    let mut summary = Summary {
        events: plan.events.len(),
        sent: plan.deliveries.len(),
        deliveries: first.deliveries + second.deliveries,
        applied: counts.applied,
        duplicates: counts.duplicate,
        rejected: counts.rejected,
        redriven,
        elapsed: started.elapsed(),
        ..Summary::default()
    };
    verify(clients, resources, &plan, &mut summary).await?;
    Ok(summary)
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

/// What the ledger holds against what a plan must produce, read from the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerState {
    /// Entries on the plan's accounts.
    pub entries: usize,
    /// Accounts whose balance item is not the sum and count of their applied events.
    pub wrong_balances: usize,
    /// Accounts of rejected events that hold anything.
    pub posted_rejections: usize,
}

/// Reads the ledger for every account the plan touches.
pub async fn ledger_state(clients: &Clients, resources: &Resources, plan: &Plan) -> Result<LedgerState, String> {
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &resources.idempotency_table);
    let ledger = Ledger::new(store, &resources.ledger_table, None);
    let mut state = LedgerState { entries: 0, wrong_balances: 0, posted_rejections: 0 };
    for (account, sum) in &plan.balances() {
        let posted = ledger.entries(account).await.map_err(|e| e.to_string())?;
        let balance = ledger.balance(account).await.map_err(|e| e.to_string())?;
        if balance.map(|b| (b.balance_cents, b.entry_count as usize)) != Some((*sum, posted.len())) {
            state.wrong_balances += 1;
        }
        state.entries += posted.len();
    }
    for e in &plan.rejected {
        if ledger.balance(&e.account_id).await.map_err(|e| e.to_string())?.is_some() {
            state.posted_rejections += 1;
        }
    }
    Ok(state)
}

async fn verify(clients: &Clients, resources: &Resources, plan: &Plan, summary: &mut Summary) -> Result<(), String> {
    // Ledger entries equal the unique valid events that must apply; balances equal their sums.
    let LedgerState { entries, wrong_balances, posted_rejections } = ledger_state(clients, resources, plan).await?;
    let rejected_seen = summary.rejected as usize;
    let mut check = |name: &str, ok: bool, detail: String| summary.checks.push(Check { name: name.into(), ok, detail });
    check(
        "ledger entries = unique valid events not rejected",
        entries == plan.applied.len(),
        format!("{entries} entries, {} expected", plan.applied.len()),
    );
    check(
        "balances = sums of applied amounts",
        wrong_balances == 0,
        format!("{} accounts, {wrong_balances} wrong", plan.balances().len()),
    );
    check(
        "rejected events posted nothing",
        posted_rejections == 0 && rejected_seen >= plan.rejected.len(),
        format!("{} rejected, {posted_rejections} posted", plan.rejected.len()),
    );

    // Nothing lost: every message is applied, rejected, or in the DLQ with its reason.
    let dlq = esm::peek_bodies(clients, &resources.dlq_url).await?;
    for body in &dlq {
        let reason = match PaymentEvent::parse(body) {
            Err(e) => e.to_string(),
            Ok(_) => "valid event: retryable failures exhausted".into(),
        };
        *summary.dlq.entry(reason).or_default() += 1;
    }
    let mut poison: Vec<&String> = plan.poison.iter().collect();
    let mut found: Vec<&String> = dlq.iter().collect();
    poison.sort();
    found.sort();
    check(
        "DLQ holds exactly the poison messages",
        poison == found,
        format!("{} in the DLQ, {} poison sent", dlq.len(), plan.poison.len()),
    );
    check(
        "nothing lost",
        entries + plan.rejected.len() + dlq.len() == plan.events.len() + plan.poison.len() && poison == found,
        format!("{entries} applied + {} rejected + {} in the DLQ", plan.rejected.len(), dlq.len()),
    );

    // One receipt per applied event with an address; none twice.
    let emails = sent_emails()?;
    let mut per_recipient: BTreeMap<&str, usize> = BTreeMap::new();
    for to in &emails {
        *per_recipient.entry(to.as_str()).or_default() += 1;
    }
    let wanted = plan.receipts();
    let (mut missing, mut doubled) = (0, 0);
    for to in &wanted {
        match per_recipient.get(to.as_str()) {
            None => missing += 1,
            Some(1) => {}
            Some(_) => doubled += 1,
        }
    }
    summary.receipts = wanted.iter().map(|to| per_recipient.get(to.as_str()).copied().unwrap_or(0)).sum();
    check(
        "one receipt per event with an address",
        missing == 0 && doubled == 0,
        format!("{} expected, {} sent, {missing} missing, {doubled} doubled", wanted.len(), summary.receipts),
    );
    Ok(())
}

/// Recipients of every email the local SES accepted.
pub fn sent_emails() -> Result<Vec<String>, String> {
    Ok(idempotency_dynamodb::testing::sent_emails()?
        .iter()
        .flat_map(|m| m["destinations"]["ToAddresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect())
}
