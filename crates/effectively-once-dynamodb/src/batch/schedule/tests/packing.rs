//! From a round's members to transactions: groups, units joined by lanes, cutting a unit too
//! large, shrinking a chunk, and packing parts within the transaction limits.

use super::*;
use crate::transaction::{MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS};

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
