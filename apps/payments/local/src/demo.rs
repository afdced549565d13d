//! The demo: a hostile workload through the local pipeline (see [`crate::workload`]), a DLQ
//! redrive, and the invariants checked against what the tables, the DLQ and the local SES hold
//! ([`crate::invariants`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use effectively_once_effects::{Policy, SesSender};
use payments_consumer::Payments;

use crate::invariants::{self, Audit, Table};
use crate::panicking::Panicking;
use crate::pipeline::Pipeline;
use crate::resources::RECEIPT_FROM;
use crate::workload::{self, Workload, REFUSED_PREFIX};
use local::error::{Result, ResultExt};
use local::esm::Feed;
use local::invoke::Ordered;
use local::progress::Tracker;
use local::proxy::{NoFaults, Proxy, RefuseRecipients};

/// The payments function as the demo runs it: the real handler behind [`Panicking`], which
/// panics where the workload marks an event id (the chaos scenario wraps it the same way,
/// behind its fault proxy).
pub fn hostile_payments(pipeline: &Pipeline) -> Ordered<Panicking<Payments>> {
    let payments = Payments::new(pipeline.ledger(&pipeline.clients.dynamodb));
    Ordered::new(Panicking::new(payments), payments_consumer::FUNCTION)
}

/// An SES client whose sends to [`REFUSED_PREFIX`] addresses are refused (SES's
/// `MessageRejected`) by a fault proxy in front of the local AWS, which cannot refuse a
/// recipient itself; everything else passes through.
pub async fn refusing_ses() -> Result<(Proxy, aws_sdk_sesv2::Client)> {
    let rules = RefuseRecipients::new(REFUSED_PREFIX, NoFaults);
    let proxy = Proxy::to_local_aws(Arc::new(rules)).await.context("fault proxy")?;
    let sdk = proxy.sdk_config(aws_config::retry::RetryConfig::standard()).await;
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
        let mut traffic = Table::new(&["traffic", "count"]);
        traffic
            .row(&[&"unique event ids", &self.events])
            .row(&[&"messages sent (key-reuse copies, duplicates, poison included)", &self.sent])
            .row(&[&"deliveries (with redeliveries)", &self.deliveries])
            .row(&[&"applied (handler count)", &self.applied])
            .row(&[&"duplicates skipped (handler count)", &self.duplicates])
            .row(&[&"rejected, recorded (handler count)", &self.rejected])
            .row(&[&"redriven from the DLQ", &self.redriven]);
        format!("{traffic}\n{}", self.audit.table())
    }
}

/// Runs the demo on `pipeline` with `pollers` concurrent consumers and checks the invariants.
pub async fn run(pipeline: &Pipeline, workload: &Workload, pollers: usize) -> Result<Summary> {
    pipeline.purge_queues().await;
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
    let (_proxy, ses) = refusing_ses().await?;
    let relay = pipeline.relay_with(SesSender::new(ses, RECEIPT_FROM), Policy::default());
    let mut esm = pipeline.emulator(hostile_payments(pipeline), relay).pollers(pollers);
    // Skip what earlier runs left on the stream: this run's rows come after it.
    esm.skip_stream_backlog(&pipeline.clients).await?;
    let max_receive_count = pipeline.resources.max_receive_count as usize;
    let mut tracker = Tracker::new(plan.deliveries.len() + plan.poison.len() * max_receive_count.saturating_sub(1));
    // The producer sends as the consumers run, a little faster than they drain.
    let mut feed = Feed::new(plan.deliveries.clone(), 12 * esm.pollers);
    let redriven = esm.run_and_redrive(&pipeline.clients, &mut feed, &mut tracker).await?;
    tracker.finish();
    let counts = esm.on_queue.counts();
    // Refusals are the demo's only faults: no receipt may end AMBIGUOUS.
    let audit = invariants::audit(pipeline, &plan, &workload.run, 0).await?;
    Ok(Summary {
        events: plan.event_ids().len(),
        sent: plan.deliveries.len(),
        deliveries: tracker.total().deliveries,
        applied: counts.applied,
        duplicates: counts.duplicate,
        rejected: counts.rejected,
        redriven,
        audit,
        elapsed: started.elapsed(),
    })
}
