//! An account's events in a batch decided on its balance item, as posting them one by one would
//! decide each ([`replay`]): what
//! [`BatchWrites::decide`](effectively_once_dynamodb::BatchWrites::decide) does for the ledger,
//! with no I/O.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once_dynamodb::{Item, Observed};

use super::{rejection, Rejection};
use crate::payment::PaymentEvent;

/// One account's events (in batch order) replayed on its balance item ([`replay`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Replay {
    /// Each event's rejection, as posting one by one records it; `None`: applied.
    pub(super) refusals: Vec<Option<Rejection>>,
    /// The applied events' sum and count.
    pub(super) sum: i64,
    pub(super) applied: i64,
    /// The currency the balance update sets on a new account; `None` when nothing applies.
    pub(super) currency: Option<String>,
    /// What the item must be for the decisions to hold.
    pub(super) condition: Condition,
    /// The item once they are committed.
    pub(super) after: Observed,
}

/// What an account's balance item must be for a replay's decisions to hold.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Condition {
    /// No item (a new account).
    Absent,
    /// Exactly this balance, in this currency (the item as seen): when a debit is refused for
    /// funds (its record holds the balance it was decided on), or when the bounds of
    /// [`Condition::Within`] cannot be computed in `i64`.
    Exactly { balance_cents: i64, currency: String },
    /// This currency, and a balance in `[lo, hi)` (no bound where `None`): every balance on
    /// which posting the events one by one decides each as the replay did, so another writer's
    /// change that crosses no threshold does not refuse the decisions ([`interval`]). Only a
    /// refused debit sets `hi`, and a replay that refuses one commits on [`Condition::Exactly`]
    /// instead: so a replay's `hi` is `None`, and `interval` keeps the bound for its own sake.
    Within { currency: String, lo: Option<i64>, hi: Option<i64> },
    /// No item, or this currency (assumed, with no debit to cover).
    Open { currency: String },
    /// This currency, and a balance of at least `needed` (assumed).
    Covers { currency: String, needed: i64 },
}

pub(super) type Expression = (&'static str, Option<HashMap<String, String>>, Option<Item>);

impl Condition {
    /// The condition expression, with only the names and values it uses (a condition check
    /// takes no others).
    pub(super) fn expression(&self) -> Expression {
        let names =
            |list: &[(&str, &str)]| Some(list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        let currency = |c: &str| (":currency".to_owned(), AttributeValue::S(c.to_owned()));
        let number = |name: &str, n: i64| (name.to_owned(), AttributeValue::N(n.to_string()));
        match self {
            Condition::Absent => ("attribute_not_exists(pk)", None, None),
            Condition::Exactly { balance_cents, currency: c } => (
                "#balance = :balance AND #currency = :currency",
                names(&[("#balance", "balance_cents"), ("#currency", "currency")]),
                Some([number(":balance", *balance_cents), currency(c)].into()),
            ),
            Condition::Within { currency: c, lo, hi } => {
                let expression = match (lo, hi) {
                    (None, None) => "#currency = :currency",
                    (Some(_), None) => "#currency = :currency AND #balance >= :lo",
                    (None, Some(_)) => "#currency = :currency AND #balance < :hi",
                    (Some(_), Some(_)) => "#currency = :currency AND #balance >= :lo AND #balance < :hi",
                };
                let bounds = [lo.map(|lo| number(":lo", lo)), hi.map(|hi| number(":hi", hi))];
                let values = bounds.into_iter().flatten().chain([currency(c)]).collect();
                if lo.is_none() && hi.is_none() {
                    (expression, names(&[("#currency", "currency")]), Some(values))
                } else {
                    (expression, names(&[("#balance", "balance_cents"), ("#currency", "currency")]), Some(values))
                }
            }
            Condition::Open { currency: c } => (
                "attribute_not_exists(pk) OR #currency = :currency",
                names(&[("#currency", "currency")]),
                Some([currency(c)].into()),
            ),
            Condition::Covers { currency: c, needed } => (
                "#currency = :currency AND #balance >= :needed",
                names(&[("#balance", "balance_cents"), ("#currency", "currency")]),
                Some([number(":needed", *needed), currency(c)].into()),
            ),
        }
    }
}

/// Replays `events` (one account's, in batch order, at least one) on its balance item as
/// `observed`, as posting them one by one would decide each: seen, on the item as seen, the
/// update then conditioned on its currency and on the interval of balances on which one by one
/// decides each event the same ([`interval`]; no item: on there being none); unseen, assuming the account holds the first
/// event's currency (events in another are rejected, the rest applied if the balance covers
/// their debits: the update conditioned on both, so a wrong assumption is refused and the item
/// seen). `None` for an item this cannot read (a balance not an integer, no currency): the
/// batch then posts the account's events one at a time.
pub(super) fn replay(events: &[&PaymentEvent], observed: &Observed) -> Option<Replay> {
    match observed {
        Observed::Unseen => assume(events),
        Observed::Seen(item) => replay_seen(events, item.as_ref()),
    }
}

/// [`replay`] on an unseen item; `None` when the applied amounts' running sum leaves `i64`
/// (events built past the contract's bounds), which one by one decides.
fn assume(events: &[&PaymentEvent]) -> Option<Replay> {
    let currency = events[0].currency.clone();
    let (mut sum, mut lowest, mut applied) = (0i64, 0i64, 0i64);
    let mut refusals = Vec::with_capacity(events.len());
    for event in events {
        if event.currency == currency {
            sum = sum.checked_add(event.amount_cents)?;
            lowest = lowest.min(sum);
            applied += 1;
            refusals.push(None);
        } else {
            // What `rejection` answers on an item of the assumed currency, with no item built.
            refusals.push(Some(Rejection::CurrencyMismatch { account_currency: currency.clone() }));
        }
    }
    let condition = if lowest < 0 {
        Condition::Covers { currency: currency.clone(), needed: lowest.checked_neg()? }
    } else {
        Condition::Open { currency: currency.clone() }
    };
    Some(Replay { refusals, sum, applied, currency: Some(currency), condition, after: Observed::Unseen })
}

/// How an event was decided, as far as the balances it holds on depend on it ([`interval`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Applied: this amount moved the balance (a debit needed it covered).
    Applied(i64),
    /// A debit of this amount refused for funds: the balance before it did not cover it.
    Overdrawn(i64),
    /// Refused for another currency: holds while the currency does, whatever the balance.
    OtherCurrency,
}

/// The balances `[lo, hi)` (no bound where `None`) on which posting events one by one, in
/// the account's currency, decides each as `steps` says, and only those: the applies need the
/// balance to cover every prefix sum of the applied amounts (`lo`: minus the lowest, when it is
/// below zero); a debit refused for funds needs the balance before it (the balance and the
/// applied amounts ahead of it) plus its amount below zero (`hi`: the least such threshold).
/// `None` when a sum leaves `i64`.
pub(super) fn interval(steps: &[Step]) -> Option<(Option<i64>, Option<i64>)> {
    let (mut prefix, mut lowest, mut hi) = (0i64, 0i64, None::<i64>);
    for step in steps {
        match *step {
            Step::Applied(amount) => {
                prefix = prefix.checked_add(amount)?;
                lowest = lowest.min(prefix);
            }
            Step::Overdrawn(amount) => {
                let threshold = amount.checked_add(prefix)?.checked_neg()?;
                hi = Some(hi.map_or(threshold, |hi| hi.min(threshold)));
            }
            Step::OtherCurrency => {}
        }
    }
    let lo = if lowest < 0 { Some(lowest.checked_neg()?) } else { None };
    Some((lo, hi))
}

/// [`replay`] on an item seen (`None`: no account).
fn replay_seen(events: &[&PaymentEvent], item: Option<&Item>) -> Option<Replay> {
    let read = |item: &Item| match (item.get("balance_cents"), item.get("currency")) {
        (Some(AttributeValue::N(n)), Some(AttributeValue::S(c))) => Some((n.parse::<i64>().ok()?, c.clone())),
        _ => None,
    };
    let mut state = match item {
        Some(item) => Some(read(item)?),
        None => None,
    };
    let seen = state.clone();
    let mut local = item.cloned();
    let (mut sum, mut applied, mut currency) = (0i64, 0i64, None);
    let mut refusals = Vec::with_capacity(events.len());
    let mut steps = Vec::with_capacity(events.len());
    for event in events {
        // The single post's condition: a debit needs the currency and the balance to cover it;
        // a credit the currency, or no account yet.
        let needed = event.amount_cents.checked_neg()?.max(0);
        let applies = match &state {
            Some((balance, held)) => *held == event.currency && *balance >= needed,
            None => needed == 0,
        };
        if !applies {
            let other = state.as_ref().is_some_and(|(_, held)| *held != event.currency);
            steps.push(if other { Step::OtherCurrency } else { Step::Overdrawn(event.amount_cents) });
            refusals.push(Some(rejection(event, local.as_ref())));
            continue;
        }
        let balance = state.as_ref().map_or(0, |(balance, _)| *balance).checked_add(event.amount_cents)?;
        state = Some((balance, event.currency.clone()));
        let count = local.as_ref().and_then(|item| match item.get("entry_count") {
            Some(AttributeValue::N(n)) => n.parse::<i64>().ok(),
            _ => None,
        });
        let entry = local.get_or_insert_with(Item::new);
        entry.insert("balance_cents".into(), AttributeValue::N(balance.to_string()));
        entry.entry("currency".into()).or_insert_with(|| AttributeValue::S(event.currency.clone()));
        entry.insert("entry_count".into(), AttributeValue::N((count.unwrap_or(0) + 1).to_string()));
        steps.push(Step::Applied(event.amount_cents));
        sum += event.amount_cents;
        applied += 1;
        currency.get_or_insert_with(|| event.currency.clone());
        refusals.push(None);
    }
    // The item seen is a hint: the decisions hold on every balance of the interval, so another
    // writer's post that crosses no threshold does not cancel them. But a debit refused for funds
    // records the balance it was decided on, and every event of the batch takes effect at the
    // commit, after any other writer's post: only the balance seen, exactly, makes that record
    // one by one's. No item: the account's first applied event sets its currency, so the
    // decisions hold only on there being none.
    let refused_for_funds = steps.iter().any(|step| matches!(step, Step::Overdrawn(_)));
    let condition = match seen {
        None => Condition::Absent,
        Some((balance_cents, currency)) => match interval(&steps) {
            Some((lo, hi)) if !refused_for_funds => Condition::Within { currency, lo, hi },
            _ => Condition::Exactly { balance_cents, currency },
        },
    };
    Some(Replay { refusals, sum, applied, currency, condition, after: Observed::Seen(local) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, amount_cents: i64, currency: &str) -> PaymentEvent {
        PaymentEvent {
            event_id: id.into(),
            account_id: "acct".into(),
            amount_cents,
            currency: currency.into(),
            receipt_email: None,
        }
    }

    fn item(balance_cents: &str, currency: &str, entry_count: &str) -> Item {
        [
            ("balance_cents".to_owned(), AttributeValue::N(balance_cents.into())),
            ("currency".to_owned(), AttributeValue::S(currency.into())),
            ("entry_count".to_owned(), AttributeValue::N(entry_count.into())),
        ]
        .into()
    }

    fn on(events: &[PaymentEvent], observed: &Observed) -> Option<Replay> {
        replay(&events.iter().collect::<Vec<_>>(), observed)
    }

    fn funds(balance_cents: i64) -> Option<Rejection> {
        Some(Rejection::InsufficientFunds { balance_cents })
    }

    fn held(currency: &str) -> Option<Rejection> {
        Some(Rejection::CurrencyMismatch { account_currency: currency.into() })
    }

    /// On a seen item each event is decided as its own post would be, on the balance the
    /// earlier ones left: a debit exactly covered applies, one cent more is rejected with the
    /// balance it saw; another currency is rejected; the update is conditioned on the item seen.
    #[test]
    fn a_seen_account_replays_each_event_on_the_balance_before_it() {
        let events = [
            event("1", -100, "USD"),
            event("2", -1, "USD"),
            event("3", 7, "EUR"),
            event("4", 5, "USD"),
            event("5", -5, "USD"),
            event("6", -1, "USD"),
        ];
        let replay = on(&events, &Observed::Seen(Some(item("100", "USD", "3")))).unwrap();
        assert_eq!(replay.refusals, vec![None, funds(0), held("USD"), None, None, funds(0)]);
        assert_eq!((replay.sum, replay.applied, replay.currency.as_deref()), (-100, 3, Some("USD")));
        // Applies need 100 (the first debit), the refused debits 101 or more: only 100 decides
        // so, and the refusals' records hold the balance seen, so exactly that.
        let exactly = Condition::Exactly { balance_cents: 100, currency: "USD".into() };
        assert_eq!(replay.condition, exactly);
        assert_eq!(replay.after, Observed::Seen(Some(item("0", "USD", "6"))));
    }

    /// A new account: debits are rejected with no funds until a credit opens it, in the
    /// credit's currency, which then holds; the update is conditioned on there being no item.
    #[test]
    fn a_new_account_is_opened_by_its_first_credit() {
        let events = [event("1", -3, "USD"), event("2", 10, "EUR"), event("3", 4, "USD"), event("4", -10, "EUR")];
        let replay = on(&events, &Observed::Seen(None)).unwrap();
        assert_eq!(replay.refusals, vec![funds(0), None, held("EUR"), None]);
        assert_eq!((replay.sum, replay.applied, replay.currency.as_deref()), (0, 2, Some("EUR")));
        assert_eq!(replay.condition, Condition::Absent);
        assert_eq!(replay.after, Observed::Seen(Some(item("0", "EUR", "2"))));
    }

    /// Nothing applied: no currency to set (the ledger then checks the item instead of updating
    /// it), and the item stays as seen, absent included.
    #[test]
    fn nothing_applied_leaves_the_item_as_seen() {
        let replay = on(&[event("1", -3, "USD")], &Observed::Seen(None)).unwrap();
        assert_eq!((replay.refusals, replay.applied, replay.currency), (vec![funds(0)], 0, None));
        assert_eq!(replay.after, Observed::Seen(None));
        let seen = Observed::Seen(Some(item("2", "USD", "1")));
        let replay = on(&[event("1", -3, "USD"), event("2", 1, "GBP")], &seen).unwrap();
        assert_eq!(replay.refusals, vec![funds(2), held("USD")]);
        assert_eq!((replay.applied, replay.sum, replay.currency, replay.after), (0, 0, None, seen));
    }

    /// An item this cannot read is not replayed: its events go one at a time.
    #[test]
    fn an_unreadable_item_is_not_replayed() {
        let events = [event("1", 5, "USD")];
        let mut no_currency = item("1", "USD", "1");
        no_currency.remove("currency");
        for bad in [item("1.5", "USD", "1"), item("x", "USD", "1"), no_currency] {
            assert!(on(&events, &Observed::Seen(Some(bad.clone()))).is_none(), "{bad:?}");
        }
        let overflow = on(&events, &Observed::Seen(Some(item(&i64::MAX.to_string(), "USD", "1"))));
        assert!(overflow.is_none(), "a sum past i64 is left to DynamoDB");
        let count_missing = [("balance_cents".to_owned(), AttributeValue::N("1".into()))]
            .into_iter()
            .chain([("currency".to_owned(), AttributeValue::S("USD".into()))])
            .collect::<Item>();
        let replay = on(&events, &Observed::Seen(Some(count_missing))).unwrap();
        assert_eq!(replay.after, Observed::Seen(Some(item("6", "USD", "1"))), "a missing count starts at 0");
    }

    /// Unseen, the account is assumed to hold the first event's currency: the others are
    /// rejected as another currency, and the update is conditioned on that currency and on the
    /// balance covering the lowest running sum (no debit: a new account passes too).
    #[test]
    fn an_unseen_account_is_assumed_in_its_first_events_currency() {
        let events = [event("1", 10, "USD"), event("2", 3, "EUR"), event("3", -25, "USD"), event("4", 4, "USD")];
        let replay = on(&events, &Observed::Unseen).unwrap();
        assert_eq!(replay.refusals, vec![None, held("USD"), None, None]);
        assert_eq!((replay.sum, replay.applied, replay.currency.as_deref()), (-11, 3, Some("USD")));
        assert_eq!(replay.condition, Condition::Covers { currency: "USD".into(), needed: 15 });
        assert_eq!(replay.after, Observed::Unseen);
        let credits = on(&[event("1", 1, "EUR"), event("2", -1, "EUR")], &Observed::Unseen).unwrap();
        assert_eq!(credits.condition, Condition::Open { currency: "EUR".into() }, "never below zero");
    }

    /// The interval's bounds: a refused debit's threshold (the balance before it, with the
    /// applies ahead of it, must stay short of it), the applies' lower bound (the lowest prefix
    /// of the applied amounts covered), both, and none (credits, another currency).
    #[test]
    fn the_decisions_hold_on_an_interval_of_balances() {
        use Step::{Applied, OtherCurrency, Overdrawn};
        assert_eq!(interval(&[Overdrawn(-150), Applied(5)]), Some((None, Some(150))));
        assert_eq!(interval(&[Applied(20), Overdrawn(-150), Overdrawn(-130)]), Some((None, Some(110))));
        assert_eq!(interval(&[Applied(-30), Applied(10), Applied(-50)]), Some((Some(70), None)));
        assert_eq!(interval(&[Applied(-60), Overdrawn(-50), Applied(20)]), Some((Some(60), Some(110))));
        assert_eq!(interval(&[Applied(5), OtherCurrency, Applied(-5)]), Some((None, None)));
        assert_eq!(interval(&[]), Some((None, None)));
        // An apply that brings a prefix to exactly zero needs no cover.
        assert_eq!(interval(&[Applied(3), Applied(-3)]), Some((None, None)));
        // A replay commits on its interval unless it refuses a debit for funds: that refusal's
        // record holds the balance seen, which only that exact balance at the commit makes true.
        let replay = on(&[event("1", -150, "USD"), event("2", 5, "USD"), event("3", 1, "EUR")], &seen(100)).unwrap();
        assert_eq!(replay.refusals, vec![funds(100), None, held("USD")]);
        assert_eq!(replay.condition, Condition::Exactly { balance_cents: 100, currency: "USD".into() });
        let replay = on(&[event("1", -60, "USD"), event("2", -50, "USD")], &seen(100)).unwrap();
        assert_eq!(replay.condition, Condition::Exactly { balance_cents: 100, currency: "USD".into() });
        let replay = on(&[event("1", -60, "USD"), event("2", 7, "EUR"), event("3", -30, "USD")], &seen(100)).unwrap();
        assert_eq!(replay.refusals, vec![None, held("USD"), None]);
        assert_eq!(replay.condition, Condition::Within { currency: "USD".into(), lo: Some(90), hi: None });
    }

    /// A sum past `i64` has no interval: the update is conditioned on the item as seen.
    #[test]
    fn an_interval_past_i64_falls_back_to_the_balance_seen() {
        assert_eq!(interval(&[Step::Applied(i64::MAX), Step::Applied(1)]), None);
        assert_eq!(interval(&[Step::Applied(i64::MIN), Step::Applied(-1)]), None);
        assert_eq!(interval(&[Step::Applied(i64::MIN)]), None, "no cover can be named");
        assert_eq!(interval(&[Step::Applied(-1), Step::Overdrawn(i64::MIN)]), None);
        assert_eq!(interval(&[Step::Overdrawn(i64::MIN + 1)]), Some((None, Some(i64::MAX))));
        let events = [event("1", -1, "USD"), event("2", i64::MIN + 1, "USD")];
        let replay = on(&events, &seen(1)).unwrap();
        assert_eq!(replay.refusals, vec![None, funds(0)]);
        assert_eq!(replay.condition, Condition::Exactly { balance_cents: 1, currency: "USD".into() });
    }

    /// Against posting one by one on every balance near the one seen: the decisions made on the
    /// balance seen are one by one's on a balance if and only if it lies in the interval.
    /// (Credits, amounts past DynamoDB's numbers or i64 aside: random small batches.)
    #[test]
    fn the_interval_holds_exactly_where_one_by_one_decides_the_same() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let decisions = |replay: &Replay| -> Vec<bool> { replay.refusals.iter().map(Option::is_some).collect() };
        for _ in 0..400 {
            let events: Vec<PaymentEvent> = (0..1 + next(6))
                .map(|i| {
                    let amount = next(41) as i64 - 20;
                    let currency = if next(5) == 0 { "EUR" } else { "USD" };
                    event(&i.to_string(), if amount == 0 { 1 } else { amount }, currency)
                })
                .collect();
            let hint = next(40) as i64;
            let on_hint = on(&events, &seen(hint)).unwrap();
            // The interval itself, whether the replay commits on it or (a debit refused for
            // funds) on the balance seen exactly.
            let steps = steps_of(&events, hint);
            let Some((lo, hi)) = interval(&steps) else { panic!("{on_hint:?}") };
            let refused_for_funds = steps.iter().any(|step| matches!(step, Step::Overdrawn(_)));
            let exactly = Condition::Exactly { balance_cents: hint, currency: "USD".into() };
            assert_eq!(refused_for_funds, on_hint.condition == exactly, "{events:?} seen at {hint}: {on_hint:?}");
            // A balance is never below zero (every debit is conditioned on covering it).
            for balance in 0..90 {
                let same = decisions(&on(&events, &seen(balance)).unwrap()) == decisions(&on_hint);
                let inside = lo.is_none_or(|lo| balance >= lo) && hi.is_none_or(|hi| balance < hi);
                assert_eq!(same, inside, "{events:?} seen at {hint}, posted on {balance}: [{lo:?}, {hi:?})");
            }
        }
    }

    fn seen(balance_cents: i64) -> Observed {
        Observed::Seen(Some(item(&balance_cents.to_string(), "USD", "1")))
    }

    /// The steps a replay on a USD balance takes, told from its refusals (the test's amounts
    /// are never zero).
    fn steps_of(events: &[PaymentEvent], balance_cents: i64) -> Vec<Step> {
        let replay = on(events, &seen(balance_cents)).unwrap();
        events
            .iter()
            .zip(&replay.refusals)
            .map(|(event, refusal)| match refusal {
                None => Step::Applied(event.amount_cents),
                Some(Rejection::CurrencyMismatch { .. }) => Step::OtherCurrency,
                Some(_) => Step::Overdrawn(event.amount_cents),
            })
            .collect()
    }

    /// Each condition sends only the names and values it uses.
    #[test]
    fn each_condition_names_only_what_it_uses() {
        let (absent, names, values) = Condition::Absent.expression();
        assert_eq!((absent, names, values), ("attribute_not_exists(pk)", None, None));
        let (exactly, names, values) = Condition::Exactly { balance_cents: 7, currency: "USD".into() }.expression();
        assert_eq!(exactly, "#balance = :balance AND #currency = :currency");
        assert_eq!(names.unwrap().len(), 2);
        let values = values.unwrap();
        assert_eq!(
            (values[":balance"].clone(), values[":currency"].clone()),
            (AttributeValue::N("7".into()), AttributeValue::S("USD".into()))
        );
        let (open, names, values) = Condition::Open { currency: "EUR".into() }.expression();
        assert_eq!(
            (open, names.unwrap().len(), values.unwrap().len()),
            ("attribute_not_exists(pk) OR #currency = :currency", 1, 1)
        );
        let within = |lo, hi| Condition::Within { currency: "USD".into(), lo, hi }.expression();
        let (expression, names, values) = within(None, None);
        assert_eq!((expression, names.unwrap().len(), values.unwrap().len()), ("#currency = :currency", 1, 1));
        let (expression, names, values) = within(Some(3), None);
        assert_eq!(expression, "#currency = :currency AND #balance >= :lo");
        let values = values.unwrap();
        assert_eq!((names.unwrap().len(), values.len(), values[":lo"].clone()), (2, 2, AttributeValue::N("3".into())));
        let (expression, names, values) = within(None, Some(-4));
        assert_eq!(expression, "#currency = :currency AND #balance < :hi");
        let values = values.unwrap();
        assert_eq!((names.unwrap().len(), values.len(), values[":hi"].clone()), (2, 2, AttributeValue::N("-4".into())));
        let (expression, names, values) = within(Some(1), Some(9));
        assert_eq!(expression, "#currency = :currency AND #balance >= :lo AND #balance < :hi");
        let values = values.unwrap();
        assert_eq!((names.unwrap().len(), values.len()), (2, 3));
        assert_eq!(
            (values[":lo"].clone(), values[":hi"].clone()),
            (AttributeValue::N("1".into()), AttributeValue::N("9".into()))
        );
        assert_eq!(values[":currency"], AttributeValue::S("USD".into()));
        let (covers, names, values) = Condition::Covers { currency: "EUR".into(), needed: 3 }.expression();
        assert_eq!(covers, "#currency = :currency AND #balance >= :needed");
        assert_eq!((names.unwrap().len(), values.unwrap()[":needed"].clone()), (2, AttributeValue::N("3".into())));
    }
}
