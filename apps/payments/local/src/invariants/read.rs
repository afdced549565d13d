//! What the pipeline left, read back by key: the ledger's accounts (entries and balance), the
//! recorded outcomes, receipt rows and email markers, the DLQ, and the emails the local SES
//! accepted.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use futures_util::StreamExt;

use super::Check;
use crate::pipeline::Pipeline;
use crate::resources::Clients;
use crate::workload::Plan;
use local::error::{Result, ResultExt};

pub(super) type Item = HashMap<String, AttributeValue>;

/// One ledger entry as read back.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub event_id: String,
    pub amount_cents: i64,
    pub currency: String,
}

/// A balance item: cents, entry count, currency.
#[derive(Debug, Clone)]
pub(super) struct Balance {
    pub cents: i64,
    pub count: i64,
    pub currency: String,
}

/// One account as read back: its entries and its balance item.
#[derive(Debug, Clone, Default)]
pub(super) struct Account {
    pub entries: Vec<Entry>,
    pub balance: Option<Balance>,
}

/// Everything a run's plan could have touched, as the tables, the DLQ and the local SES hold it.
#[derive(Debug, Default)]
pub(super) struct ReadBack {
    /// Accounts by id.
    pub ledger: HashMap<String, Account>,
    /// Recorded outcomes by key (`payments#{event_id}`).
    pub records: HashMap<String, Item>,
    /// Receipt rows by key (`receipt#{event_id}`).
    pub rows: HashMap<String, Item>,
    /// Email markers by key (`email#{event_id}`).
    pub markers: HashMap<String, Item>,
    /// The DLQ's bodies, copies included.
    pub dlq_bodies: Vec<String>,
    /// The DLQ's distinct bodies.
    pub dlq: HashSet<String>,
    /// Emails accepted for this run, by recipient.
    pub emails_to: HashMap<String, usize>,
}

pub(super) fn s(item: &Item, name: &str) -> Option<String> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    }
}

pub(super) fn n(item: &Item, name: &str) -> Option<i64> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse().ok(),
        _ => None,
    }
}

impl ReadBack {
    /// Reads back what `plan` (of the workload `run`) could have touched on `pipeline`.
    pub async fn read(pipeline: &Pipeline, plan: &Plan, run: &str) -> Result<ReadBack> {
        let (clients, resources) = (&pipeline.clients, &pipeline.resources);
        let keys = |prefix: &str, ids: &[&str]| ids.iter().map(|id| format!("{prefix}{id}")).collect::<Vec<_>>();
        let ids: Vec<&str> = plan.event_ids().into_iter().collect();
        let mut with_email: Vec<&str> =
            plan.sent.iter().filter(|s| s.event.receipt_email.is_some()).map(|s| s.event.event_id.as_str()).collect();
        with_email.sort();
        with_email.dedup();
        let idempotency = resources.idempotency_table.as_str();
        let dlq_bodies = local::esm::peek_bodies(clients, &resources.dlq_url).await?;
        Ok(ReadBack {
            ledger: ledger(clients, &resources.ledger_table, plan).await?,
            records: batch_get(clients, idempotency, "id", keys("payments#", &ids)).await?,
            rows: batch_get(clients, &resources.outbox_table, "pk", keys("receipt#", &with_email)).await?,
            markers: batch_get(clients, idempotency, "id", keys("email#", &with_email)).await?,
            dlq: dlq_bodies.iter().cloned().collect(),
            dlq_bodies,
            emails_to: emails_to(run)?,
        })
    }

    /// Emails the local SES accepted for this run.
    pub fn emails(&self) -> usize {
        self.emails_to.values().sum()
    }
}

/// The emails the local SES accepted for the run, by recipient. The workload's addresses are
/// all at `{run}.example.com`: an exact domain, so another run's mail (the local SES keeps it
/// all) never counts here.
fn emails_to(run: &str) -> Result<HashMap<String, usize>> {
    let domain = format!("@{run}.example.com");
    let mut emails_to: HashMap<String, usize> = HashMap::new();
    for to in super::sent_emails()?.into_iter().filter(|to| to.ends_with(&domain)) {
        *emails_to.entry(to).or_default() += 1;
    }
    Ok(emails_to)
}

/// Every account any body of `plan` names, a few queries at a time.
async fn ledger(clients: &Clients, table: &str, plan: &Plan) -> Result<HashMap<String, Account>> {
    let read: Vec<Result<(String, Account)>> = futures_util::stream::iter(plan.accounts())
        .map(|a| async move { account(clients, table, a).await.map(|acc| (a.to_owned(), acc)) })
        .buffer_unordered(4)
        .collect()
        .await;
    read.into_iter().collect()
}

/// Every item of one account's partition, read strongly consistent.
pub(super) async fn account(clients: &Clients, table: &str, account_id: &str) -> Result<Account> {
    let mut account = Account::default();
    let mut start = None;
    loop {
        let out = clients
            .dynamodb
            .query()
            .table_name(table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(format!("account#{account_id}")))
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .context(format!("query {table}"))?;
        for item in out.items() {
            let sk = s(item, "sk").unwrap_or_default();
            if sk == "balance" {
                account.balance = Some(Balance {
                    cents: n(item, "balance_cents").unwrap_or(i64::MIN),
                    count: n(item, "entry_count").unwrap_or(-1),
                    currency: s(item, "currency").unwrap_or_default(),
                });
            } else if let Some(id) = sk.strip_prefix("entry#") {
                account.entries.push(Entry {
                    event_id: s(item, "event_id").unwrap_or_else(|| id.to_owned()),
                    amount_cents: n(item, "amount_cents").unwrap_or(0),
                    currency: s(item, "currency").unwrap_or_default(),
                });
            }
        }
        start = out.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(account);
        }
    }
}

/// Items by their string partition key `key`, a hundred keys per request, strongly consistent.
pub(super) async fn batch_get(
    clients: &Clients,
    table: &str,
    key: &str,
    ids: Vec<String>,
) -> Result<HashMap<String, Item>> {
    let mut found = HashMap::new();
    for chunk in ids.chunks(100) {
        let keys: Vec<Item> =
            chunk.iter().map(|id| HashMap::from([(key.to_owned(), AttributeValue::S(id.clone()))])).collect();
        let mut request = Some(KeysAndAttributes::builder().set_keys(Some(keys)).consistent_read(true).build()?);
        while let Some(r) = request.take() {
            let out = clients
                .dynamodb
                .batch_get_item()
                .request_items(table, r)
                .send()
                .await
                .context(format!("batch get {table}"))?;
            for item in out.responses().and_then(|r| r.get(table)).into_iter().flatten() {
                if let Some(id) = s(item, key) {
                    found.insert(id, item.clone());
                }
            }
            request = out.unprocessed_keys().and_then(|u| u.get(table)).filter(|k| !k.keys().is_empty()).cloned();
        }
    }
    Ok(found)
}

/// Balances: the sum and count of the entries read back, one currency, never below zero.
pub(super) fn balances(read: &ReadBack) -> Check {
    let mut wrong = 0;
    for a in read.ledger.values() {
        let sum: i64 = a.entries.iter().map(|e| e.amount_cents).sum();
        let ok = match &a.balance {
            None => a.entries.is_empty(),
            Some(b) => {
                b.cents == sum
                    && b.count == a.entries.len() as i64
                    && b.cents >= 0
                    && a.entries.iter().all(|e| e.currency == b.currency)
            }
        };
        wrong += usize::from(!ok);
    }
    Check::new(
        "balances = sums of the entries read back, one currency, never below zero",
        wrong == 0,
        format!("{} accounts, {wrong} wrong", read.ledger.len()),
    )
}
