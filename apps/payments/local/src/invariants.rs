//! The invariants of a run, read back from what the pipeline left: ledger entries and balances,
//! the outcomes recorded in the idempotency table, outbox rows, email markers, the DLQ, the park
//! queues ([`local::park`]) and the emails the local SES accepted. Never from the plan's expectations: a plan says what was sent,
//! the tables say what came of it. The demo and the chaos scenario both end with [`audit`], and
//! both render their reports with [`Table`].
//!
//! Every read is by key (a `Query` per account, `BatchGetItem` per hundred records), so the
//! audit costs what the run sent, not what the tables hold.

mod fates;
pub mod kafka;
pub mod orders;
mod read;
mod receipts;

use std::collections::BTreeMap;
use std::fmt;

use crate::pipeline::Pipeline;
use crate::workload::{Kind, Plan};
use local::error::Result;

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

impl Check {
    fn new(name: &str, ok: bool, detail: String) -> Check {
        Check { name: name.into(), ok, detail }
    }
}

/// How one trigger's distinct records ended, each counted once: the figures of "nothing lost".
/// A record is applied, rejected (its rejection read back), in a destination (the DLQ, an
/// on-failure destination) or parked (its parcel read back from the park queue); `lost` ended
/// nowhere, `twice` in two of those (parked and applied, say).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// The trigger and what it carries.
    pub trigger: String,
    /// Distinct records sent.
    pub sent: usize,
    /// Applied.
    pub applied: usize,
    /// Rejected, the rejection recorded.
    pub rejected: usize,
    /// In the DLQ or the on-failure destination.
    pub destination: usize,
    /// Parked, by distinct record (a record parked again counts once).
    pub parked: usize,
    /// Nowhere.
    pub lost: usize,
    /// In two places.
    pub twice: usize,
}

impl Tally {
    /// A tally of `trigger`, nothing counted yet.
    pub fn new(trigger: &str) -> Tally {
        Tally { trigger: trigger.into(), ..Tally::default() }
    }

    /// Counts one record found in `places` (applied, rejected, in a destination, parked).
    pub fn add(&mut self, [applied, rejected, destination, parked]: [bool; 4]) -> &'static str {
        self.sent += 1;
        match [applied, rejected, destination, parked].iter().filter(|b| **b).count() {
            0 => {
                self.lost += 1;
                "lost"
            }
            1 if applied => {
                self.applied += 1;
                "applied"
            }
            1 if rejected => {
                self.rejected += 1;
                "rejected"
            }
            1 if destination => {
                self.destination += 1;
                "destination"
            }
            1 => {
                self.parked += 1;
                "parked"
            }
            _ => {
                self.twice += 1;
                "twice"
            }
        }
    }

    /// Whether every record ended in exactly one place.
    pub fn holds(&self) -> bool {
        self.lost == 0 && self.twice == 0 && self.applied + self.rejected + self.destination + self.parked == self.sent
    }

    /// The figures, for a check's detail.
    pub fn figures(&self) -> String {
        format!(
            "{} sent: {} applied + {} rejected + {} in a destination + {} parked; {} lost, {} twice",
            self.sent, self.applied, self.rejected, self.destination, self.parked, self.lost, self.twice
        )
    }
}

/// What the audit found, with its invariants.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// Distinct bodies sent, by kind and where each ended.
    pub outcomes: BTreeMap<Kind, BTreeMap<String, usize>>,
    /// Messages in the DLQ, by reason.
    pub dlq: BTreeMap<String, usize>,
    /// Receipt rows of applied events, by status.
    pub rows: BTreeMap<String, usize>,
    /// Emails the local SES accepted for this run.
    pub emails: usize,
    /// How each trigger's records ended ("nothing lost"), one row a trigger.
    pub tallies: Vec<Tally>,
    /// The invariants.
    pub checks: Vec<Check>,
}

impl Audit {
    /// Whether every invariant held.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// Outcomes by kind, DLQ reasons, receipt rows and the invariants, as Markdown tables.
    pub fn table(&self) -> String {
        let mut outcomes = Table::new(&["sent (distinct bodies)", "outcome read back", "count"]);
        for (kind, fates) in &self.outcomes {
            for (fate, n) in fates {
                outcomes.row(&[&kind.label(), fate, n]);
            }
        }
        let mut dlq = Table::new(&["in the DLQ, by reason", "count"]);
        for (reason, n) in &self.dlq {
            dlq.row(&[reason, n]);
        }
        let mut rows = Table::new(&["receipt rows of applied events", "count"]);
        for (status, n) in &self.rows {
            rows.row(&[status, n]);
        }
        rows.row(&[&"emails the local SES accepted", &self.emails]);
        let mut checks = Table::new(&["invariant", "holds", "figures"]);
        for c in &self.checks {
            checks.row(&[&c.name, &if c.ok { "yes" } else { "NO" }, &c.detail]);
        }
        format!("{outcomes}\n{dlq}\n{rows}\n{}\n{checks}", self.tallies_table())
    }

    /// The tallies, one row a trigger: where each distinct record sent ended.
    pub fn tallies_table(&self) -> Table {
        let headers =
            ["nothing lost, by trigger", "sent", "applied", "rejected", "in a destination", "parked", "lost", "twice"];
        let mut table = Table::new(&headers);
        for t in &self.tallies {
            table.row(&[&t.trigger, &t.sent, &t.applied, &t.rejected, &t.destination, &t.parked, &t.lost, &t.twice]);
        }
        table
    }
}

/// A Markdown table, built row by row: the demo's and the chaos scenario's reports.
#[derive(Debug, Clone)]
pub struct Table(String);

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        Table(format!("| {} |\n|{}\n", headers.join(" | "), "---|".repeat(headers.len())))
    }

    /// Appends a row.
    pub fn row(&mut self, cells: &[&dyn fmt::Display]) -> &mut Table {
        for cell in cells {
            self.0.push_str(&format!("| {cell} "));
        }
        self.0.push_str("|\n");
        self
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads back everything `plan` could have touched on `pipeline` and checks the invariants;
/// `run` is the workload's run id, whose `@{run}.example.com` addresses the emails are counted
/// for.
///
/// `ambiguous_explained` is how many receipts the run's injected faults can leave `AMBIGUOUS`
/// under at most once (a lost or failed SES answer, an attempt that died holding the marker, a
/// claim whose answer was lost: see `chaos::ambiguous_receipts_explained`); 0 for a run without
/// faults. More `AMBIGUOUS` rows than that, a row whose email marker does not say `Ambiguous`, or
/// no email at all where receipts were due, fail the receipt invariant: otherwise a relay that
/// flagged every receipt ambiguous and sent nothing would pass.
pub async fn audit(pipeline: &Pipeline, plan: &Plan, run: &str, ambiguous_explained: usize) -> Result<Audit> {
    let read = read::ReadBack::read(pipeline, plan, run).await?;
    let mut audit = Audit { emails: read.emails(), ..Audit::default() };
    let fates = fates::Fates::judge(plan, &read, &mut audit.outcomes)?;
    audit.checks.push(fates.nothing_lost());
    audit.tallies.push(fates.tally());
    audit.checks.push(fates.kinds_allowed(audit.outcomes.len()));
    audit.checks.push(fates.one_effect_each(&read));
    audit.checks.push(read::balances(&read));
    audit.checks.push(fates.key_reuse());
    audit.checks.push(fates.dlq(&read, &mut audit.dlq));
    let receipts = receipts::ReceiptTally::count(&fates, &read, &mut audit.rows);
    audit.checks.push(receipts.one_each(audit.emails, ambiguous_explained));
    audit.checks.push(receipts.refusals());
    audit.checks.push(relay_parked_nothing(pipeline).await?);
    Ok(audit)
}

/// The receipts relay's park queue, read back: empty. No receipt fails for good here (a refused
/// address is recorded on its row, a fault retried), so a parked receipt is one no row explains.
async fn relay_parked_nothing(pipeline: &Pipeline) -> Result<Check> {
    let parcels = local::park::parcels(&pipeline.clients, &pipeline.resources.receipts_park_url).await?;
    let count = parcels.len();
    let parked = local::park::distinct(parcels);
    let reasons: Vec<&str> = parked.values().map(|p| p.reason.as_str()).take(3).collect();
    Ok(Check::new(
        "the receipts relay (DynamoDB Streams) parked nothing: no receipt failed for good",
        parked.is_empty(),
        format!("{count} parcels, {} records parked {reasons:?}", parked.len()),
    ))
}

/// Recipients of every email the local SES accepted.
pub fn sent_emails() -> Result<Vec<String>> {
    Ok(effectively_once_effects::testing::sent_emails()?
        .iter()
        .flat_map(|m| m["destinations"]["ToAddresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn a_table_renders_as_markdown() {
        let mut t = Table::new(&["traffic", "count"]);
        t.row(&[&"sent", &3]).row(&[&"failed", &0]);
        assert_eq!(t.to_string(), "| traffic | count |\n|---|---|\n| sent | 3 |\n| failed | 0 |\n");
    }
}
