//! A group's item as seen: a refused shared write of a decided group, what is observed of its
//! item, which cancellations go uncounted, and the per-group [`States`].

use super::*;

fn balance(cents: &str) -> Item {
    [("balance_cents".to_owned(), aws_sdk_dynamodb::types::AttributeValue::N(cents.to_owned()))].into()
}

/// Group 0 (members 0, 1) decided on `on`, its shared write (action 4) refused with `item`.
fn read_decided(on: &Observed, item: Option<Item>) -> Verdicts {
    let (owners, groups, members) = owners();
    let mut codes = vec!["None"; 7];
    codes[4] = "ConditionalCheckFailed";
    let cancellation = match item {
        Some(item) => Cancellation::with_item(&codes, 4, item),
        None => Cancellation::of_codes(&codes),
    };
    read(&owners, &groups, &[Some(on), None], &members, &cancellation)
}

/// A decided group whose shared write is refused is sent again, with the item it returned to be
/// decided on, not alone; the rest of the transaction is sent again too.
#[test]
fn a_refused_decided_group_is_sent_again_on_the_item_seen() {
    let verdicts = read_decided(&Observed::Unseen, Some(balance("100")));
    assert_eq!(verdicts.observed, vec![(0, Observed::Seen(Some(balance("100"))))]);
    assert_eq!((verdicts.again, verdicts.alone), (vec![0, 1, 2], vec![]));
    let seen_again = read_decided(&Observed::Seen(Some(balance("100"))), Some(balance("300")));
    assert_eq!(seen_again.observed, vec![(0, Observed::Seen(Some(balance("300"))))]);
    let absent = read_decided(&Observed::Seen(Some(balance("100"))), None);
    assert_eq!(absent.observed, vec![(0, Observed::Seen(None))], "no item returned: the item is gone");
}

/// Conditioned on no item and refused with no item returned (a server that returns none): the
/// group goes alone rather than deciding again on what it cannot see.
#[test]
fn a_group_refused_on_no_item_with_no_item_returned_goes_alone() {
    let verdicts = read_decided(&Observed::Seen(None), None);
    assert!(verdicts.observed.is_empty());
    assert_eq!((verdicts.alone, verdicts.again), (vec![0, 1], vec![2]));
    let returned = read_decided(&Observed::Seen(None), Some(balance("5")));
    assert_eq!(returned.observed, vec![(0, Observed::Seen(Some(balance("5"))))]);
}

#[test]
fn observing_keeps_the_item_returned_or_none_unless_it_cannot_be() {
    assert_eq!(observe(&Observed::Unseen, None), Some(Observed::Seen(None)));
    assert_eq!(observe(&Observed::Seen(None), Some(&balance("1"))), Some(Observed::Seen(Some(balance("1")))));
    assert_eq!(observe(&Observed::Seen(Some(balance("1"))), None), Some(Observed::Seen(None)));
    assert_eq!(observe(&Observed::Seen(None), None), None);
}

/// Only a cancellation by decided groups finding their item otherwise (seen for the first
/// time, or changed across a threshold), and nothing else, goes uncounted.
#[test]
fn only_groups_finding_their_item_otherwise_go_uncounted() {
    let unseen = Observed::Unseen;
    let seen = Observed::Seen(Some(balance("100")));
    let first = read_decided(&unseen, Some(balance("100")));
    assert!(only_sights(&first));
    let again = read_decided(&seen, Some(balance("300")));
    assert!(only_sights(&again), "a change across a threshold: bounded per group (States::changed)");
    let quiet = read_codes(&["None"; 7]);
    assert!(!only_sights(&quiet), "no group seen");
    let (owners, groups, members) = owners();
    let mut codes = vec!["None"; 7];
    codes[4] = "ConditionalCheckFailed";
    for (at, code) in [(1, "ConditionalCheckFailed"), (5, "ConditionalCheckFailed"), (6, "TransactionConflict")] {
        let mut codes = codes.clone();
        codes[at] = code;
        let verdicts = read(&owners, &groups, &[Some(&unseen), None], &members, &Cancellation::of_codes(&codes));
        assert!(!only_sights(&verdicts), "{codes:?}");
    }
    let mut throttled = codes.clone();
    throttled[6] = "ThrottlingError";
    let verdicts = read(&owners, &groups, &[Some(&unseen), None], &members, &Cancellation::of_codes(&throttled));
    assert!(!only_sights(&verdicts), "throttled");
}

/// Each group's changes are counted apart, once each.
#[test]
fn states_count_each_groups_changes() {
    let mut states = States::default();
    assert_eq!((states.changed("a"), states.changed("a"), states.changed("b"), states.changed("a")), (1, 2, 1, 3));
}

/// A group's item is unseen until set, and then what was set last.
#[test]
fn states_remember_each_groups_item() {
    let mut states = States::default();
    assert_eq!(states.get("g"), &Observed::Unseen);
    states.set("g", Observed::Seen(None));
    states.set("h", Observed::Seen(Some(balance("7"))));
    states.set("g", Observed::Seen(Some(balance("9"))));
    assert_eq!(states.get("g"), &Observed::Seen(Some(balance("9"))));
    assert_eq!(states.get("h"), &Observed::Seen(Some(balance("7"))));
    assert_eq!(states.get("k"), &Observed::Unseen);
}
