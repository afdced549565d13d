//! The invariants of a run, read back from what the pipeline left: ledger entries and balances,
//! the outcomes recorded in the idempotency table, outbox rows, email markers, the DLQ and the
//! emails the local SES accepted. Never from the plan's expectations: a plan says what was sent,
//! the tables say what came of it.
//!
//! Every read is by key (a `Query` per account, `BatchGetItem` per hundred records), so the
//! audit costs what the run sent, not what the tables hold.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use effectively_once_effects::{PaymentEvent, Posting, Receipt, Rejection};
use futures_util::StreamExt;

use crate::demo::{sent_emails, Check};
use crate::esm;
use crate::resources::{Clients, Resources};
use crate::workload::{Fate, Kind, Plan, REFUSED_PREFIX};

type Item = HashMap<String, AttributeValue>;

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
        let mut t = String::from("| sent (distinct bodies) | outcome read back | count |\n|---|---|---|\n");
        for (kind, fates) in &self.outcomes {
            for (fate, n) in fates {
                t.push_str(&format!("| {} | {fate} | {n} |\n", kind.label()));
            }
        }
        t.push_str("\n| in the DLQ, by reason | count |\n|---|---|\n");
        for (reason, n) in &self.dlq {
            t.push_str(&format!("| {reason} | {n} |\n"));
        }
        t.push_str("\n| receipt rows of applied events | count |\n|---|---|\n");
        for (status, n) in &self.rows {
            t.push_str(&format!("| {status} | {n} |\n"));
        }
        t.push_str(&format!("| emails the local SES accepted | {} |\n", self.emails));
        t.push_str("\n| invariant | holds | figures |\n|---|---|---|\n");
        for c in &self.checks {
            t.push_str(&format!("| {} | {} | {} |\n", c.name, if c.ok { "yes" } else { "NO" }, c.detail));
        }
        t
    }
}

/// One ledger entry as read back.
#[derive(Debug, Clone)]
struct Entry {
    event_id: String,
    amount_cents: i64,
    currency: String,
}

/// One account as read back: its entries and its balance item.
#[derive(Debug, Clone, Default)]
struct Account {
    entries: Vec<Entry>,
    balance: Option<(i64, i64, String)>,
}

fn s(item: &Item, name: &str) -> Option<String> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    }
}

fn n(item: &Item, name: &str) -> Option<i64> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse().ok(),
        _ => None,
    }
}

/// Every item of one account's partition, read strongly consistent.
async fn account(clients: &Clients, table: &str, account_id: &str) -> Result<Account, String> {
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
            .map_err(|e| format!("query {table}: {}", e.into_service_error()))?;
        for item in out.items() {
            let sk = s(item, "sk").unwrap_or_default();
            if sk == "balance" {
                account.balance = Some((
                    n(item, "balance_cents").unwrap_or(i64::MIN),
                    n(item, "entry_count").unwrap_or(-1),
                    s(item, "currency").unwrap_or_default(),
                ));
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
async fn batch_get(
    clients: &Clients,
    table: &str,
    key: &str,
    ids: Vec<String>,
) -> Result<HashMap<String, Item>, String> {
    let mut found = HashMap::new();
    for chunk in ids.chunks(100) {
        let keys: Vec<Item> =
            chunk.iter().map(|id| HashMap::from([(key.to_owned(), AttributeValue::S(id.clone()))])).collect();
        let mut request = Some(
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(true)
                .build()
                .map_err(|e| e.to_string())?,
        );
        while let Some(r) = request.take() {
            let out = clients
                .dynamodb
                .batch_get_item()
                .request_items(table, r)
                .send()
                .await
                .map_err(|e| format!("batch get {table}: {}", e.into_service_error()))?;
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

fn rejection_label(reason: &Rejection) -> &'static str {
    match reason {
        Rejection::CurrencyMismatch { .. } => "rejected: currency mismatch",
        Rejection::InsufficientFunds { .. } => "rejected: insufficient funds",
        #[allow(unreachable_patterns)]
        _ => "rejected: other",
    }
}

/// Reads back everything `plan` could have touched and checks the invariants; `run` is the
/// workload's run id, whose `@{run}.example.com` addresses the emails are counted for.
///
/// `ambiguous_explained` is how many receipts the run's injected faults can leave `AMBIGUOUS`
/// under at most once (a lost or failed SES answer, an attempt that died holding the marker, a
/// claim whose answer was lost: see `chaos::ambiguous_receipts_explained`); 0 for a run without
/// faults. More `AMBIGUOUS` rows than that, a row whose email marker does not say `Ambiguous`, or
/// no email at all where receipts were due, fail the receipt invariant: otherwise a relay that
/// flagged every receipt ambiguous and sent nothing would pass.
pub async fn audit(
    clients: &Clients,
    resources: &Resources,
    plan: &Plan,
    run: &str,
    ambiguous_explained: usize,
) -> Result<Audit, String> {
    let mut audit = Audit::default();

    // Ledger: every account any body names, a few queries at a time.
    let ledger_table = resources.ledger_table.as_str();
    let accounts: Vec<&str> = plan.accounts().into_iter().collect();
    let read: Vec<Result<(String, Account), String>> = futures_util::stream::iter(accounts)
        .map(|a| async move { account(clients, ledger_table, a).await.map(|acc| (a.to_owned(), acc)) })
        .buffer_unordered(4)
        .collect()
        .await;
    let ledger: HashMap<String, Account> = read.into_iter().collect::<Result<_, _>>()?;

    // Recorded outcomes (`payments#{event_id}`), receipt rows and email markers.
    let ids: Vec<String> = plan.event_ids().into_iter().map(str::to_owned).collect();
    let records =
        batch_get(clients, &resources.idempotency_table, "id", ids.iter().map(|id| format!("payments#{id}")).collect())
            .await?;
    let with_email: Vec<String> = {
        let mut v: Vec<String> =
            plan.sent.iter().filter(|s| s.event.receipt_email.is_some()).map(|s| s.event.event_id.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let rows = batch_get(
        clients,
        &resources.outbox_table,
        "pk",
        with_email.iter().map(|id| format!("receipt#{id}")).collect(),
    )
    .await?;
    let markers = batch_get(
        clients,
        &resources.idempotency_table,
        "id",
        with_email.iter().map(|id| format!("email#{id}")).collect(),
    )
    .await?;
    let dlq_bodies = esm::peek_bodies(clients, &resources.dlq_url).await?;
    let mut in_dlq: HashMap<&str, usize> = HashMap::new();
    for b in &dlq_bodies {
        *in_dlq.entry(b.as_str()).or_default() += 1;
    }
    let mut emails_to: HashMap<String, usize> = HashMap::new();
    // The workload's addresses are all at `{run}.example.com`: an exact domain, so another run's
    // mail (the local SES keeps it all) never counts here.
    let domain = format!("@{run}.example.com");
    for to in sent_emails()?.into_iter().filter(|to| to.ends_with(&domain)) {
        *emails_to.entry(to).or_default() += 1;
    }
    audit.emails = emails_to.values().sum();

    // Bodies by event id and by text: the lookups below stay linear in what was sent.
    let mut by_id: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut by_body: HashMap<&str, usize> = HashMap::new();
    for (i, sent) in plan.sent.iter().enumerate() {
        by_id.entry(sent.event.event_id.as_str()).or_default().push(i);
        by_body.insert(sent.body.as_str(), i);
    }

    // Each distinct body: applied (its entry, on its account, with its amount and currency),
    // rejected (a recorded rejection of its payload), or in the DLQ; exactly one.
    let hasher = effectively_once::Config::default();
    let entry_of = |e: &PaymentEvent| {
        ledger
            .get(&e.account_id)
            .and_then(|a| a.entries.iter().find(|x| x.event_id == e.event_id))
            .map(|x| x.amount_cents == e.amount_cents && x.currency == e.currency)
    };
    let (mut applied, mut rejected, mut dlq, mut lost, mut twice) = (0, 0, 0, 0, 0);
    let mut forbidden: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut took_effect: HashMap<&str, usize> = HashMap::new();
    let mut fate_of: Vec<Option<Fate>> = Vec::with_capacity(plan.sent.len());
    let mut currency_races: HashMap<&str, usize> = HashMap::new();
    for sent in &plan.sent {
        let e = &sent.event;
        let is_applied = entry_of(e) == Some(true);
        let record = records.get(&format!("payments#{}", e.event_id));
        let hash = hasher.payload_hash(e).map_err(|e| e.to_string())?;
        let posting = record
            .filter(|r| {
                s(r, "status").as_deref() == Some("COMPLETED")
                    && s(r, "payload_hash").is_some_and(|stored| hash.matches(&stored))
            })
            .and_then(|r| s(r, "response"))
            .and_then(|r| serde_json::from_str::<Posting>(&r).ok());
        let rejection = match &posting {
            Some(Posting::Rejected { reason }) if !is_applied => Some(reason),
            _ => None,
        };
        let is_dlq = in_dlq.contains_key(sent.body.as_str());
        let fates: Vec<(Fate, String)> = [
            is_applied.then(|| (Fate::Applied, "applied".to_owned())),
            rejection.map(|r| (Fate::Rejected, rejection_label(r).to_owned())),
            is_dlq.then(|| (Fate::Dlq, "in the DLQ".to_owned())),
        ]
        .into_iter()
        .flatten()
        .collect();
        let label = match fates.as_slice() {
            [] => {
                lost += 1;
                "LOST (not applied, rejected or in the DLQ)".to_owned()
            }
            [(fate, label)] => {
                match fate {
                    Fate::Applied => applied += 1,
                    Fate::Rejected => rejected += 1,
                    Fate::Dlq => dlq += 1,
                }
                // A rejection needs a reason the contract gives this body too: a ledger that
                // refused a funding credit "for insufficient funds" has a rejection recorded,
                // read back, and wrong.
                let reason_ok = rejection.is_none_or(|r| sent.kind.may_be_rejected_for(e, r));
                if !sent.kind.allows(*fate) || !reason_ok {
                    *forbidden.entry(sent.kind.label()).or_default() += 1;
                }
                label.clone()
            }
            _ => {
                twice += 1;
                format!("TWICE ({})", fates.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>().join(" and "))
            }
        };
        let fate = (fates.len() == 1).then(|| fates[0].0);
        if matches!(fate, Some(Fate::Applied | Fate::Rejected)) {
            *took_effect.entry(e.event_id.as_str()).or_default() += 1;
        }
        fate_of.push(fate);
        if matches!(sent.kind, Kind::RacedCredit | Kind::CurrencyMismatch) {
            *currency_races.entry(e.account_id.as_str()).or_default() += usize::from(fate == Some(Fate::Applied));
        }
        *audit.outcomes.entry(sent.kind).or_default().entry(label).or_default() += 1;
    }
    // A currency race's account takes exactly one of its two credits: the first sets the
    // currency and the other is rejected. Both rejected is a ledger that refused a fresh account.
    let races_not_one = currency_races.values().filter(|applied| **applied != 1).count();
    if races_not_one > 0 {
        forbidden.insert("currency race without exactly one credit applied", races_not_one);
    }
    let check = |name: &str, ok: bool, detail: String| Check { name: name.into(), ok, detail };
    audit.checks.push(check(
        "nothing lost: every body sent is applied, rejected (record read back) or in the DLQ, once",
        lost == 0 && twice == 0,
        format!(
            "{} bodies of {} event ids: {applied} applied + {rejected} rejected + {dlq} in the DLQ; {lost} lost, {twice} twice",
            plan.sent.len(),
            ids.len()
        ),
    ));
    audit.checks.push(check(
        "each kind ends as the contract allows",
        forbidden.is_empty(),
        if forbidden.is_empty() {
            format!("{} kinds", audit.outcomes.len())
        } else {
            format!("not allowed: {forbidden:?}")
        },
    ));

    // One event id, one effect: across bodies and across accounts.
    let mut accounts_of: HashMap<&str, usize> = HashMap::new();
    for a in ledger.values() {
        for e in &a.entries {
            *accounts_of.entry(e.event_id.as_str()).or_default() += 1;
        }
    }
    let sent_ids: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let strays = accounts_of.keys().filter(|id| !sent_ids.contains(*id)).count();
    let on_two = accounts_of.values().filter(|n| **n > 1).count() + took_effect.values().filter(|n| **n > 1).count();
    audit.checks.push(check(
        "an event id takes effect once, across bodies and accounts; no entry nobody sent",
        on_two == 0 && strays == 0,
        format!("{on_two} ids with two effects, {strays} entries of unknown ids"),
    ));

    // Balances: the sum and count of the entries read back, one currency, never below zero.
    let mut wrong = 0;
    for a in ledger.values() {
        let sum: i64 = a.entries.iter().map(|e| e.amount_cents).sum();
        let ok = match &a.balance {
            None => a.entries.is_empty(),
            Some((cents, count, currency)) => {
                *cents == sum
                    && *count == a.entries.len() as i64
                    && *cents >= 0
                    && a.entries.iter().all(|e| e.currency == *currency)
            }
        };
        wrong += usize::from(!ok);
    }
    audit.checks.push(check(
        "balances = sums of the entries read back, one currency, never below zero",
        wrong == 0,
        format!("{} accounts, {wrong} wrong", ledger.len()),
    ));

    // Key reuse: the copies in the DLQ, nothing of theirs posted or written to the outbox.
    let (mut copies_in_dlq, mut displaced, mut reuse_bad) = (0, 0, 0);
    for (i, sent) in plan.sent.iter().enumerate().filter(|(_, s)| s.reuses) {
        let id = sent.event.event_id.as_str();
        let original = by_id.get(id).into_iter().flatten().copied().find(|o| !plan.sent[*o].reuses);
        match (fate_of[i], original.and_then(|o| fate_of[o])) {
            (Some(Fate::Dlq), Some(Fate::Applied | Fate::Rejected)) => copies_in_dlq += 1,
            (Some(Fate::Applied | Fate::Rejected), Some(Fate::Dlq)) => displaced += 1,
            _ => reuse_bad += 1,
        }
    }
    let reuses = plan.sent.iter().filter(|s| s.reuses).count();
    audit.checks.push(check(
        "key reuse moves nothing: one body per reused id takes effect, the others are in the DLQ",
        reuse_bad == 0,
        format!("{reuses} reused ids: {copies_in_dlq} copies in the DLQ, {displaced} arrived first (original in the DLQ), {reuse_bad} otherwise"),
    ));

    // The DLQ: poison, key-reuse copies and records that panic every time, each with its reason.
    let mut unexplained = 0;
    for body in &dlq_bodies {
        let reason = match PaymentEvent::parse(body) {
            Err(e) => format!("poison: {e}"),
            Ok(event) => match by_body.get(body.as_str()).map(|i| &plan.sent[*i]) {
                Some(s) if s.kind == Kind::PanicAlways => "handler panicked on every delivery".to_owned(),
                Some(_) if took_effect.get(event.event_id.as_str()).is_some_and(|n| *n > 0) => {
                    "event id reused with another payload (key reuse)".to_owned()
                }
                _ => {
                    unexplained += 1;
                    "valid event, retries exhausted".to_owned()
                }
            },
        };
        *audit.dlq.entry(reason).or_default() += 1;
    }
    let poison_missing = plan.poison.iter().filter(|p| !in_dlq.contains_key(p.as_str())).count();
    audit.checks.push(check(
        "the DLQ holds poison, key-reuse copies and always-panicking records only, each with its reason",
        unexplained == 0 && poison_missing == 0,
        format!("{} messages, {unexplained} unexplained, {poison_missing} poison missing", dlq_bodies.len()),
    ));

    // Receipts: the applied body's row, its one email (none for a refused address, row FAILED);
    // no email for bodies that did not apply; no recipient twice.
    let (mut row_bad, mut email_bad, mut reason_leaks) = (0, 0, 0);
    // AMBIGUOUS rows, those whose marker does not say so, and receipts due (an address the
    // provider does not refuse, on an applied body).
    let (mut ambiguous, mut unbacked, mut due) = (0, 0, 0);
    for (i, sent) in plan.sent.iter().enumerate() {
        let e = &sent.event;
        let Some(to) = e.receipt_email.as_deref() else { continue };
        let got = emails_to.get(to).copied().unwrap_or(0);
        if fate_of[i] != Some(Fate::Applied) {
            email_bad += usize::from(got > 0);
            continue;
        }
        let row = rows.get(&format!("receipt#{}", e.event_id));
        let status = row.and_then(|r| s(r, "status")).unwrap_or_else(|| "missing".into());
        *audit.rows.entry(status.clone()).or_default() += 1;
        let mine = row.is_some_and(|r| {
            s(r, "account_id").as_deref() == Some(e.account_id.as_str())
                && n(r, "amount_cents") == Some(e.amount_cents)
                && s(r, "receipt_email").as_deref() == Some(to)
        });
        let refused = to.starts_with(REFUSED_PREFIX);
        due += usize::from(!refused);
        let marker = markers
            .get(&format!("email#{}", e.event_id))
            .filter(|m| s(m, "status").as_deref() == Some("COMPLETED"))
            .and_then(|m| s(m, "response"))
            .and_then(|r| serde_json::from_str::<Receipt>(&r).ok());
        // Under at most once a claim whose answer was lost counts as a possible takeover and is
        // flagged AMBIGUOUS without a send, refused address or not. The relay marks a row
        // AMBIGUOUS only after its marker recorded it so: a row without that marker was not
        // flagged by the at-most-once path, whatever wrote it.
        let status_ok = match status.as_str() {
            "FAILED" => refused,
            "SENT" => !refused && got == 1,
            "AMBIGUOUS" => {
                ambiguous += 1;
                let backed = matches!(marker, Some(Receipt::Ambiguous));
                unbacked += usize::from(!backed);
                backed && got <= usize::from(!refused)
            }
            _ => false,
        };
        row_bad += usize::from(!mine || !status_ok);
        email_bad += usize::from(got > 1 || (refused && got > 0));
        if status == "FAILED" {
            match &marker {
                Some(Receipt::Failed { reason }) => reason_leaks += usize::from(reason.contains(to)),
                _ => row_bad += 1,
            }
        }
    }
    // A row for an event whose applied body has no address would be a copy's write.
    for (id, row) in &rows {
        let event_id = id.trim_start_matches("receipt#");
        let owner = by_id
            .get(event_id)
            .into_iter()
            .flatten()
            .find(|i| fate_of[**i] == Some(Fate::Applied) && plan.sent[**i].event.receipt_email.is_some());
        if owner.is_none() {
            row_bad += 1;
            *audit
                .rows
                .entry(format!("{} (no applied body with an address)", s(row, "status").unwrap_or_default()))
                .or_default() += 1;
        }
    }
    let doubled = emails_to.values().filter(|n| **n > 1).count();
    // Faults make a few receipts ambiguous, never all of them: receipts due and none sent is a
    // relay that does not send.
    let none_sent = due > 0 && audit.emails == 0;
    audit.checks.push(check(
        "one receipt per applied event with an address; none refused (row FAILED), none for bodies not applied, none doubled; AMBIGUOUS only as the faults explain",
        row_bad == 0 && email_bad == 0 && doubled == 0 && ambiguous <= ambiguous_explained && !none_sent,
        format!(
            "{} emails for {due} receipts due; {row_bad} rows wrong, {email_bad} bodies with wrong emails, {doubled} recipients twice; {ambiguous} AMBIGUOUS ({unbacked} without their marker) of {ambiguous_explained} the faults explain",
            audit.emails
        ),
    ));
    audit.checks.push(check(
        "refusals are stored without the address",
        reason_leaks == 0,
        format!("{reason_leaks} stored reasons hold the address"),
    ));
    Ok(audit)
}
