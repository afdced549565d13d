//! The stream path's invariants, read back from the orders table, the idempotency table (order
//! records, confirmation markers), the local SES, the on-failure destination (its invocation
//! records, whose ranges are read again from the stream), the park queue (its parcels) and the
//! mappings' checkpoints: every record put stored, in the destination or parked, once; every
//! valid order stored once with its total, at most one confirmation each, poison parked or in
//! the destination and never stored, nothing left unread on the stream.

use std::collections::{BTreeMap, HashMap, HashSet};

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once_effects::SendOutcome;

use super::read::{batch_get, n, s, Item};
use super::{Check, Tally};
use crate::chaos::orders::{email_domain, OrderKind, OrdersRun};
use crate::pipeline::Pipeline;
use crate::workload::REFUSED_PREFIX;
use local::error::{Result, ResultExt};

/// What the stream path left, read back.
#[derive(Debug, Default)]
pub struct OrdersReadBack {
    /// The orders table, whole (it is the run's own), by `pk`.
    pub stored: HashMap<String, Item>,
    /// Order records (`order#{id}`) in the idempotency table.
    pub records: HashMap<String, Item>,
    /// Confirmation markers (`order-email#{id}`).
    pub markers: HashMap<String, Item>,
    /// Emails the local SES accepted for the run's order addresses, by recipient.
    pub emails_to: HashMap<String, usize>,
    /// Invocation records left in the on-failure destination: the data of the records each
    /// names, read again from the stream.
    pub destination: Vec<Vec<Vec<u8>>>,
    /// All of those records' data.
    pub discarded: HashSet<Vec<u8>>,
    /// The records parked, one per `shard:sequence` (a record parked again, by the other
    /// mapping or a redelivery, counted once): their data.
    pub parked: BTreeMap<String, Vec<u8>>,
    /// Parcels in the park queue, copies included.
    pub parcels: usize,
}

impl OrdersReadBack {
    /// Reads back what `run` could have touched.
    pub async fn read(pipeline: &Pipeline, run: &OrdersRun, run_id: &str) -> Result<OrdersReadBack> {
        let clients = &pipeline.clients;
        let idempotency = &pipeline.resources.idempotency_table;
        let mut ids: Vec<&str> = run.plan.orders.iter().map(|o| o.order.order_id.as_str()).collect();
        ids.extend(run.plan.poison.iter().filter_map(|p| p.order_id.as_deref()));
        let keys = |prefix: &str| ids.iter().map(|id| format!("{prefix}#{id}")).collect::<Vec<_>>();
        let bodies = local::esm::peek_bodies(clients, &run.resources.failures_url).await?;
        let mut destination = Vec::new();
        for body in &bodies {
            destination.push(local::esm::discarded_records(clients, body).await?);
        }
        let discarded = destination.iter().flatten().cloned().collect();
        let parcels = local::park::parcels(clients, &run.resources.park_url).await?;
        let count = parcels.len();
        let parked = local::park::distinct(parcels).into_iter();
        let parked = parked.map(|(at, p)| (at, local::park::payload(&p).unwrap_or_default())).collect();
        let domain = format!("@{}", email_domain(run_id));
        let mut emails_to: HashMap<String, usize> = HashMap::new();
        for to in super::sent_emails()?.into_iter().filter(|to| to.ends_with(&domain)) {
            *emails_to.entry(to).or_default() += 1;
        }
        Ok(OrdersReadBack {
            stored: scan(&clients.dynamodb, &run.table).await?,
            records: batch_get(clients, idempotency, "id", keys("order")).await?,
            markers: batch_get(clients, idempotency, "id", keys("order-email")).await?,
            emails_to,
            destination,
            discarded,
            parked,
            parcels: count,
        })
    }

    fn emails(&self) -> usize {
        self.emails_to.values().sum()
    }
}

/// Every item of a table, strongly consistent.
async fn scan(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Result<HashMap<String, Item>> {
    let mut items = HashMap::new();
    let mut start: Option<HashMap<String, AttributeValue>> = None;
    loop {
        let out = dynamodb.scan().table_name(table).consistent_read(true).set_exclusive_start_key(start).send().await;
        let out = out.context(format!("scan {table}"))?;
        for item in out.items() {
            items.insert(s(item, "pk").unwrap_or_default(), item.clone());
        }
        start = out.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(items);
        }
    }
}

/// The stream path's outcomes by kind and its invariants; `ambiguous_explained` is how many
/// `AMBIGUOUS` confirmations the faults left unspent by the receipts can explain.
pub fn judge(
    run: &OrdersRun,
    read: &OrdersReadBack,
    ambiguous_explained: usize,
    outcomes: &mut BTreeMap<String, usize>,
    tally: &mut Tally,
) -> Vec<Check> {
    vec![
        nothing_lost(run, read, tally),
        stored_once(run, read, outcomes),
        confirmations(run, read, ambiguous_explained),
        poison(run, read, outcomes),
        Check::new(
            "orders: nothing left unprocessed on the stream (both mappings at every shard's end, split children included)",
            run.unread == 0,
            format!("{} records unread over {} shards", run.unread, run.shards),
        ),
    ]
}

/// Every distinct record put (each order, each poison record; a producer retry is the same
/// record) is stored, in the on-failure destination or parked, once. The destination names
/// ranges: a stored order in a range kept for the record that always panics is stored, and a
/// poison record there that a delivery parked is parked. Stored and parked is twice.
fn nothing_lost(run: &OrdersRun, read: &OrdersReadBack, tally: &mut Tally) -> Check {
    let parked: HashSet<&[u8]> = read.parked.values().map(Vec::as_slice).collect();
    let orders = run.plan.orders.iter().map(|o| (o.data.as_slice(), Some(o.order.order_id.as_str())));
    let poison = run.plan.poison.iter().map(|p| (p.data.as_slice(), p.order_id.as_deref()));
    let mut sent = HashSet::new();
    for (data, order_id) in orders.chain(poison) {
        sent.insert(data);
        let stored = order_id.is_some_and(|id| read.stored.contains_key(&format!("order#{id}")));
        let parked = parked.contains(data);
        let discarded = read.discarded.contains(data) && !stored && !parked;
        tally.add([stored, false, discarded, parked]);
    }
    let strays = parked.iter().filter(|data| !sent.contains(*data)).count();
    Check::new(
        "orders: nothing lost: every record put is stored, in the on-failure destination or parked, once",
        tally.holds() && strays == 0,
        format!(
            "{}; {} parcels in the park queue, {} records parked, {strays} no record put explains",
            tally.figures(),
            read.parcels,
            read.parked.len()
        ),
    )
}

fn stored_once(run: &OrdersRun, read: &OrdersReadBack, outcomes: &mut BTreeMap<String, usize>) -> Check {
    let (mut lost, mut wrong, mut stored) = (0, 0, 0);
    let mut explained = HashSet::new();
    for sent in run.plan.orders.iter().filter(|o| o.kind.valid()) {
        let pk = format!("order#{}", sent.order.order_id);
        let item = read.stored.get(&pk);
        let record = read.records.get(&pk).and_then(|r| s(r, "status"));
        let fate = match item {
            None => {
                lost += 1;
                "LOST"
            }
            Some(item) => {
                let right = n(item, "total_cents") == Some(sent.order.total_cents)
                    && s(item, "order_id").as_deref() == Some(sent.order.order_id.as_str())
                    && record.as_deref() == Some("COMPLETED");
                wrong += usize::from(!right);
                stored += usize::from(right);
                explained.insert(pk);
                if right {
                    "stored, total right"
                } else {
                    "stored WRONG (total, id or record)"
                }
            }
        };
        *outcomes.entry(format!("{} | {fate}", sent.kind.label())).or_default() += 1;
    }
    let stray = read.stored.keys().filter(|pk| !explained.contains(*pk)).count();
    let valid = run.plan.orders.iter().filter(|o| o.kind.valid()).count();
    Check::new(
        "orders: every valid order stored exactly once, its total right; none lost, none stored that no valid order explains",
        lost == 0 && wrong == 0 && stray == 0 && stored == valid,
        format!(
            "{valid} valid orders ({} producer retries, {} under another key): {stored} stored right, {lost} lost, {wrong} wrong, {stray} items no valid order explains",
            run.plan.retries, run.plan.rekeyed
        ),
    )
}

/// The confirmation of one stored order, from its marker: `(status, wrong)`.
fn confirmation(marker: Option<&Item>, refused: bool, got: usize) -> (&'static str, bool) {
    let outcome = marker
        .filter(|m| s(m, "status").as_deref() == Some("COMPLETED"))
        .and_then(|m| s(m, "response"))
        .and_then(|r| serde_json::from_str::<SendOutcome>(&r).ok());
    match outcome {
        Some(SendOutcome::Sent { .. }) => ("SENT", refused || got != 1),
        Some(SendOutcome::Failed { .. }) => ("FAILED", !refused || got != 0),
        Some(SendOutcome::Ambiguous) => ("AMBIGUOUS", got > usize::from(!refused)),
        _ => ("no completed marker", true),
    }
}

fn confirmations(run: &OrdersRun, read: &OrdersReadBack, explained: usize) -> Check {
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    let mut bad = 0;
    for sent in &run.plan.orders {
        let got = read.emails_to.get(&sent.order.email).copied().unwrap_or(0);
        if !read.stored.contains_key(&format!("order#{}", sent.order.order_id)) {
            bad += usize::from(got > 0);
            continue;
        }
        let refused = sent.order.email.starts_with(REFUSED_PREFIX);
        let (status, wrong) =
            confirmation(read.markers.get(&format!("order-email#{}", sent.order.order_id)), refused, got);
        *statuses.entry(status).or_default() += 1;
        bad += usize::from(wrong);
    }
    let known: HashSet<&str> = run.plan.orders.iter().map(|o| o.order.email.as_str()).collect();
    let unknown: usize = read.emails_to.iter().filter(|(to, _)| !known.contains(to.as_str())).map(|(_, n)| n).sum();
    let doubled = read.emails_to.values().filter(|n| **n > 1).count();
    let ambiguous = statuses.get("AMBIGUOUS").copied().unwrap_or(0);
    let sent = statuses.get("SENT").copied().unwrap_or(0);
    let figures: Vec<String> = statuses.iter().map(|(k, v)| format!("{v} {k}")).collect();
    Check::new(
        "orders: at most one confirmation per order, one per stored order SENT, none refused or for orders not stored; AMBIGUOUS only as the faults explain",
        bad == 0 && doubled == 0 && unknown == 0 && ambiguous <= explained && (sent > 0 || read.stored.is_empty()),
        format!(
            "{} emails for {} orders stored ({}); {bad} orders wrong, {doubled} recipients twice, {unknown} to no order; {ambiguous} AMBIGUOUS of {explained} the faults explain",
            read.emails(),
            read.stored.len(),
            figures.join(", ")
        ),
    )
}

fn poison(run: &OrdersRun, read: &OrdersReadBack, outcomes: &mut BTreeMap<String, usize>) -> Check {
    let never = run.plan.never_stored();
    let parked: HashSet<&[u8]> = read.parked.values().map(Vec::as_slice).collect();
    let (mut in_destination, mut in_park, mut missing, mut stored) = (0, 0, 0, 0);
    for (data, label, order_id) in &never {
        let fate = if parked.contains(*data) {
            in_park += 1;
            "parked (read back from the park queue)"
        } else if read.discarded.contains(*data) {
            in_destination += 1;
            "in the on-failure destination"
        } else {
            missing += 1;
            "UNACCOUNTED"
        };
        let was_stored = order_id.is_some_and(|id| read.stored.contains_key(&format!("order#{id}")));
        stored += usize::from(was_stored);
        *outcomes.entry(format!("{label} | {fate}")).or_default() += 1;
    }
    // Each invocation record left names at least one record that must never be stored: the
    // replay cleared every batch the faults alone had discarded.
    let unexplained =
        read.destination.iter().filter(|batch| !batch.iter().any(|d| never.iter().any(|(p, _, _)| p == d))).count();
    Check::new(
        "orders: every poison record parked or in the on-failure destination, none stored; the destination holds only batches with poison",
        missing == 0 && stored == 0 && unexplained == 0,
        format!(
            "{} poison records ({} orders panicking every time): {in_park} parked, {in_destination} in the destination, {missing} unaccounted, {stored} stored; {} invocation records left after the replay ({} records), {} replayed",
            never.len(),
            run.plan.orders.iter().filter(|o| o.kind == OrderKind::PanicAlways).count(),
            read.destination.len(),
            read.discarded.len(),
            run.replayed.batches,
        ),
    )
}
