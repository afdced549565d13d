//! The Kafka path's workload, pure: payments on a few accounts (credits, debits, overdrafts, a
//! currency mismatch or two, payments whose handler panics until the fix), producer retries at
//! new offsets (some under another record key, in another partition) and poison values (an
//! opening credit's event id reused for another amount among them), in the order the producer
//! writes them.

use payments::PaymentEvent;
use serde_json::json;

use crate::workload::PANIC_ALWAYS;
use local::rng::Rng;

/// What a payment written to the topic exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PaymentKind {
    /// A credit: applied.
    Credit,
    /// A debit the account's opening credit covers, whatever order the pollers apply it in:
    /// applied.
    Debit,
    /// A debit far beyond anything the account ever holds: rejected (insufficient funds).
    Overdraft,
    /// A credit in EUR on a USD account: rejected (currency mismatch).
    CurrencyMismatch,
    /// A credit whose handler panics on every delivery until the fix: discarded to the
    /// on-failure destination, applied by the replay.
    PanicAlways,
}

impl PaymentKind {
    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            PaymentKind::Credit => "credit",
            PaymentKind::Debit => "debit (covered)",
            PaymentKind::Overdraft => "overdraft",
            PaymentKind::CurrencyMismatch => "currency mismatch (EUR on a USD account)",
            PaymentKind::PanicAlways => "credit, handler panics until the fix",
        }
    }

    /// Whether the contract posts it (the panicking kind once fixed); else it is rejected.
    pub fn applies(self) -> bool {
        !matches!(self, PaymentKind::Overdraft | PaymentKind::CurrencyMismatch)
    }
}

/// One distinct payment the producer wrote.
#[derive(Debug, Clone)]
pub struct PaymentSent {
    /// The payment.
    pub event: PaymentEvent,
    /// What it exercises.
    pub kind: PaymentKind,
}

/// A poison value: not a payment.
#[derive(Debug, Clone)]
pub struct Poison {
    /// The record's value.
    pub value: Vec<u8>,
    /// What is wrong with it.
    pub label: &'static str,
    /// The event id it names, if any (nothing may be posted under it).
    pub event_id: Option<String>,
    /// Whether it reuses an opening credit's event id for another amount (key reuse): the
    /// opening's entry is the only one under that id.
    pub reuses: bool,
}

/// How a write relates to the payment it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The first write (or a poison value).
    First,
    /// A producer retry under the same record key: a new offset, same partition.
    Retry,
    /// A producer retry under another record key, written to another partition.
    Elsewhere,
}

/// One record to produce.
#[derive(Debug, Clone)]
pub struct Write {
    /// The record key (the account, for a first write).
    pub key: String,
    /// The record's value.
    pub value: Vec<u8>,
    /// What it is.
    pub attempt: Attempt,
}

/// What the producer writes, and what the ledger starts from.
#[derive(Debug, Clone, Default)]
pub struct KafkaPlan {
    /// The accounts (`kafka-acct-{k}`).
    pub accounts: Vec<String>,
    /// One USD credit per account, posted before the topic is written, covering every debit on
    /// it: the account's currency and funds are set whatever order the pollers apply records in.
    pub openings: Vec<PaymentEvent>,
    /// Every distinct payment, once.
    pub payments: Vec<PaymentSent>,
    /// The poison values.
    pub poison: Vec<Poison>,
    /// The records in writing order, retries and poison included.
    pub writes: Vec<Write>,
}

/// `per_mille` of `n`, at least one when there are any.
fn share(n: usize, per_mille: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n * per_mille / 1000).max(1)
    }
}

fn shuffle<T>(rng: &mut Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i + 1));
    }
}

/// The payment kinds of `n` payments: two that panic (one under 20), 4 % overdrafts, 2 %
/// currency mismatches, then one debit in four, the rest credits.
fn kinds(n: usize) -> Vec<PaymentKind> {
    let panics = (n / 10).min(2);
    let overdrafts = share(n, 40).min(n - panics);
    let mismatches = share(n, 20).min(n - panics - overdrafts);
    (0..n)
        .map(|i| match i {
            i if i < panics => PaymentKind::PanicAlways,
            i if i < panics + overdrafts => PaymentKind::Overdraft,
            i if i < panics + overdrafts + mismatches => PaymentKind::CurrencyMismatch,
            i if i % 4 == 0 => PaymentKind::Debit,
            _ => PaymentKind::Credit,
        })
        .collect()
}

/// Plans `n` payments and `poison` poison values for run `run`, from `seed`.
pub fn plan(n: usize, poison: usize, seed: u64, run: &str) -> KafkaPlan {
    let mut rng = Rng::new(seed ^ 0x006b_6166_6b61);
    let accounts: Vec<String> = (0..(n / 10).clamp(2, 8)).map(|k| format!("kafka-acct-{k}")).collect();
    let mut plan = KafkaPlan { accounts, ..KafkaPlan::default() };
    let mut debits = vec![0; plan.accounts.len()];
    for (i, kind) in kinds(n).into_iter().enumerate() {
        let a = rng.below(plan.accounts.len());
        let (amount_cents, currency) = match kind {
            PaymentKind::Debit => {
                let amount = 100 + rng.below(4_900) as i64;
                debits[a] += amount;
                (-amount, "USD")
            }
            PaymentKind::Overdraft => (-100_000_000_000, "USD"),
            PaymentKind::CurrencyMismatch => (100 + rng.below(10_000) as i64, "EUR"),
            PaymentKind::Credit | PaymentKind::PanicAlways => (100 + rng.below(50_000) as i64, "USD"),
        };
        let event_id = match kind {
            PaymentKind::PanicAlways => format!("kafka-{run}-{PANIC_ALWAYS}-{i}"),
            _ => format!("kafka-{run}-pay-{i}"),
        };
        let event = PaymentEvent {
            event_id,
            account_id: plan.accounts[a].clone(),
            amount_cents,
            currency: currency.into(),
            receipt_email: None,
        };
        let value = serde_json::to_vec(&event).expect("payments serialise");
        plan.writes.push(Write { key: event.account_id.clone(), value, attempt: Attempt::First });
        plan.payments.push(PaymentSent { event, kind });
    }
    plan.openings = plan
        .accounts
        .iter()
        .zip(debits)
        .enumerate()
        .map(|(k, (account, debits))| PaymentEvent {
            event_id: format!("kafka-{run}-open-{k}"),
            account_id: account.clone(),
            amount_cents: debits + 1_000,
            currency: "USD".into(),
            receipt_email: None,
        })
        .collect();
    shuffle(&mut rng, &mut plan.writes);
    plan.retries(&mut rng);
    plan.poison(&mut rng, poison, run);
    plan
}

impl KafkaPlan {
    /// One payment in five written again after its first write, at a new offset (a producer
    /// that lost the answer); every other retry under another record key, in another partition.
    fn retries(&mut self, rng: &mut Rng) {
        for r in 0..self.payments.len() / 5 {
            let value = serde_json::to_vec(&self.payments[rng.below(self.payments.len())].event).expect("serialise");
            let first = self.writes.iter().position(|w| w.value == value).unwrap_or(0);
            let (key, attempt) = if r % 2 == 1 {
                (format!("{}-retry-{r}", self.writes[first].key), Attempt::Elsewhere)
            } else {
                (self.writes[first].key.clone(), Attempt::Retry)
            };
            let at = first + 1 + rng.below(self.writes.len() - first);
            self.writes.insert(at, Write { key, value, attempt });
        }
    }

    /// Poison of six kinds anywhere in the writing order, keyed by an account: undecodable
    /// values, invalid payments, and key reuse (an opening credit's event id for another
    /// amount: the opening is posted before anything is written, so the copy always comes
    /// second).
    fn poison(&mut self, rng: &mut Rng, poison: usize, run: &str) {
        for k in 0..poison {
            let id = format!("kafka-{run}-poison-{k}");
            let a = rng.below(self.accounts.len());
            let account = self.accounts[a].clone();
            let (value, label, event_id) = match k % 6 {
                0 => (format!("{{\"event_id\": \"{id}\", \"account_id\": ").into_bytes(), "value is not JSON", None),
                1 => {
                    let zero = json!({"event_id": id, "account_id": account, "amount_cents": 0, "currency": "USD"});
                    (zero.to_string().into_bytes(), "a payment of zero cents", Some(id))
                }
                2 => {
                    let opening = &self.openings[a];
                    let reused = PaymentEvent { amount_cents: opening.amount_cents + 1, ..opening.clone() };
                    let value = serde_json::to_vec(&reused).expect("payments serialise");
                    (value, "event id reused: an opening credit's, another amount", Some(reused.event_id))
                }
                3 => {
                    let no_id = json!({"account_id": account, "amount_cents": 700, "currency": "USD"});
                    (no_id.to_string().into_bytes(), "no event_id", None)
                }
                4 => (vec![0xff, 0xfe, b'{'], "value is not UTF-8", None),
                _ => {
                    let lower = json!({"event_id": id, "account_id": account, "amount_cents": 500, "currency": "usd"});
                    (lower.to_string().into_bytes(), "a lower-case currency", Some(id))
                }
            };
            let at = rng.below(self.writes.len() + 1);
            self.writes.insert(at, Write { key: account, value: value.clone(), attempt: Attempt::First });
            self.poison.push(Poison { value, label, event_id, reuses: k % 6 == 2 });
        }
    }

    /// Producer retries among the writes: under the same key, and under another.
    pub fn retries_written(&self) -> (usize, usize) {
        let count = |a: Attempt| self.writes.iter().filter(|w| w.attempt == a).count();
        (count(Attempt::Retry), count(Attempt::Elsewhere))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn a_kafka_plan_has_every_hostile_kind_and_covers_its_debits() {
        let p = plan(75, 5, 7, "t");
        assert_eq!(p.payments.len(), 75);
        assert_eq!(p.writes.len(), 75 + 15 + 5);
        assert_eq!(p.retries_written(), (8, 7));
        for kind in [
            PaymentKind::Credit,
            PaymentKind::Debit,
            PaymentKind::Overdraft,
            PaymentKind::CurrencyMismatch,
            PaymentKind::PanicAlways,
        ] {
            assert!(p.payments.iter().any(|s| s.kind == kind), "{kind:?}");
        }
        assert_eq!(p.payments.iter().filter(|s| s.kind == PaymentKind::PanicAlways).count(), 2);
        for poison in &p.poison {
            let parsed = std::str::from_utf8(&poison.value).ok().map(PaymentEvent::parse);
            if poison.reuses {
                // A payment, but under an opening credit's id with another amount: key reuse.
                let reused = parsed.unwrap().unwrap();
                let opening = p.openings.iter().find(|o| o.event_id == reused.event_id).unwrap();
                assert_eq!(reused.account_id, opening.account_id);
                assert_ne!(reused.amount_cents, opening.amount_cents);
                continue;
            }
            assert!(!matches!(parsed, Some(Ok(_))), "{}", poison.label);
        }
        assert_eq!(p.poison.iter().filter(|poison| poison.reuses).count(), 1, "key reuse among the five");
        // Every account's opening credit covers all its debits, in any order.
        let mut debits: HashMap<&str, i64> = HashMap::new();
        for s in p.payments.iter().filter(|s| s.kind == PaymentKind::Debit) {
            *debits.entry(&s.event.account_id).or_default() -= s.event.amount_cents;
        }
        for opening in &p.openings {
            assert!(opening.amount_cents > debits.get(opening.account_id.as_str()).copied().unwrap_or(0));
        }
        // A retry comes after the write it repeats.
        for (at, w) in p.writes.iter().enumerate().filter(|(_, w)| w.attempt != Attempt::First) {
            assert!(p.writes[..at].iter().any(|f| f.attempt == Attempt::First && f.value == w.value));
        }
    }
}
