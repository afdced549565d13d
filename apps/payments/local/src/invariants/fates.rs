//! Where each sent body ended (applied, rejected, in the DLQ: exactly one), and the invariants
//! on those fates: nothing lost, each kind as the contract allows, one effect per event id, key
//! reuse moving nothing, and a DLQ that holds only what should be there.

use std::collections::{BTreeMap, HashMap, HashSet};

use payments::{PaymentEvent, Posting, Rejection};

use super::read::{s, ReadBack};
use super::Check;
use crate::workload::{Fate, Kind, Plan, Sent};
use local::error::Result;

/// What one body came to, read back: each fate found, with its label.
struct Found {
    fates: Vec<(Fate, String)>,
    rejection: Option<Rejection>,
}

fn rejection_label(reason: &Rejection) -> &'static str {
    match reason {
        Rejection::CurrencyMismatch { .. } => "rejected: currency mismatch",
        Rejection::InsufficientFunds { .. } => "rejected: insufficient funds",
        #[allow(unreachable_patterns)]
        _ => "rejected: other",
    }
}

/// Applied (its entry, on its account, with its amount and currency), rejected (a recorded
/// rejection of its payload), in the DLQ.
fn found(sent: &Sent, read: &ReadBack, hasher: &effectively_once::Config) -> Result<Found> {
    let e = &sent.event;
    let entry = read.ledger.get(&e.account_id).and_then(|a| a.entries.iter().find(|x| x.event_id == e.event_id));
    let applied = entry.is_some_and(|x| x.amount_cents == e.amount_cents && x.currency == e.currency);
    let hash = hasher.payload_hash(e)?;
    let posting = read
        .records
        .get(&format!("payments#{}", e.event_id))
        .filter(|r| {
            s(r, "status").as_deref() == Some("COMPLETED")
                && s(r, "payload_hash").is_some_and(|stored| hash.matches(&stored))
        })
        .and_then(|r| s(r, "response"))
        .and_then(|r| serde_json::from_str::<Posting>(&r).ok());
    let rejection = match posting {
        Some(Posting::Rejected { reason }) if !applied => Some(reason),
        _ => None,
    };
    let fates = [
        applied.then(|| (Fate::Applied, "applied".to_owned())),
        rejection.as_ref().map(|r| (Fate::Rejected, rejection_label(r).to_owned())),
        read.dlq.contains(&sent.body).then(|| (Fate::Dlq, "in the DLQ".to_owned())),
    ];
    Ok(Found { fates: fates.into_iter().flatten().collect(), rejection })
}

/// The fates of a plan's bodies, and the counts the invariants need.
pub(super) struct Fates<'p> {
    pub plan: &'p Plan,
    /// Bodies by event id and by text: the lookups stay linear in what was sent.
    pub by_id: HashMap<&'p str, Vec<usize>>,
    by_body: HashMap<&'p str, usize>,
    /// Each body's one fate; `None` for lost or twice.
    pub fate_of: Vec<Option<Fate>>,
    /// Bodies applied or rejected, by event id.
    took_effect: HashMap<&'p str, usize>,
    /// Applied credits per currency race (by account).
    currency_races: HashMap<&'p str, usize>,
    counts: BTreeMap<&'static str, usize>,
    forbidden: BTreeMap<&'static str, usize>,
}

impl<'p> Fates<'p> {
    /// Each body's fate, counted into `outcomes` by kind.
    pub fn judge(
        plan: &'p Plan,
        read: &ReadBack,
        outcomes: &mut BTreeMap<Kind, BTreeMap<String, usize>>,
    ) -> Result<Fates<'p>> {
        let mut fates = Fates {
            plan,
            by_id: HashMap::new(),
            by_body: HashMap::new(),
            fate_of: Vec::with_capacity(plan.sent.len()),
            took_effect: HashMap::new(),
            currency_races: HashMap::new(),
            counts: BTreeMap::new(),
            forbidden: BTreeMap::new(),
        };
        let hasher = effectively_once::Config::default();
        for (i, sent) in plan.sent.iter().enumerate() {
            fates.by_id.entry(sent.event.event_id.as_str()).or_default().push(i);
            fates.by_body.insert(sent.body.as_str(), i);
            let label = fates.add(sent, found(sent, read, &hasher)?);
            *outcomes.entry(sent.kind).or_default().entry(label).or_default() += 1;
        }
        // A currency race's account takes exactly one of its two credits: the first sets the
        // currency and the other is rejected. Both rejected is a ledger that refused a fresh
        // account.
        let races_not_one = fates.currency_races.values().filter(|applied| **applied != 1).count();
        if races_not_one > 0 {
            fates.forbidden.insert("currency race without exactly one credit applied", races_not_one);
        }
        Ok(fates)
    }

    /// Counts one body's fate; its label in the outcomes.
    fn add(&mut self, sent: &'p Sent, found: Found) -> String {
        let e = &sent.event;
        let label = match found.fates.as_slice() {
            [] => {
                *self.counts.entry("lost").or_default() += 1;
                "LOST (not applied, rejected or in the DLQ)".to_owned()
            }
            [(fate, label)] => {
                *self.counts.entry(fate_name(*fate)).or_default() += 1;
                // A rejection needs a reason the contract gives this body too: a ledger that
                // refused a funding credit "for insufficient funds" has a rejection recorded,
                // read back, and wrong.
                let reason_ok = found.rejection.as_ref().is_none_or(|r| sent.kind.may_be_rejected_for(e, r));
                if !sent.kind.allows(*fate) || !reason_ok {
                    *self.forbidden.entry(sent.kind.label()).or_default() += 1;
                }
                label.clone()
            }
            _ => {
                *self.counts.entry("twice").or_default() += 1;
                let labels: Vec<&str> = found.fates.iter().map(|(_, l)| l.as_str()).collect();
                format!("TWICE ({})", labels.join(" and "))
            }
        };
        let fate = (found.fates.len() == 1).then(|| found.fates[0].0);
        if matches!(fate, Some(Fate::Applied | Fate::Rejected)) {
            *self.took_effect.entry(e.event_id.as_str()).or_default() += 1;
        }
        self.fate_of.push(fate);
        if matches!(sent.kind, Kind::RacedCredit | Kind::CurrencyMismatch) {
            *self.currency_races.entry(e.account_id.as_str()).or_default() += usize::from(fate == Some(Fate::Applied));
        }
        label
    }

    fn count(&self, name: &str) -> usize {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// Every body sent is applied, rejected or in the DLQ, once.
    pub fn nothing_lost(&self) -> Check {
        let (lost, twice) = (self.count("lost"), self.count("twice"));
        Check::new(
            "nothing lost: every body sent is applied, rejected (record read back) or in the DLQ, once",
            lost == 0 && twice == 0,
            format!(
                "{} bodies of {} event ids: {} applied + {} rejected + {} in the DLQ; {lost} lost, {twice} twice",
                self.plan.sent.len(),
                self.by_id.len(),
                self.count("applied"),
                self.count("rejected"),
                self.count("dlq"),
            ),
        )
    }

    /// The SQS path's figures of "nothing lost": nothing parks there (its DLQ is the
    /// destination).
    pub fn tally(&self) -> super::Tally {
        super::Tally {
            sent: self.plan.sent.len(),
            applied: self.count("applied"),
            rejected: self.count("rejected"),
            destination: self.count("dlq"),
            lost: self.count("lost"),
            twice: self.count("twice"),
            ..super::Tally::new("SQS: payments")
        }
    }

    /// Each kind ends as the contract allows; `kinds` is how many were sent.
    pub fn kinds_allowed(&self, kinds: usize) -> Check {
        Check::new(
            "each kind ends as the contract allows",
            self.forbidden.is_empty(),
            if self.forbidden.is_empty() {
                format!("{kinds} kinds")
            } else {
                format!("not allowed: {:?}", self.forbidden)
            },
        )
    }

    /// One event id, one effect: across bodies and across accounts.
    pub fn one_effect_each(&self, read: &ReadBack) -> Check {
        let mut accounts_of: HashMap<&str, usize> = HashMap::new();
        for e in read.ledger.values().flat_map(|a| &a.entries) {
            *accounts_of.entry(e.event_id.as_str()).or_default() += 1;
        }
        let sent_ids: HashSet<&str> = self.by_id.keys().copied().collect();
        let strays = accounts_of.keys().filter(|id| !sent_ids.contains(*id)).count();
        let on_two =
            accounts_of.values().filter(|n| **n > 1).count() + self.took_effect.values().filter(|n| **n > 1).count();
        Check::new(
            "an event id takes effect once, across bodies and accounts; no entry nobody sent",
            on_two == 0 && strays == 0,
            format!("{on_two} ids with two effects, {strays} entries of unknown ids"),
        )
    }

    /// Key reuse: the copies in the DLQ, nothing of theirs posted or written to the outbox.
    pub fn key_reuse(&self) -> Check {
        let (mut copies_in_dlq, mut displaced, mut reuse_bad) = (0, 0, 0);
        let sent = &self.plan.sent;
        for (i, copy) in sent.iter().enumerate().filter(|(_, s)| s.reuses) {
            let originals = self.by_id.get(copy.event.event_id.as_str()).into_iter().flatten();
            let original = originals.copied().find(|o| !sent[*o].reuses);
            match (self.fate_of[i], original.and_then(|o| self.fate_of[o])) {
                (Some(Fate::Dlq), Some(Fate::Applied | Fate::Rejected)) => copies_in_dlq += 1,
                (Some(Fate::Applied | Fate::Rejected), Some(Fate::Dlq)) => displaced += 1,
                _ => reuse_bad += 1,
            }
        }
        let reuses = sent.iter().filter(|s| s.reuses).count();
        Check::new(
            "key reuse moves nothing: one body per reused id takes effect, the others are in the DLQ",
            reuse_bad == 0,
            format!("{reuses} reused ids: {copies_in_dlq} copies in the DLQ, {displaced} arrived first (original in the DLQ), {reuse_bad} otherwise"),
        )
    }

    /// The DLQ: poison, key-reuse copies and records that panic every time, each with its
    /// reason, counted into `reasons`.
    pub fn dlq(&self, read: &ReadBack, reasons: &mut BTreeMap<String, usize>) -> Check {
        let mut unexplained = 0;
        for body in &read.dlq_bodies {
            let reason = self.dlq_reason(body);
            unexplained += usize::from(reason.is_none());
            *reasons.entry(reason.unwrap_or_else(|| "valid event, retries exhausted".to_owned())).or_default() += 1;
        }
        let poison_missing = self.plan.poison.iter().filter(|p| !read.dlq.contains(*p)).count();
        Check::new(
            "the DLQ holds poison, key-reuse copies and always-panicking records only, each with its reason",
            unexplained == 0 && poison_missing == 0,
            format!("{} messages, {unexplained} unexplained, {poison_missing} poison missing", read.dlq_bodies.len()),
        )
    }

    /// Why a body is in the DLQ; `None` when nothing explains it.
    fn dlq_reason(&self, body: &str) -> Option<String> {
        let event = match PaymentEvent::parse(body) {
            Err(e) => return Some(format!("poison: {e}")),
            Ok(event) => event,
        };
        match self.by_body.get(body).map(|i| &self.plan.sent[*i]) {
            Some(s) if s.kind == Kind::PanicAlways => Some("handler panicked on every delivery".to_owned()),
            Some(_) if self.took_effect.get(event.event_id.as_str()).is_some_and(|n| *n > 0) => {
                Some("event id reused with another payload (key reuse)".to_owned())
            }
            _ => None,
        }
    }
}

fn fate_name(fate: Fate) -> &'static str {
    match fate {
        Fate::Applied => "applied",
        Fate::Rejected => "rejected",
        Fate::Dlq => "dlq",
    }
}
