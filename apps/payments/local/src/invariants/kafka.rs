//! The Kafka path's invariants, read back from the ledger (each account's entries and balance),
//! the payment records in the idempotency table, the on-failure destination, the park queue
//! (its parcels) and the group's committed offsets: every record written applied, rejected or
//! parked, once; every payment the contract applies posted exactly once, balances and entry
//! counts their sums, rejections recorded and posting nothing, poison parked and nothing posted
//! for it, nothing left on the topic or in the destination.

use std::collections::{BTreeMap, HashMap, HashSet};

use payments::{Posting, Rejection};

use super::read::{account, batch_get, s, Account, Item};
use super::{Check, Tally};
use crate::chaos::kafka::plan::Poison;
use crate::chaos::kafka::{KafkaRun, PaymentKind};
use crate::pipeline::Pipeline;
use local::error::Result;

/// What the Kafka path left, read back.
#[derive(Debug, Default)]
pub struct KafkaReadBack {
    accounts: HashMap<String, Account>,
    /// Payment records (`payments#{event_id}`) of the payments and the poison that names one.
    records: HashMap<String, Item>,
    /// Invocation records in the on-failure destination.
    destination: usize,
    /// The records parked, one per `topic-partition@offset` (a record parked again after a
    /// redelivery counted once): their values.
    pub parked: BTreeMap<String, Vec<u8>>,
    /// Parcels in the park queue, copies included.
    pub parcels: usize,
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
            Some(url) => local::esm::peek_bodies(clients, url).await?.len(),
            None => 0,
        };
        let parcels = local::park::parcels(clients, &pipeline.resources.kafka_park_url).await?;
        let count = parcels.len();
        let parked = local::park::distinct(parcels).into_iter();
        let parked = parked.map(|(at, p)| (at, local::park::payload(&p).unwrap_or_default())).collect();
        Ok(KafkaReadBack { accounts, records, destination, parked, parcels: count })
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

    /// Whether anything was posted or recorded for poison `p`: for key reuse, any entry under
    /// its id but the opening credit's.
    fn posted_for(&self, run: &KafkaRun, p: &Poison) -> bool {
        let Some(id) = p.event_id.as_deref() else { return false };
        if p.reuses {
            let opening = run.plan.openings.iter().find(|o| o.event_id == id);
            let expected = opening.map(|o| vec![(o.amount_cents, o.currency.as_str())]);
            return Some(self.entries(id)) != expected;
        }
        !self.entries(id).is_empty() || self.posting(id).is_some()
    }
}

/// The Kafka path's outcomes by kind and its invariants; its "nothing lost" figures into
/// `tally`.
pub fn judge(
    run: &KafkaRun,
    read: &KafkaReadBack,
    outcomes: &mut BTreeMap<String, usize>,
    tally: &mut Tally,
) -> Vec<Check> {
    vec![
        nothing_lost(run, read, tally),
        applied_once(run, read, outcomes),
        balances(run, read),
        rejected(run, read, outcomes),
        poison(run, read, outcomes),
        drained(run, read),
    ]
}

/// Every distinct record written (each payment, a producer retry the same record; each poison
/// value) is applied, rejected or parked, once: parked and posted is twice. The on-failure
/// destination is not counted here: the replay empties it (`drained` checks that it did).
fn nothing_lost(run: &KafkaRun, read: &KafkaReadBack, tally: &mut Tally) -> Check {
    let parked: HashSet<&[u8]> = read.parked.values().map(Vec::as_slice).collect();
    let mut sent: HashSet<Vec<u8>> = HashSet::new();
    for p in &run.plan.payments {
        let value = serde_json::to_vec(&p.event).unwrap_or_default();
        let applied = !read.entries(&p.event.event_id).is_empty();
        let rejected = !applied && matches!(read.posting(&p.event.event_id), Some(Posting::Rejected { .. }));
        tally.add([applied, rejected, false, parked.contains(value.as_slice())]);
        sent.insert(value);
    }
    for p in &run.plan.poison {
        tally.add([read.posted_for(run, p), false, false, parked.contains(p.value.as_slice())]);
        sent.insert(p.value.clone());
    }
    let strays = parked.iter().filter(|value| !sent.contains(**value)).count();
    Check::new(
        "kafka: nothing lost: every record written is applied, rejected or parked, once",
        tally.holds() && strays == 0,
        format!(
            "{}; {} parcels in the park queue, {} records parked, {strays} no record written explains",
            tally.figures(),
            read.parcels,
            read.parked.len()
        ),
    )
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
    let parked: HashSet<&[u8]> = read.parked.values().map(Vec::as_slice).collect();
    let (mut posted, mut unparked) = (0, 0);
    for p in &run.plan.poison {
        let touched = read.posted_for(run, p);
        posted += usize::from(touched);
        let in_park = parked.contains(p.value.as_slice());
        unparked += usize::from(!in_park);
        let fate = match (touched, in_park) {
            (false, true) => "parked, nothing posted",
            (false, false) => "NOT PARKED, nothing posted",
            (true, _) => "POSTED or recorded",
        };
        *outcomes.entry(format!("poison: {} | {fate}", p.label)).or_default() += 1;
    }
    // Each poison value failed permanently and was parked before its partition went past it.
    let permanent = run.counts.permanent as usize;
    Check::new(
        "kafka: nothing posted for poison; each failed permanently and was parked (read back from the park queue)",
        posted == 0 && unparked == 0 && permanent >= run.plan.poison.len(),
        format!(
            "{} poison values: {posted} posted, {unparked} not parked, {permanent} permanent failures",
            run.plan.poison.len()
        ),
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
