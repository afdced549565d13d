//! The scenario's report: what was injected and sent, how each path's records ended, the
//! invariants and the time spent, as the Markdown tables `make chaos` prints.

use std::collections::BTreeMap;
use std::time::Duration;

use super::kafka::KafkaRun;
use super::orders::OrdersRun;
use crate::invariants::kafka::KafkaReadBack;
use crate::invariants::orders::OrdersReadBack;
use crate::invariants::{Audit, Table};

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
    /// drain, the audit; the stream path's phases (concurrent with the first two).
    pub phases: Vec<(&'static str, Duration)>,
    /// The stream path's traffic and outcomes; `None` without it. Its invariants are in
    /// `audit.checks`.
    pub orders: Option<OrdersReport>,
    /// The Kafka path's traffic and outcomes; `None` without it. Its invariants are in
    /// `audit.checks`.
    pub kafka: Option<KafkaReport>,
}

/// What the stream path sent and how each record ended, read back.
#[derive(Debug, Clone, Default)]
pub struct OrdersReport {
    /// Traffic, by name.
    pub traffic: Vec<(&'static str, usize)>,
    /// Distinct records put, `kind | outcome read back`, counted.
    pub outcomes: BTreeMap<String, usize>,
}

impl OrdersReport {
    pub(super) fn of(run: &OrdersRun, read: &OrdersReadBack, outcomes: BTreeMap<String, usize>) -> OrdersReport {
        let traffic = vec![
            ("orders (distinct, valid or panicking)", run.plan.orders.len()),
            ("records put (producer retries and poison included)", run.plan.puts.len()),
            ("producer retries (new sequence number)", run.plan.retries),
            ("of which under another partition key", run.plan.rekeyed),
            ("poison records", run.plan.poison.len()),
            ("shards after the mid-run split", run.shards),
            ("records delivered, two mappings (with redeliveries)", run.delivered),
            ("records discarded to the on-failure destination", run.discarded),
            ("parcels in the park queue (a record parked again included)", read.parcels),
            ("records parked (distinct shard and sequence number)", read.parked.len()),
            ("destination batches cleared by the replay", run.replayed.batches),
            ("records handed over by the replay", run.replayed.records),
            ("destination batches kept (still failing)", run.replayed.kept),
        ];
        OrdersReport { traffic, outcomes }
    }

    fn table(&self) -> String {
        let mut traffic = Table::new(&["orders stream (Kinesis)", "count"]);
        for (k, v) in &self.traffic {
            traffic.row(&[k, v]);
        }
        let mut outcomes = Table::new(&["put on the orders stream (distinct records)", "outcome read back", "count"]);
        for (key, n) in &self.outcomes {
            let (kind, fate) = key.split_once(" | ").unwrap_or((key, ""));
            outcomes.row(&[&kind, &fate, n]);
        }
        format!("{traffic}\n{outcomes}")
    }
}

impl Report {
    /// Whether every invariant held.
    pub fn ok(&self) -> bool {
        self.audit.ok()
    }

    /// The table `make chaos` prints.
    pub fn table(&self) -> String {
        let mut faults = Table::new(&["fault injected", "count"]);
        for (k, v) in &self.faults {
            faults.row(&[k, v]);
        }
        faults.row(&[&"**total**", &self.faults.values().sum::<u64>()]);
        let mut traffic = Table::new(&["traffic", "count"]);
        traffic
            .row(&[&"unique event ids", &self.events])
            .row(&[&"messages sent (key-reuse copies, duplicates and poison included)", &self.sent])
            .row(&[&"SQS deliveries (with redeliveries)", &self.deliveries])
            .row(&[&"stream records delivered", &self.stream_records]);
        let mut phases = Table::new(&["phase", "seconds"]);
        for (name, d) in &self.phases {
            phases.row(&[name, &format!("{:.1}", d.as_secs_f64())]);
        }
        let total = self.elapsed.as_secs_f64();
        let per_event = format!("{total:.1} ({:.3} s per event)", total / self.events.max(1) as f64);
        phases.row(&[&"**total**", &per_event]);
        let orders = self.orders.as_ref().map(|o| format!("{}\n", o.table())).unwrap_or_default();
        let kafka = self.kafka.as_ref().map(|k| format!("{}\n", k.table())).unwrap_or_default();
        format!("{faults}\n{traffic}\n{orders}{kafka}{}\n{phases}", self.audit.table())
    }
}

/// What the Kafka path wrote and how each payment and poison value ended, read back.
#[derive(Debug, Clone, Default)]
pub struct KafkaReport {
    /// Traffic and faults, by name.
    pub traffic: Vec<(&'static str, usize)>,
    /// Distinct payments and poison values, `kind | outcome read back`, counted.
    pub outcomes: BTreeMap<String, usize>,
    /// How the mapping read the answers' named records.
    pub reading: local::esm::kafka::Reading,
}

impl KafkaReport {
    /// The figures of `run`, with the outcomes the invariants read back.
    pub fn of(run: &KafkaRun, read: &KafkaReadBack, outcomes: BTreeMap<String, usize>) -> KafkaReport {
        let (retries, elsewhere) = run.plan.retries_written();
        let c = run.counts;
        let traffic = vec![
            ("payments (distinct)", run.plan.payments.len()),
            ("records written (producer retries and poison included)", run.plan.writes.len()),
            ("producer retries (new offset)", retries + elsewhere),
            ("of which under another record key, in another partition", elsewhere),
            ("poison values", run.plan.poison.len()),
            ("records handed to the function (redeliveries, crashes, replay)", run.handed()),
            (
                "of which beyond the records written (processed again)",
                run.handed().saturating_sub(run.plan.writes.len()),
            ),
            ("applied", c.applied as usize),
            ("duplicates (answered from the first delivery)", c.duplicate as usize),
            ("rejected (recorded)", c.rejected as usize),
            ("in progress elsewhere (retried)", c.in_progress as usize),
            ("failed permanently (poison: parked, then skipped)", c.permanent as usize),
            ("parcels in the park queue (a record parked again included)", read.parcels),
            ("records parked (distinct topic-partition and offset)", read.parked.len()),
            ("records discarded to the on-failure destination", run.polls.given_up),
            ("destination batches replayed with the fix", run.replayed.batches),
            ("records handed over by the replay", run.replayed.records),
            ("destination batches kept (still failing)", run.replayed.kept),
            ("pollers crashed after their invocation, before the commit", run.crashes.0),
            ("invocations stalled past the poll interval", run.stalls),
            ("rebalance overlaps (two pollers holding the same records)", run.overlaps.0),
            ("records held by both pollers at once", run.overlaps.1),
            ("offset commits refused", run.polls.commits_refused),
        ];
        KafkaReport { traffic, outcomes, reading: run.mapping.reading }
    }

    /// The path's tables.
    pub fn table(&self) -> String {
        let topic = format!("payments topic (Kafka, 3 partitions, {} reading)", self.reading);
        let mut traffic = Table::new(&[&topic, "count"]);
        for (k, v) in &self.traffic {
            traffic.row(&[k, v]);
        }
        let mut outcomes = Table::new(&["written to the topic (distinct)", "outcome read back", "count"]);
        for (key, n) in &self.outcomes {
            let (kind, fate) = key.split_once(" | ").unwrap_or((key, ""));
            outcomes.row(&[&kind, &fate, n]);
        }
        format!("{traffic}\n{outcomes}")
    }
}
