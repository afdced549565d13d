//! The schedule on its own: members are `(key, group, hash)`, answers are made up, nothing is
//! sent. The tests are filed by the part of the schedule they pin (passes, packing, cancellation,
//! rounds, observed items); this file holds the members and the transaction shape they share.

use super::*;

mod cancellation;
mod observed;
mod packing;
mod passes;
mod rounds;

fn entry<'m>(key: &'m str, group: Option<&'m str>, hash: &'m str) -> Entry<'m> {
    Entry { key, group, lane: None, hash: Some(hash) }
}

/// A member in `group` and `lane`.
fn laned<'m>(key: &'m str, group: Option<&'m str>, lane: &'m str, hash: &'m str) -> Entry<'m> {
    Entry { lane: Some(lane), ..entry(key, group, hash) }
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
