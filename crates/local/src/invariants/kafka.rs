//! The Kafka path's invariants, read back from the ledger (each account's entries and balance),
//! the payment records in the idempotency table, the on-failure destination and the group's
//! committed offsets: every payment the contract applies posted exactly once, balances and
//! entry counts their sums, rejections recorded and posting nothing, nothing posted for poison,
//! nothing left on the topic or in the destination.

use std::collections::{BTreeMap, HashMap, HashSet};

use payments::{Posting, Rejection};

use super::read::{account, batch_get, s, Account, Item};
use super::Check;
use crate::chaos::kafka::{KafkaRun, PaymentKind};
use crate::error::Result;
use crate::pipeline::Pipeline;

/// What the Kafka path left, read back.
#[derive(Debug, Default)]
pub struct KafkaReadBack {
    accounts: HashMap<String, Account>,
    /// Payment records (`payments#{event_id}`) of the payments and the poison that names one.
    records: HashMap<String, Item>,
    /// Invocation records in the on-failure destination.
    destination: usize,
}

impl KafkaReadBack {
    /// Reads back what `run` could have touched.
    pub async fn read(pipeline: &Pipeline, run: &KafkaRun) -> Result<KafkaReadBack> {
        let clients = &pipeline.clients;
        let mut accounts = HashMap::new();
        for id in &run.plan.accounts {
            accounts.insert(id.clone(), account(clients, &pipeline.resources.ledger_table, id).await?);
        }
        let ids = run.plan.payments.iter().map(|p| &p.event.event_id);
        let ids = ids.chain(run.plan.poison.iter().filter_map(|p| p.event_id.as_ref()));
        let keys = ids.map(|id| format!("payments#{id}")).collect();
        let records = batch_get(clients, &pipeline.resources.idempotency_table, "id", keys).await?;
        let destination = match &run.mapping.settings.failures_url {
            Some(url) => crate::esm::peek_bodies(clients, url).await?.len(),
            None => 0,
        };
        Ok(KafkaReadBack { accounts, records, destination })
    }

    /// The entries posted under `event_id`, on any of the path's accounts.
    fn entries(&self, event_id: &str) -> Vec<(i64, &str)> {
        let entries = self.accounts.values().flat_map(|a| a.entries.iter());
        entries.filter(|e| e.event_id == event_id).map(|e| (e.amount_cents, e.currency.as_str())).collect()
    }

    /// The recorded outcome of `event_id`, if its record completed.
    fn posting(&self, event_id: &str) -> Option<Posting> {
        let record = self.records.get(&format!("payments#{event_id}"))?;
        if s(record, "status").as_deref() != Some("COMPLETED") {
            return None;
        }
        serde_json::from_str(&s(record, "response")?).ok()
    }
}

/// The Kafka path's outcomes by kind and its invariants.
pub fn judge(run: &KafkaRun, read: &KafkaReadBack, outcomes: &mut BTreeMap<String, usize>) -> Vec<Check> {
    vec![
        applied_once(run, read, outcomes),
        balances(run, read),
        rejected(run, read, outcomes),
        poison(run, read, outcomes),
        drained(run, read),
    ]
}

fn applied_once(run: &KafkaRun, read: &KafkaReadBack, outcomes: &mut BTreeMap<String, usize>) -> Check {
    let (mut once, mut lost, mut wrong) = (0, 0, 0);
    for sent in run.plan.payments.iter().filter(|p| p.kind.applies()) {
        let e = &sent.event;
        let fate = match read.entries(&e.event_id).as_slice() {
            [] => {
                lost += 1;
                "LOST"
            }
            [(amount, currency)] if *amount == e.amount_cents && *currency == e.currency => {
                once += 1;
                "applied once"
            }
            _ => {
                wrong += 1;
                "entry WRONG (amount or currency)"
            }
        };
        *outcomes.entry(format!("{} | {fate}", sent.kind.label())).or_default() += 1;
    }
    let explained: HashSet<&str> = run
        .plan
        .openings
        .iter()
        .map(|o| o.event_id.as_str())
        .chain(run.plan.payments.iter().filter(|p| p.kind.applies()).map(|p| p.event.event_id.as_str()))
        .collect();
    let entries = read.accounts.values().flat_map(|a| a.entries.iter());
    let stray = entries.filter(|e| !explained.contains(e.event_id.as_str())).count();
    let due = run.plan.payments.iter().filter(|p| p.kind.applies()).count();
    Check::new(
        "kafka: every payment the contract applies has its ledger entry exactly once (the panicking ones after the fix); none lost, no entry no payment explains",
        once == due && lost == 0 && wrong == 0 && stray == 0,
        format!(
            "{due} payments due ({} written again at a new offset): {once} applied once, {lost} lost, {wrong} wrong, {stray} entries no payment explains",
            run.plan.retries_written().0 + run.plan.retries_written().1
        ),
    )
}

/// Each account's balance and entry count: the sums of the entries read back, and of the
/// payments the plan says apply (its opening credit included): a payment posted twice moves
/// the balance twice, whatever its entry says.
fn balances(run: &KafkaRun, read: &KafkaReadBack) -> Check {
    let mut due: HashMap<&str, (i64, i64)> = HashMap::new();
    let applying = run.plan.payments.iter().filter(|p| p.kind.applies()).map(|p| &p.event);
    for e in run.plan.openings.iter().chain(applying) {
        let sum = due.entry(e.account_id.as_str()).or_default();
        *sum = (sum.0 + e.amount_cents, sum.1 + 1);
    }
    let mut wrong = Vec::new();
    for (id, &(cents, count)) in &due {
        let account = read.accounts.get(*id).cloned().unwrap_or_default();
        let entries = (account.entries.iter().map(|e| e.amount_cents).sum::<i64>(), account.entries.len() as i64);
        let balance = account.balance.as_ref().map(|b| (b.cents, b.count));
        if balance != Some((cents, count)) || entries != (cents, count) {
            wrong.push(format!("{id}: balance {balance:?}, entries {entries:?}, due {:?}", (cents, count)));
        }
    }
    Check::new(
        "kafka: each account's balance and entry count equal the sum and number of its applied payments (opening credit included)",
        wrong.is_empty(),
        format!("{} accounts, {} wrong {}", due.len(), wrong.len(), wrong.join("; ")),
    )
}

fn rejected(run: &KafkaRun, read: &KafkaReadBack, outcomes: &mut BTreeMap<String, usize>) -> Check {
    let (mut right, mut bad) = (0, 0);
    for sent in run.plan.payments.iter().filter(|p| !p.kind.applies()) {
        let posted = !read.entries(&sent.event.event_id).is_empty();
        let reason = match read.posting(&sent.event.event_id) {
            Some(Posting::Rejected { reason }) => Some(reason),
            _ => None,
        };
        let fate = match (posted, sent.kind, reason) {
            (false, PaymentKind::Overdraft, Some(Rejection::InsufficientFunds { .. })) => {
                "rejected: insufficient funds, no entry"
            }
            (false, PaymentKind::CurrencyMismatch, Some(Rejection::CurrencyMismatch { .. })) => {
                "rejected: currency mismatch, no entry"
            }
            (true, _, _) => "POSTED",
            _ => "no rejection RECORDED",
        };
        if fate.contains("no entry") {
            right += 1;
        } else {
            bad += 1;
        }
        *outcomes.entry(format!("{} | {fate}", sent.kind.label())).or_default() += 1;
    }
    Check::new(
        "kafka: overdrafts and currency mismatches rejected for that reason, recorded, no entry",
        bad == 0,
        format!("{} rejected right, {bad} wrong", right),
    )
}

fn poison(run: &KafkaRun, read: &KafkaReadBack, outcomes: &mut BTreeMap<String, usize>) -> Check {
    let mut posted = 0;
    for p in &run.plan.poison {
        let touched =
            p.event_id.as_deref().is_some_and(|id| !read.entries(id).is_empty() || read.posting(id).is_some());
        posted += usize::from(touched);
        let fate = if touched { "POSTED or recorded" } else { "nothing posted" };
        *outcomes.entry(format!("poison: {} | {fate}", p.label)).or_default() += 1;
    }
    // Each poison value was answered permanent at least once: logged and skipped, never a
    // resume point.
    let permanent = run.counts.permanent as usize;
    Check::new(
        "kafka: nothing posted for poison; each failed permanently (logged, skipped by the driver)",
        posted == 0 && permanent >= run.plan.poison.len(),
        format!("{} poison values: {posted} posted, {permanent} permanent failures", run.plan.poison.len()),
    )
}

fn drained(run: &KafkaRun, read: &KafkaReadBack) -> Check {
    let behind: Vec<String> = run
        .ends
        .iter()
        .filter(|(&p, &end)| run.committed.get(p as usize).copied().flatten().is_none_or(|c| c < end))
        .map(|(p, end)| format!("partition {p}: committed {:?} of {end}", run.committed.get(*p as usize)))
        .collect();
    Check::new(
        "kafka: the group committed every partition to its end; the on-failure destination empty after the replay",
        behind.is_empty() && read.destination == 0 && run.replayed.kept == 0,
        format!(
            "{} partitions written, {} behind {}; {} invocation records left ({} batches replayed)",
            run.ends.len(),
            behind.len(),
            behind.join(", "),
            read.destination,
            run.replayed.batches
        ),
    )
}
