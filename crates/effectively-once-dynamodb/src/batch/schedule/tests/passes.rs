//! Passes: which members a pass sends and which wait for the next, how copies of a key are
//! answered, and how an undecided member holds back its key, group and lane.

use super::*;

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
