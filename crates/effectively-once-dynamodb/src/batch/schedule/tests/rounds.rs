//! Rounds: holding back behind an undecided member of a group or lane, going alone, and giving
//! up after `MAX_ROUNDS` cancellations.

use super::*;

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
