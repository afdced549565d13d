//! The schedule on its own: members are `(key, group, hash)`, answers are made up, nothing is
//! sent.

use super::*;
use crate::transaction::{MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS};

fn entry<'m>(key: &'m str, group: Option<&'m str>, hash: &'m str) -> Entry<'m> {
    Entry { key, group, lane: None, hash: Some(hash) }
}

/// A pass as run: the members sent, and those answered without a request.
type Seen = (Vec<usize>, Vec<(usize, Early)>);

/// Runs every pass (failing if they do not end), answering the first member sent of each key with `fresh(index)`: `true`
/// commits it, `false` fails it with no verdict (its copies in the pass are replays, or fail
/// alike). The passes, each as (sent, answered).
fn run(entries: &[Entry<'_>], fresh: impl Fn(usize) -> bool) -> Vec<Seen> {
    let mut passes = Passes::new(entries);
    let mut seen = Vec::new();
    while let Some(pass) = passes.next() {
        // Each pass settles at least one member: never more passes than members.
        assert!(seen.len() < entries.len(), "the passes do not end: {seen:?}");
        let (first, _) = copies(pass.send.iter().map(|&index| (index, entries[index].key)));
        for index in first {
            if fresh(index) {
                passes.taken(index);
            } else {
                passes.undecided(index);
            }
        }
        seen.push((pass.send, pass.answered));
    }
    seen
}

/// With no key twice, the whole batch is one pass, sent in order.
#[test]
fn distinct_keys_are_one_pass() {
    let entries = [entry("a", Some("g"), "1"), entry("b", Some("g"), "2"), entry("c", None, "3")];
    assert_eq!(run(&entries, |_| true), vec![(vec![0, 1, 2], vec![])]);
}

/// A member that could not be hashed is answered already: never pending.
#[test]
fn an_unhashed_member_is_never_sent() {
    let entries = [Entry { key: "a", group: None, lane: None, hash: None }, entry("b", None, "2")];
    assert_eq!(run(&entries, |_| true), vec![(vec![1], vec![])]);
}

/// A copy with the same payload stays in the pass (answered from its first copy there); a copy
/// with another payload waits for the next pass, where it is key reuse with no request.
#[test]
fn a_copy_of_another_payload_waits_and_is_key_reuse() {
    let entries = [entry("a", None, "1"), entry("a", None, "1"), entry("a", None, "2")];
    let passes = run(&entries, |_| true);
    assert_eq!(passes, vec![(vec![0, 1], vec![]), (vec![], vec![(2, Early::KeyReused)])]);
}

/// In a later pass, a copy with the first's payload is a replay of the member that took it.
#[test]
fn a_later_copy_of_the_same_payload_replays_the_member_that_took_the_key() {
    let entries = [entry("a", None, "1"), entry("a", None, "2"), entry("a", None, "1")];
    let passes = run(&entries, |_| true);
    assert_eq!(passes[0], (vec![0], vec![]));
    assert_eq!(passes[1], (vec![], vec![(1, Early::KeyReused), (2, Early::Replay(0))]));
    assert_eq!(passes.len(), 2);
}

/// A waiting member takes the later members of its group with it, so the group keeps its order;
/// other groups go on.
#[test]
fn a_waiting_member_defers_its_group_later_members() {
    let entries = [
        entry("a", Some("g"), "1"),
        entry("a", Some("g"), "2"),
        entry("b", Some("g"), "3"),
        entry("c", Some("h"), "4"),
    ];
    let passes = run(&entries, |_| true);
    assert_eq!(passes[0], (vec![0, 3], vec![]));
    assert_eq!(passes[1], (vec![2], vec![(1, Early::KeyReused)]));
}

/// A key whose first member failed with no verdict holds its copies and their groups back: they
/// are not started, and their own groups' later members wait too.
#[test]
fn an_undecided_first_copy_holds_its_key_and_groups_back() {
    let entries = [
        entry("a", Some("g"), "1"),
        entry("a", Some("h"), "2"),
        entry("b", Some("h"), "3"),
        entry("c", Some("k"), "4"),
    ];
    let passes = run(&entries, |index| index != 0);
    assert_eq!(passes[0], (vec![0, 3], vec![]));
    assert_eq!(passes[1], (vec![], vec![(1, Early::HeldBack), (2, Early::HeldBack)]));
}

/// A key and a group spelled alike are different names: an undecided key holds back no group.
#[test]
fn a_group_named_like_an_undecided_key_is_not_held() {
    let entries = [entry("x", None, "1"), entry("x", None, "2"), entry("y", Some("x"), "3")];
    let passes = run(&entries, |index| index != 0);
    assert_eq!(passes[0], (vec![0, 2], vec![]));
    assert_eq!(passes[1], (vec![], vec![(1, Early::HeldBack)]));
}

/// A member failed before any pass (its payload did not hash) holds its key's later members.
#[test]
fn a_member_undecided_before_the_passes_holds_its_key() {
    let entries =
        [Entry { key: "a", group: None, lane: None, hash: None }, entry("a", None, "1"), entry("b", None, "2")];
    let mut passes = Passes::new(&entries);
    passes.undecided(0);
    let pass = passes.next().unwrap();
    assert_eq!((pass.send, pass.answered), (vec![2], vec![(1, Early::HeldBack)]));
    assert!(passes.next().is_none());
}

#[test]
fn copies_are_answered_from_the_first_of_their_key() {
    let (live, copies) = copies([(4, "a"), (5, "b"), (7, "a"), (9, "a")]);
    assert_eq!(live, vec![4, 5]);
    assert_eq!(copies, vec![(7, 4), (9, 4)]);
}

/// Groups keep the order of their first member; ungrouped members are groups of one.
#[test]
fn members_group_in_order_of_first_appearance() {
    let entries = [
        entry("a", Some("g"), "1"),
        entry("b", None, "2"),
        entry("c", Some("h"), "3"),
        entry("d", Some("g"), "4"),
        entry("e", None, "5"),
    ];
    assert_eq!(groups(&entries, &[0, 1, 2, 3, 4]), vec![vec![0, 3], vec![1], vec![2], vec![4]]);
    assert_eq!(groups(&entries, &[3, 2]), vec![vec![3], vec![2]]);
}

/// A member in `group` and `lane`.
fn laned<'m>(key: &'m str, group: Option<&'m str>, lane: &'m str, hash: &'m str) -> Entry<'m> {
    Entry { lane: Some(lane), ..entry(key, group, hash) }
}

/// Groups sharing a lane, directly or through another group or an ungrouped member, are one
/// unit, in order of first appearance; a later group joining two units merges them.
#[test]
fn units_join_groups_sharing_a_lane() {
    let entries = [
        laned("a", Some("g"), "L", "1"),
        laned("b", Some("h"), "M", "2"),
        entry("c", Some("k"), "3"),
        laned("d", Some("h"), "L", "4"),
        laned("e", None, "M", "5"),
        laned("f", Some("m"), "N", "6"),
        entry("x", None, "7"),
    ];
    let all: Vec<usize> = (0..entries.len()).collect();
    let units = units(&entries, &all);
    assert_eq!(units, vec![vec![vec![0], vec![1, 3], vec![4]], vec![vec![2]], vec![vec![5]], vec![vec![6]]]);
    let merging = [
        laned("a", Some("g"), "L", "1"),
        laned("b", Some("h"), "M", "2"),
        entry("c", Some("k"), "3"),
        laned("d", Some("k"), "M", "4"),
        laned("e", Some("k"), "L", "5"),
    ];
    assert_eq!(super::units(&merging, &[0, 1, 2, 3, 4]), vec![vec![vec![0], vec![1], vec![2, 3, 4]]]);
    // With no lanes, each group is a unit of its own, as the groups go.
    let plain = grouped();
    let live = [0, 1, 2, 3, 4];
    let alone: Vec<Vec<Vec<usize>>> = groups(&plain, &live).into_iter().map(|group| vec![group]).collect();
    assert_eq!(super::units(&plain, &live), alone);
}

/// A unit too large is cut at a batch position: each group takes its members before it, at
/// least one member in all.
#[test]
fn a_unit_too_large_is_cut_in_batch_order() {
    let unit = [vec![0, 3, 5], vec![1, 4], vec![2]];
    assert_eq!(cut(&unit, 6), vec![3, 2, 1]);
    assert_eq!(cut(&unit, 4), vec![2, 1, 1]);
    assert_eq!(cut(&unit, 2), vec![1, 1, 0]);
    assert_eq!(cut(&unit, 1), vec![1, 0, 0]);
    assert_eq!(cut(&unit, 0), vec![1, 0, 0], "at least one");
    assert_eq!(cut(&[vec![7, 9, 12]], 2), vec![2], "a group alone is cut as a chunk of it");
}

/// A member undecided before the passes holds its lane's later members of other groups back,
/// and they hold their own groups' later members in turn.
#[test]
fn a_member_undecided_before_the_passes_holds_its_lane() {
    let entries = [
        Entry { key: "a", group: Some("g"), lane: Some("L"), hash: None },
        laned("b", Some("h"), "L", "2"),
        entry("c", Some("h"), "3"),
        entry("d", Some("k"), "4"),
    ];
    let mut passes = Passes::new(&entries);
    passes.undecided(0);
    let pass = passes.next().unwrap();
    assert_eq!((pass.send, pass.answered), (vec![3], vec![(1, Early::HeldBack), (2, Early::HeldBack)]));
}

/// A copy of another payload waiting for the next pass takes its lane's later members with it.
#[test]
fn a_waiting_member_defers_its_lane_later_members() {
    let entries = [
        entry("a", None, "1"),
        laned("a", Some("g"), "L", "2"),
        laned("b", Some("h"), "L", "3"),
        entry("c", Some("k"), "4"),
    ];
    let passes = run(&entries, |_| true);
    assert_eq!(passes, vec![(vec![0, 3], vec![]), (vec![2], vec![(1, Early::KeyReused)])]);
}

/// A chunk too large shrinks in proportion to the actions it built, by at least one member and
/// to at least one.
#[test]
fn a_chunk_too_large_shrinks_in_proportion() {
    assert_eq!(shrink(50, 200), 25);
    assert_eq!(shrink(10, 101), 9, "by at least one");
    assert_eq!(shrink(3, 10_000), 1, "to at least one");
    assert_eq!(shrink(2, 0), 1);
}

/// Parts fill a transaction up to 100 actions and 4 MB; the one that would pass either starts
/// the next; a part alone over the limits is a transaction of its own, never an empty one before it.
#[test]
fn parts_pack_in_order_within_the_limits() {
    assert_eq!(pack(&[(60, 10), (40, 10), (1, 10)]), vec![0, 0, 1]);
    assert_eq!(pack(&[(60, 10), (41, 10), (30, 10)]), vec![0, 1, 1]);
    let half = MAX_TRANSACTION_BYTES / 2;
    assert_eq!(pack(&[(1, half), (1, half), (1, 1)]), vec![0, 0, 1]);
    assert_eq!(pack(&[(MAX_TRANSACTION_ITEMS + 5, 1), (1, 1)]), vec![0, 1]);
    assert_eq!(pack(&[]), Vec::<usize>::new());
}

/// Two members of group 0 (0, 1) and an ungrouped one (2): actions are
/// `[W0, R0, W1, R1, S0, W2, R2]`.
fn owners() -> (Vec<Owner>, Vec<Vec<usize>>, Vec<usize>) {
    let owners = vec![
        Owner::Write(0),
        Owner::Record(0),
        Owner::Write(1),
        Owner::Record(1),
        Owner::Shared(0),
        Owner::Write(2),
        Owner::Record(2),
    ];
    (owners, vec![vec![0, 1], vec![2]], vec![0, 1, 2])
}

fn read_codes(codes: &[&str]) -> Verdicts {
    let (owners, groups, members) = owners();
    read(&owners, &groups, &[None, None], &members, &Cancellation::of_codes(codes))
}

/// A member whose record's condition failed is a duplicate, answered from that action's item;
/// the others were cancelled by it and are sent again.
#[test]
fn a_record_that_blocks_is_a_duplicate_and_the_rest_go_again() {
    let verdicts = read_codes(&["None", "ConditionalCheckFailed", "None", "None", "None", "None", "None"]);
    assert_eq!(verdicts.duplicates, vec![(0, 1)]);
    assert_eq!((verdicts.again, verdicts.alone, verdicts.failed), (vec![1, 2], vec![], vec![]));
    assert!(!verdicts.conflicted && verdicts.failure.is_none());
}

/// A member's own write refused: it goes alone, where its own answer applies.
#[test]
fn a_members_own_refused_write_sends_it_alone() {
    let verdicts = read_codes(&["None", "None", "None", "None", "None", "ConditionalCheckFailed", "None"]);
    assert_eq!((verdicts.alone, verdicts.again), (vec![2], vec![0, 1]));
}

/// A group's shared write refused: every member of the group goes alone, in order.
#[test]
fn a_refused_shared_write_sends_its_group_alone() {
    let verdicts = read_codes(&["None", "None", "None", "None", "ConditionalCheckFailed", "None", "None"]);
    assert_eq!((verdicts.alone, verdicts.again), (vec![0, 1], vec![2]));
}

/// A duplicate is answered as one even when its own write failed too.
#[test]
fn a_duplicate_is_not_also_sent_alone() {
    let verdicts = read_codes(&["ConditionalCheckFailed", "ConditionalCheckFailed", "None"]);
    assert_eq!(verdicts.duplicates, vec![(0, 1)]);
    assert_eq!((verdicts.alone, verdicts.again), (vec![], vec![1, 2]));
}

/// A conflict is sent again (and backed off); throttling and a full item collection fail every
/// member not otherwise answered, retryable; a refused request sends each alone.
#[test]
fn failures_fail_the_rest_or_send_them_alone() {
    let conflict = read_codes(&["None", "None", "TransactionConflict"]);
    assert!(conflict.conflicted);
    assert_eq!((conflict.again, conflict.failed), (vec![0, 1, 2], vec![]));
    let full =
        read_codes(&["ItemCollectionSizeLimitExceeded", "None", "None", "None", "None", "ConditionalCheckFailed"]);
    assert_eq!(full.failure, Some(StoreErrorKind::Misconfigured));
    assert_eq!((full.failed, full.alone), (vec![0, 1], vec![2]));
    let throttled = read_codes(&["TransactionConflict", "ThrottlingError"]);
    assert!(throttled.conflicted);
    assert_eq!((throttled.failure, throttled.failed), (Some(StoreErrorKind::Throttled), vec![0, 1, 2]));
    let refused = read_codes(&["ValidationError"]);
    assert_eq!((refused.alone, refused.failed, refused.again), (vec![0, 1, 2], vec![], vec![]));
    let unknown = read_codes(&["Mystery"]);
    assert_eq!((unknown.failure, unknown.failed), (Some(StoreErrorKind::Unavailable), vec![0, 1, 2]));
}

fn grouped() -> Vec<Entry<'static>> {
    vec![
        entry("a", Some("g"), "1"),
        entry("b", Some("g"), "2"),
        entry("c", Some("g"), "3"),
        entry("d", Some("h"), "4"),
        entry("e", None, "5"),
    ]
}

/// A group's undecided member holds back its later members, not its earlier ones nor other
/// groups'; the earliest undecided member counts.
#[test]
fn an_undecided_member_holds_its_group_later_members() {
    let entries = grouped();
    let mut rounds = Rounds::new(&entries);
    rounds.undecided(1);
    assert!(!rounds.held(0) && !rounds.held(1) && rounds.held(2));
    assert!(!rounds.held(3) && !rounds.held(4));
    let end = rounds.end_round(vec![0, 2, 3, 4], true);
    assert_eq!((end.held_back, end.live), (vec![2], vec![0, 3, 4]));
    rounds.undecided(2);
    rounds.undecided(0);
    assert!(rounds.held(1), "the earliest undecided member counts");
    rounds.undecided(4);
    assert!(!rounds.held(4), "an ungrouped member holds nothing");
}

/// A member gone alone takes its group's later members alone with it, in batch order; the
/// earlier ones and other groups stay in the rounds.
#[test]
fn a_member_gone_alone_takes_its_group_later_members() {
    let entries = grouped();
    let mut rounds = Rounds::new(&entries);
    rounds.go_alone([1]);
    let end = rounds.end_round(vec![4, 2, 0, 3], false);
    assert_eq!(end.live, vec![0, 3, 4], "sorted");
    assert!(end.held_back.is_empty() && end.exhausted.is_empty());
    rounds.go_alone([1]);
    assert_eq!(rounds.alone(), vec![1, 2], "once each, in order");
    assert!(rounds.alone().is_empty());
}

/// Two groups joined by a lane (`g`: 0, 4; `h`: 1, 2; lane `L`: 0, 1) and a group of their
/// own (`k`: 3).
fn laned_groups() -> Vec<Entry<'static>> {
    vec![
        laned("a", Some("g"), "L", "1"),
        laned("b", Some("h"), "L", "2"),
        entry("c", Some("h"), "3"),
        entry("d", Some("k"), "4"),
        entry("e", Some("g"), "5"),
    ]
}

/// An undecided member holds back its lane's later members of other groups, and, as they are
/// not started, their groups' later members too; other groups go on.
#[test]
fn an_undecided_member_holds_its_lane_later_members_of_other_groups() {
    let entries = laned_groups();
    let mut rounds = Rounds::new(&entries);
    rounds.undecided(0);
    assert!(rounds.held(1) && rounds.held(4) && !rounds.held(3));
    let end = rounds.end_round(vec![3, 2, 4, 1], true);
    assert_eq!((end.held_back, end.live), (vec![1, 2, 4], vec![3]));
    assert!(rounds.held(2), "held through its group's held member");
}

/// A member gone alone takes its lane's later members of other groups alone with it, and theirs
/// in turn, in batch order; if it then fails with no verdict, they are held back.
#[test]
fn a_member_gone_alone_takes_its_lane_later_members_with_it_or_holds_them() {
    let entries = laned_groups();
    let mut rounds = Rounds::new(&entries);
    rounds.go_alone([0]);
    let end = rounds.end_round(vec![3, 2, 1], false);
    assert_eq!(end.live, vec![3]);
    assert!(end.held_back.is_empty());
    assert_eq!(rounds.alone(), vec![0, 1, 2], "in batch order");
    // The first goes alone and fails with no verdict: the rest wait, as `alone` runs them.
    rounds.undecided(0);
    assert!(rounds.held(1));
    rounds.undecided(1);
    assert!(rounds.held(2));
}

/// Held back beats going alone: a member behind both is not started.
#[test]
fn held_back_comes_before_going_alone() {
    let entries = grouped();
    let mut rounds = Rounds::new(&entries);
    rounds.go_alone([0]);
    rounds.undecided(1);
    let end = rounds.end_round(vec![2], false);
    assert_eq!((end.held_back, end.live), (vec![2], vec![]));
    assert_eq!(rounds.alone(), vec![0]);
}

/// After MAX_ROUNDS cancellations the rest is given back retryable, and holds its groups'
/// later members (gone alone) back; rounds that cancelled nothing do not count.
#[test]
fn the_batch_gives_up_after_max_rounds_of_cancellations() {
    let entries = grouped();
    let mut rounds = Rounds::new(&entries);
    for _ in 0..MAX_ROUNDS - 1 {
        assert_eq!(rounds.end_round(vec![0, 3], true).live, vec![0, 3]);
        assert_eq!(rounds.end_round(vec![0, 3], false).live, vec![0, 3]);
    }
    let end = rounds.end_round(vec![0, 3], true);
    assert_eq!((end.exhausted, end.live), (vec![0, 3], vec![]));
    assert!(rounds.held(1) && rounds.held(2), "the group waits for its exhausted member");
}

/// The last cancellation with nothing left to send gives nothing up.
#[test]
fn max_rounds_with_nothing_left_exhausts_nothing() {
    let entries = grouped();
    let mut rounds = Rounds::new(&entries);
    for _ in 0..MAX_ROUNDS - 1 {
        rounds.end_round(vec![0], true);
    }
    let end = rounds.end_round(vec![], true);
    assert!(end.exhausted.is_empty() && end.live.is_empty());
    assert!(!rounds.held(1));
}

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
