//! Workloads as a hostile producer sends them: producer retries (same business id, new message
//! id), poison messages, debits that race their funding credits, overdrafts, currency
//! mismatches, one event id reused for another account or another amount, records whose handler
//! panics, bodies at the SQS size limit and receipt addresses the email provider refuses.
//!
//! A plan says what was sent, never what must come of it: on a standard queue a racing debit
//! applies or is rejected by the order it arrives in, so the checks read every outcome back from
//! the tables (`crate::invariants`).

use std::collections::{BTreeMap, BTreeSet};

use payments::{PaymentEvent, Rejection};
use serde_json::json;

pub use local::esm::queue::{bodies_of_event_file, send, SQS_BODY_LIMIT};
use local::rng::Rng;

/// Event ids with this marker make the chaos and demo handler panic on every delivery.
pub const PANIC_ALWAYS: &str = "panic-always";

/// Event ids with this marker make the chaos and demo handler panic on their first delivery.
pub const PANIC_ONCE: &str = "panic-once";

/// Receipt addresses starting with this are refused by the email provider (the fault proxy
/// answers SES's `MessageRejected`, as SES does for an unverified recipient in its sandbox).
pub const REFUSED_PREFIX: &str = "refused-";

/// What to send.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Unique event ids (valid events).
    pub events: usize,
    /// Share of deliveries that are duplicates, in percent (producer retries and redeliveries).
    pub duplicate_pct: u32,
    /// Malformed messages: they must end in the DLQ, alone.
    pub poison: usize,
    /// Seed of the shuffle, the mix and the amounts.
    pub seed: u64,
    /// Namespaces accounts, event ids and recipients, so runs never meet.
    pub run: String,
    /// The hostile kinds beside plain credits (see [`Kind`]); off, every event is a credit or
    /// an overdraft on an empty account.
    pub hostile: bool,
}

impl Workload {
    /// `events` events, 30 % duplicates, 5 poison messages, hostile, under a fresh run id.
    pub fn new(events: usize) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        Workload {
            events,
            duplicate_pct: 30,
            poison: 5,
            seed: nanos as u64 | 1,
            run: format!("r{}", nanos % 10_000_000_000),
            hostile: true,
        }
    }
}

/// What a sent body is meant to exercise. The outcome is read from the tables; [`Kind::allows`]
/// says which outcomes the contract allows for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A credit on a shared account, one in four with a receipt address.
    Credit,
    /// The credit a racing debit needs, sent next to it, on a fresh account: nothing in the
    /// contract can reject it (a credit never lacks funds; the account has no currency yet, or
    /// its own), so it applies.
    FundingCredit,
    /// An account's first credit in its own currency, sent next to a credit in another
    /// ([`Kind::CurrencyMismatch`]): whichever applies first sets the account's currency and the
    /// other is rejected (currency mismatch).
    RacedCredit,
    /// A debit sent next to its funding credit: applied if the credit is in first, rejected
    /// (insufficient funds) otherwise; on a standard queue either may happen.
    RacingDebit,
    /// A debit larger than its account ever holds, or on an account that never gets credit.
    Overdraft,
    /// A credit in another currency, sent next to its account's first credit: whichever applies
    /// first sets the account's currency and the other is rejected.
    CurrencyMismatch,
    /// A credit whose receipt address the provider refuses: the row ends `FAILED`, no email.
    RefusedAddress,
    /// A credit padded with an unknown field to the SQS body limit.
    Oversized,
    /// The handler panics on its first delivery; the redelivery applies.
    PanicOnce,
    /// The handler panics on every delivery: the message ends in the DLQ.
    PanicAlways,
    /// Another event's id on another account: key reuse, to the DLQ, nothing moved.
    ReusedForAccount,
    /// Another event's id with another amount: key reuse, to the DLQ, nothing moved.
    ReusedForAmount,
}

/// Where a sent body ended, read back from the tables and the DLQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fate {
    /// Its ledger entry exists.
    Applied,
    /// Its rejection is recorded in the idempotency table.
    Rejected,
    /// It is in the DLQ.
    Dlq,
}

impl Kind {
    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Credit => "credit",
            Kind::FundingCredit => "funding credit of a racing debit",
            Kind::RacedCredit => "credit racing another currency",
            Kind::RacingDebit => "debit racing its funding credit",
            Kind::Overdraft => "overdraft",
            Kind::CurrencyMismatch => "currency mismatch (raced)",
            Kind::RefusedAddress => "receipt address refused by SES",
            Kind::Oversized => "body at the 256 KiB SQS limit",
            Kind::PanicOnce => "handler panics once",
            Kind::PanicAlways => "handler panics every time",
            Kind::ReusedForAccount => "event id reused: another account",
            Kind::ReusedForAmount => "event id reused: another amount",
        }
    }

    /// Whether the contract allows `fate` for a body of this kind. A reused id's copy may take
    /// effect when it arrives before the original, which then goes to the DLQ instead. A
    /// rejection must also have a reason the contract gives this body
    /// ([`Kind::may_be_rejected_for`]).
    pub fn allows(self, fate: Fate) -> bool {
        use Fate::*;
        match self {
            Kind::Credit | Kind::FundingCredit | Kind::RefusedAddress | Kind::Oversized | Kind::PanicOnce => {
                fate == Applied
            }
            Kind::RacingDebit | Kind::RacedCredit | Kind::CurrencyMismatch => fate != Dlq,
            Kind::Overdraft => fate == Rejected,
            Kind::PanicAlways => fate == Dlq,
            Kind::ReusedForAccount | Kind::ReusedForAmount => true,
        }
    }

    /// Whether the contract can reject `event`, a body of this kind, for `reason`: insufficient
    /// funds only for a debit larger than the balance it met (never for a credit); a currency
    /// mismatch only in a currency race (the one kind whose account another currency can claim
    /// first), and only against another currency. A reason outside these is a ledger's bug, even
    /// on a body that may be rejected.
    pub fn may_be_rejected_for(self, event: &PaymentEvent, reason: &Rejection) -> bool {
        match reason {
            Rejection::InsufficientFunds { balance_cents } => {
                event.amount_cents < 0 && balance_cents.saturating_add(event.amount_cents) < 0
            }
            Rejection::CurrencyMismatch { account_currency } => {
                matches!(self, Kind::RacedCredit | Kind::CurrencyMismatch) && *account_currency != event.currency
            }
        }
    }
}

/// One distinct body the producer sent (duplicates send it again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The event as the consumer parses it.
    pub event: PaymentEvent,
    /// What it exercises.
    pub kind: Kind,
    /// The body, byte for byte (with padding, for the oversized ones).
    pub body: String,
    /// Whether it reuses another sent body's event id (the original is sent too).
    pub reuses: bool,
}

/// The messages to send.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Message bodies in sending order.
    pub deliveries: Vec<String>,
    /// Every distinct valid body, once.
    pub sent: Vec<Sent>,
    /// The poison bodies.
    pub poison: Vec<String>,
    /// Duplicate deliveries among `deliveries`.
    pub duplicates: usize,
}

impl Plan {
    /// Unique event ids sent.
    pub fn event_ids(&self) -> BTreeSet<&str> {
        self.sent.iter().map(|s| s.event.event_id.as_str()).collect()
    }

    /// Every account any body names.
    pub fn accounts(&self) -> BTreeSet<&str> {
        self.sent.iter().map(|s| s.event.account_id.as_str()).collect()
    }

    /// Distinct bodies by kind.
    pub fn kinds(&self) -> BTreeMap<Kind, usize> {
        let mut kinds = BTreeMap::new();
        for s in &self.sent {
            *kinds.entry(s.kind).or_default() += 1;
        }
        kinds
    }
}

/// How many of `events` a hostile kind gets: `per_mille`, at least one once the workload has 50
/// events (so `make test`'s 300 events carry every kind), none below.
fn share(events: usize, per_mille: usize) -> usize {
    if events < 50 {
        0
    } else {
        (events * per_mille / 1000).max(1)
    }
}

/// The body of an event padded with an unknown field (`note`, ignored by the contract) to
/// exactly `size` bytes.
pub fn padded_body(event: &PaymentEvent, size: usize) -> String {
    let mut value = serde_json::to_value(event).expect("events serialise");
    value["note"] = json!("");
    let bare = value.to_string().len();
    value["note"] = json!("x".repeat(size.saturating_sub(bare)));
    value.to_string()
}

/// How many bodies of each kind a workload gets.
#[derive(Debug, Clone, Copy)]
struct Shares {
    races: usize,
    fx: usize,
    overdrafts: usize,
    refused: usize,
    oversized: usize,
    panic_once: usize,
    panic_always: usize,
    reuse_account: usize,
    reuse_amount: usize,
}

impl Shares {
    fn of(w: &Workload) -> Shares {
        let n = w.events;
        let hostile = |per_mille| if w.hostile { share(n, per_mille) } else { 0 };
        Shares {
            races: hostile(40),
            fx: hostile(10),
            overdrafts: if w.hostile { share(n, 20) } else { n / 25 },
            refused: hostile(5),
            oversized: hostile(2),
            panic_once: hostile(5),
            panic_always: hostile(1),
            reuse_account: hostile(5),
            reuse_amount: hostile(5),
        }
    }
}

/// Makes a plan's bodies: ids, accounts and addresses under the run's namespace, amounts from
/// the seeded generator.
struct Planner<'w> {
    w: &'w Workload,
    rng: Rng,
    ids: usize,
}

fn event(id: String, account: String, amount: i64, currency: &str, email: Option<String>) -> PaymentEvent {
    PaymentEvent {
        event_id: id,
        account_id: account,
        amount_cents: amount,
        currency: currency.into(),
        receipt_email: email,
    }
}

fn sent(event: PaymentEvent, kind: Kind) -> Sent {
    let body = serde_json::to_string(&event).expect("events serialise");
    Sent { event, kind, body, reuses: false }
}

impl Planner<'_> {
    fn next_id(&mut self, tag: &str) -> String {
        self.ids += 1;
        let (run, i) = (&self.w.run, self.ids);
        if tag.is_empty() {
            format!("pay-{run}-{i}")
        } else {
            format!("pay-{run}-{tag}-{i}")
        }
    }

    fn shared(&self, k: usize) -> String {
        format!("acct-{}-{}", self.w.run, k % (self.w.events / 10).max(1))
    }

    /// A race's two bodies, in a random order.
    fn pair(&mut self, mut pair: Vec<Sent>) -> Vec<Sent> {
        if self.rng.below(2) == 0 {
            pair.reverse();
        }
        pair
    }

    /// Debits racing their funding credits, then currencies racing on fresh accounts.
    fn races(&mut self, shares: &Shares, groups: &mut Vec<Vec<Sent>>) {
        let run = self.w.run.clone();
        for r in 0..shares.races {
            let account = format!("acct-{run}-race-{r}");
            let credit = 1_000 + self.rng.below(9_000) as i64;
            let debit = -(100 + self.rng.below(credit as usize - 100) as i64);
            let funding = sent(event(self.next_id(""), account.clone(), credit, "USD", None), Kind::FundingCredit);
            let racing = sent(event(self.next_id(""), account, debit, "USD", None), Kind::RacingDebit);
            groups.push(self.pair(vec![funding, racing]));
        }
        for f in 0..shares.fx {
            let account = format!("acct-{run}-fx-{f}");
            let first = sent(event(self.next_id(""), account.clone(), 2_000, "USD", None), Kind::RacedCredit);
            let other = sent(event(self.next_id(""), account, 3_000, "EUR", None), Kind::CurrencyMismatch);
            groups.push(self.pair(vec![first, other]));
        }
    }

    /// Half on an account that never gets credit, half far beyond what a shared one holds.
    fn overdrafts(&mut self, shares: &Shares, groups: &mut Vec<Vec<Sent>>) {
        for o in 0..shares.overdrafts {
            let e = if o % 2 == 0 || !self.w.hostile {
                let amount = -(100 + self.rng.below(900) as i64);
                event(self.next_id(""), format!("acct-{}-empty-{o}", self.w.run), amount, "USD", None)
            } else {
                event(self.next_id(""), self.shared(o), -10_000_000_000, "USD", None)
            };
            groups.push(vec![sent(e, Kind::Overdraft)]);
        }
    }

    /// The rest: credits on shared accounts, the special kinds first.
    fn credits(&mut self, shares: &Shares, groups: &mut Vec<Vec<Sent>>) {
        let special = shares.races * 2 + shares.fx * 2 + shares.overdrafts;
        let mut specials: Vec<Kind> = Vec::new();
        specials.extend(std::iter::repeat_n(Kind::RefusedAddress, shares.refused));
        specials.extend(std::iter::repeat_n(Kind::Oversized, shares.oversized));
        specials.extend(std::iter::repeat_n(Kind::PanicOnce, shares.panic_once));
        specials.extend(std::iter::repeat_n(Kind::PanicAlways, shares.panic_always));
        for c in 0..self.w.events.saturating_sub(special) {
            let kind = specials.get(c).copied().unwrap_or(Kind::Credit);
            let id = match kind {
                Kind::PanicOnce => self.next_id(PANIC_ONCE),
                Kind::PanicAlways => self.next_id(PANIC_ALWAYS),
                _ => self.next_id(""),
            };
            let run = &self.w.run;
            let email = match kind {
                Kind::RefusedAddress => Some(format!("{REFUSED_PREFIX}{c}@{run}.example.com")),
                _ if c % 4 == 0 => Some(format!("customer-{c}@{run}.example.com")),
                _ => None,
            };
            let e = event(id, self.shared(c), 100 + self.rng.below(100_000) as i64, "USD", email);
            groups.push(vec![match kind {
                Kind::Oversized => Sent { body: padded_body(&e, SQS_BODY_LIMIT), event: e, kind, reuses: false },
                _ => sent(e, kind),
            }]);
        }
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.rng.below(i + 1));
        }
    }

    /// Copies of plain credits' ids, each with an address of its own, so a receipt sent for a
    /// copy is told apart from the original's.
    fn reused(&mut self, shares: &Shares, groups: &[Vec<Sent>]) -> Vec<Sent> {
        let originals: Vec<&PaymentEvent> =
            groups.iter().flatten().filter(|s| s.kind == Kind::Credit).map(|s| &s.event).collect();
        let run = &self.w.run;
        let mut late = Vec::new();
        for k in 0..(shares.reuse_account + shares.reuse_amount).min(originals.len()) {
            let mut copy = originals[(k * 7919) % originals.len()].clone();
            copy.receipt_email = Some(format!("reuse-{k}@{run}.example.com"));
            let kind = if k < shares.reuse_account {
                copy.account_id = format!("acct-{run}-reuse-{k}");
                Kind::ReusedForAccount
            } else {
                copy.amount_cents += 1 + self.rng.below(1_000) as i64;
                Kind::ReusedForAmount
            };
            late.push(Sent { reuses: true, ..sent(copy, kind) });
        }
        late
    }

    /// Poison of four kinds: a truncated body, no event id, a zero amount, a lower-case currency.
    fn poison(&self) -> Vec<String> {
        (0..self.w.poison)
            .map(|k| {
                let id = format!("pay-{}-poison-{k}", self.w.run);
                match k % 4 {
                    0 => format!("{{\"event_id\": \"{id}\", \"account_id\": "),
                    1 => json!({"account_id": "acct-x", "amount_cents": 100, "currency": "USD"}).to_string(),
                    2 => json!({"event_id": id, "account_id": "acct-x", "amount_cents": 0, "currency": "USD"})
                        .to_string(),
                    _ => json!({"event_id": id, "account_id": "acct-x", "amount_cents": 100, "currency": "usd"})
                        .to_string(),
                }
            })
            .collect()
    }

    /// The sending order: duplicates and poison between groups (a race stays side by side) in
    /// the first nine tenths; copies of reused ids after everything else.
    fn order(&mut self, groups: Vec<Vec<Sent>>, mut late: Vec<Sent>) -> Plan {
        let mut plan = Plan { sent: groups.iter().flatten().cloned().collect(), ..Plan::default() };
        let pct = self.w.duplicate_pct.min(95) as usize;
        plan.duplicates = if plan.sent.is_empty() { 0 } else { (plan.sent.len() * pct).div_ceil(100 - pct) };
        let mut extra: Vec<String> =
            (0..plan.duplicates).map(|_| plan.sent[self.rng.below(plan.sent.len())].body.clone()).collect();
        plan.poison = self.poison();
        extra.extend(plan.poison.iter().cloned());
        let mut before: Vec<Vec<String>> = vec![Vec::new(); groups.len() + 1];
        let head = groups.len() * 9 / 10;
        for body in extra {
            before[self.rng.below(head + 1)].push(body);
        }
        for (group, extra) in groups.iter().zip(&mut before) {
            plan.deliveries.append(extra);
            plan.deliveries.extend(group.iter().map(|s| s.body.clone()));
        }
        plan.deliveries.extend(before.into_iter().flatten());
        self.shuffle(&mut late);
        for s in late {
            plan.deliveries.push(s.body.clone());
            plan.sent.push(s);
        }
        plan
    }
}

/// Plans a workload. Per 1,000 events: 40 debits racing their funding credits (80 events), 10
/// currency mismatches racing theirs (20), 20 overdrafts, 5 refused receipt addresses, 2 bodies
/// at the SQS limit, 5 handler panics once and 1 every time, and, beside the events, 5 copies
/// of an event id for another account and 5 for another amount; the rest are credits on shared
/// accounts (`events / 10` of them). Duplicates are extra deliveries of random bodies; poison
/// is of four kinds. A race's two bodies are sent side by side, so they meet in one batch or
/// two concurrent ones; reused ids' copies go out in the last tenth, after their originals.
pub fn plan(w: &Workload) -> Plan {
    let shares = Shares::of(w);
    let mut planner = Planner { w, rng: Rng::new(w.seed), ids: 0 };
    // Groups: bodies sent side by side (a race), in sending order.
    let mut groups: Vec<Vec<Sent>> = Vec::new();
    planner.races(&shares, &mut groups);
    planner.overdrafts(&shares, &mut groups);
    planner.credits(&shares, &mut groups);
    planner.shuffle(&mut groups);
    let late = planner.reused(&shares, &groups);
    planner.order(groups, late)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(events: usize) -> Workload {
        Workload { events, duplicate_pct: 30, poison: 5, seed: 7, run: "t".into(), hostile: true }
    }

    #[test]
    fn a_plan_has_the_asked_shape() {
        let p = plan(&workload(1000));
        assert_eq!(p.event_ids().len(), 1000, "unique ids: the events; copies reuse ids");
        let kinds = p.kinds();
        assert_eq!(kinds[&Kind::RacingDebit], 40);
        assert_eq!(kinds[&Kind::CurrencyMismatch], 10);
        assert_eq!(kinds[&Kind::FundingCredit], 40);
        assert_eq!(kinds[&Kind::RacedCredit], 10);
        assert_eq!(kinds[&Kind::Overdraft], 20);
        assert_eq!(kinds[&Kind::ReusedForAccount] + kinds[&Kind::ReusedForAmount], 10);
        assert_eq!(p.sent.len(), 1010);
        assert_eq!(p.deliveries.len(), 1010 + p.duplicates + 5);
        let share = p.duplicates as f64 / (1010 + p.duplicates) as f64;
        assert!((0.29..0.32).contains(&share), "{share}");
        for poison in &p.poison {
            assert!(PaymentEvent::parse(poison).is_err());
        }
    }

    #[test]
    fn every_hostile_kind_is_in_make_tests_300_events() {
        let kinds = plan(&workload(300)).kinds();
        for kind in [
            Kind::RacingDebit,
            Kind::Overdraft,
            Kind::CurrencyMismatch,
            Kind::RefusedAddress,
            Kind::Oversized,
            Kind::PanicOnce,
            Kind::PanicAlways,
            Kind::ReusedForAccount,
            Kind::ReusedForAmount,
        ] {
            assert!(kinds.get(&kind).copied().unwrap_or(0) >= 1, "{kind:?} missing: {kinds:?}");
        }
    }

    #[test]
    fn every_body_parses_as_the_event_it_stands_for() {
        for s in plan(&workload(300)).sent {
            assert_eq!(PaymentEvent::parse(&s.body).unwrap(), s.event, "{:?}", s.kind);
            if s.kind == Kind::Oversized {
                assert_eq!(s.body.len(), SQS_BODY_LIMIT);
            }
        }
    }

    #[test]
    fn races_go_side_by_side_and_reused_ids_after_their_originals() {
        let p = plan(&workload(1000));
        // Duplicates send a body again anywhere: the closest two sendings count.
        let positions = |body: &str| -> Vec<usize> {
            p.deliveries.iter().enumerate().filter(|(_, d)| *d == body).map(|(i, _)| i).collect()
        };
        let position = |body: &str| positions(body)[0];
        for (i, s) in p.sent.iter().enumerate() {
            match s.kind {
                Kind::RacingDebit | Kind::CurrencyMismatch => {
                    let partner = if i > 0 && p.sent[i - 1].event.account_id == s.event.account_id {
                        &p.sent[i - 1]
                    } else {
                        &p.sent[i + 1]
                    };
                    let funding = if s.kind == Kind::RacingDebit { Kind::FundingCredit } else { Kind::RacedCredit };
                    assert_eq!(partner.kind, funding);
                    let theirs = positions(&partner.body);
                    let closest =
                        positions(&s.body).iter().flat_map(|a| theirs.iter().map(|b| a.abs_diff(*b))).min().unwrap();
                    assert!(closest <= 3, "{closest}");
                }
                Kind::ReusedForAccount | Kind::ReusedForAmount => {
                    let original = p.sent.iter().find(|o| !o.reuses && o.event.event_id == s.event.event_id).unwrap();
                    assert_ne!(original.event, s.event);
                    assert!(position(&original.body) < position(&s.body));
                }
                _ => {}
            }
        }
    }

    #[test]
    fn each_kind_may_be_rejected_only_for_a_reason_the_contract_gives_it() {
        let p = plan(&workload(300));
        let of = |kind: Kind| p.sent.iter().find(|s| s.kind == kind).unwrap().event.clone();
        let (funding, debit, raced, other) =
            (of(Kind::FundingCredit), of(Kind::RacingDebit), of(Kind::RacedCredit), of(Kind::CurrencyMismatch));
        let broke = Rejection::InsufficientFunds { balance_cents: 0 };
        let in_eur = Rejection::CurrencyMismatch { account_currency: "EUR".into() };
        let in_usd = Rejection::CurrencyMismatch { account_currency: "USD".into() };
        // The debit race: the credit applies; the debit may find the account empty.
        assert!(Kind::FundingCredit.allows(Fate::Applied) && !Kind::FundingCredit.allows(Fate::Rejected));
        assert!(Kind::RacingDebit.allows(Fate::Rejected) && Kind::RacingDebit.allows(Fate::Applied));
        assert!(!Kind::FundingCredit.may_be_rejected_for(&funding, &broke), "a credit never lacks funds");
        assert!(Kind::RacingDebit.may_be_rejected_for(&debit, &broke));
        let covered = Rejection::InsufficientFunds { balance_cents: -debit.amount_cents };
        assert!(!Kind::RacingDebit.may_be_rejected_for(&debit, &covered), "the balance covered it");
        assert!(!Kind::RacingDebit.may_be_rejected_for(&debit, &in_eur), "only a currency race meets a currency");
        // The currency race: either credit may lose, to the other currency only.
        assert!(Kind::RacedCredit.allows(Fate::Rejected) && Kind::CurrencyMismatch.allows(Fate::Rejected));
        assert!(Kind::RacedCredit.may_be_rejected_for(&raced, &in_eur));
        assert!(!Kind::RacedCredit.may_be_rejected_for(&raced, &in_usd), "not against its own currency");
        assert!(Kind::CurrencyMismatch.may_be_rejected_for(&other, &in_usd));
        assert!(!Kind::RacedCredit.may_be_rejected_for(&raced, &broke));
        assert!(!Kind::Credit.may_be_rejected_for(&of(Kind::Credit), &in_eur));
    }
}
