//! What a batch knows before it sends anything: the members already answered (by the caller,
//! or from the records read first), and the members held back behind those that failed with no
//! verdict on the message ([`held_before`]). Pure; the batch module reads and answers.

use std::collections::HashSet;

use super::schedule::Entry;

/// A member as the batch finds it before its first transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Before {
    /// To be sent.
    Pending,
    /// Answered for good (a replay, a permanent failure): it holds nothing back.
    Answered,
    /// The caller answered it with a failure that is no verdict on the message (a check the
    /// caller will pass later): it is delivered again, and the later members of its key and
    /// order wait for it ([`names`]).
    Undecided,
    /// The batch itself found it undecided before sending it (a record read first, in progress
    /// elsewhere; a payload that does not hash, which a fixed build may hash): what its
    /// transaction would have met, so it holds what a failure there would ([`every_name`]), and
    /// the batch answers the same whether the read found it or not.
    FoundUndecided,
}

/// What a member answered before the batch holds back. Apart, as a group may be spelled like a
/// key or a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Name<'m> {
    Key(&'m str),
    Group(&'m str),
    Lane(&'m str),
}

/// The names a member the caller answered before the batch holds: its key, and its lane or,
/// with none, its group. Not its group beside a lane: such a member took part in no shared
/// write, and the trigger orders nothing across lanes (Lambda may run two lanes in two
/// invocations at once), so holding its group in every lane would stall lanes the failure
/// never touched. A member is held by any of [`every_name`], so a group held by a member with
/// no lane holds that group's members in lanes too (a credit waiting outside lanes holds its
/// account's debit in a lane, as committing one by one would). (A member that fails in a
/// transaction holds its group in every lane: [`every_name`].)
fn names<'m>(entry: &Entry<'m>) -> impl Iterator<Item = Name<'m>> {
    let order = entry.lane.map(Name::Lane).or(entry.group.map(Name::Group));
    std::iter::once(Name::Key(entry.key)).chain(order)
}

/// The names a member undecided in a transaction holds, and is held by: its key, its group in
/// every lane and its lane ([`super::schedule::Passes`]), as committing one by one in batch
/// order would have its group's later debits wait for it.
fn every_name<'m>(entry: &Entry<'m>) -> impl Iterator<Item = Name<'m>> {
    std::iter::once(Name::Key(entry.key)).chain(entry.group.map(Name::Group)).chain(entry.lane.map(Name::Lane))
}

/// The names waiting behind the members undecided so far: those the caller's answers hold
/// ([`names`]), and those the batch's own findings hold ([`every_name`]), a superset.
#[derive(Default)]
struct Waiting<'m> {
    by_caller: HashSet<Name<'m>>,
    found: HashSet<Name<'m>>,
}

impl<'m> Waiting<'m> {
    /// Whether `entry` is held behind an earlier member; as it is, or as its state says, the
    /// names it holds in turn: a member held holds as widely as it is held, so none overtakes
    /// it (an event id taken by another group first, a lane's order broken, a debit before its
    /// credit).
    fn held(&mut self, entry: &Entry<'m>, state: Before) -> bool {
        if every_name(entry).any(|name| self.found.contains(&name)) {
            self.found.extend(every_name(entry));
            true
        } else if every_name(entry).any(|name| self.by_caller.contains(&name)) {
            self.by_caller.extend(names(entry));
            true
        } else {
            match state {
                Before::Undecided => self.by_caller.extend(names(entry)),
                Before::FoundUndecided => self.found.extend(every_name(entry)),
                Before::Pending | Before::Answered => {}
            }
            false
        }
    }
}

/// The members held back before the batch is sent, in batch order: a member behind an
/// undecided one of its key or order ([`Before::Undecided`], [`Before::FoundUndecided`]), or
/// behind one held back in turn, whatever it was before (a replay behind the failure waits too,
/// so a trigger that stops at a lane's first failure hears of nothing after it).
pub(crate) fn held_before(entries: &[Entry<'_>], before: &[Before]) -> Vec<usize> {
    let mut waiting = Waiting::default();
    (0..entries.len()).filter(|&index| waiting.held(&entries[index], before[index])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'m>(key: &'m str, group: &'m str, lane: Option<&'m str>) -> Entry<'m> {
        Entry { key, group: Some(group), lane, hash: None }
    }

    /// With no lanes, a failure holds its key and its group; each member held holds its own in
    /// turn (held by its key, it holds its group; held by its group, its key).
    #[test]
    fn a_failure_holds_its_key_and_group_and_each_held_member_its_own() {
        use Before::{Pending, Undecided};
        let entries = [
            entry("k1", "A", None),
            entry("k1", "B", None),
            entry("k3", "B", None),
            entry("k2", "A", None),
            entry("k2", "C", None),
            entry("k4", "D", None),
        ];
        let before = [Undecided, Pending, Pending, Pending, Pending, Pending];
        assert_eq!(held_before(&entries, &before), [1, 2, 3, 4]);
    }

    /// With lanes, a failure holds its key and its lane, not its group in other lanes; a lane
    /// is not a group or a key of the same spelling.
    #[test]
    fn with_lanes_a_failure_holds_its_key_and_lane_not_its_group_elsewhere() {
        use Before::{Pending, Undecided};
        let entries = [
            entry("k1", "acct-1", Some("p-0")),
            entry("k2", "acct-1", Some("p-1")),
            entry("k1", "acct-9", Some("p-2")),
            entry("k3", "acct-2", Some("p-0")),
            entry("k4", "acct-2", Some("p-1")),
            entry("p-0", "p-0", Some("p-3")),
        ];
        let before = [Undecided, Pending, Pending, Pending, Pending, Pending];
        assert_eq!(held_before(&entries, &before), [2, 3], "its key elsewhere, its lane");
    }

    /// A member answered for good holds nothing; one answered before but behind a failure is
    /// held with the rest; nothing undecided, nothing held.
    #[test]
    fn an_answer_holds_nothing_and_is_held_behind_a_failure() {
        use Before::{Answered, Pending, Undecided};
        let entries = [entry("k1", "A", None), entry("k2", "A", None), entry("k3", "A", None), entry("k4", "B", None)];
        assert_eq!(held_before(&entries, &[Answered, Pending, Pending, Pending]), Vec::<usize>::new());
        assert_eq!(held_before(&entries, &[Pending, Undecided, Answered, Pending]), [2]);
        assert_eq!(held_before(&entries, &[Pending, Pending, Pending, Undecided]), Vec::<usize>::new());
    }

    /// A member the batch found undecided itself (read first, in progress elsewhere) holds what
    /// its transaction would: its key, its lane and its group in every lane; each member held
    /// behind it holds as widely in turn.
    #[test]
    fn a_member_found_undecided_holds_its_group_in_every_lane_as_a_transaction_would() {
        use Before::{FoundUndecided, Pending};
        let entries = [
            entry("k1", "acct-1", Some("p-0")),
            entry("k2", "acct-1", Some("p-1")),
            entry("k3", "acct-2", Some("p-1")),
            entry("k4", "acct-2", Some("p-2")),
            entry("k5", "acct-3", Some("p-3")),
        ];
        let before = [FoundUndecided, Pending, Pending, Pending, Pending];
        assert_eq!(held_before(&entries, &before), [1, 2, 3], "its group elsewhere, and on from there");
    }

    /// A replay answered before the batch, behind a member found undecided, waits with it: a
    /// trigger that stops at a lane's first failure hears of nothing after it.
    #[test]
    fn an_answer_behind_a_member_found_undecided_is_held() {
        use Before::{Answered, FoundUndecided};
        let entries = [entry("k1", "acct-1", Some("p-0")), entry("k2", "acct-2", Some("p-0"))];
        assert_eq!(held_before(&entries, &[FoundUndecided, Answered]), [1]);
    }

    /// A member in a lane is held by its group failing outside lanes (a credit waiting with no
    /// lane holds its account's debit in a lane, as one by one would), and holds its lane in
    /// turn; a failure in a lane still holds nothing of its group in other lanes.
    #[test]
    fn a_member_in_a_lane_is_held_by_its_group_failing_outside_lanes() {
        use Before::{Pending, Undecided};
        let entries = [entry("k1", "A", None), entry("k2", "A", Some("p-0")), entry("k3", "A", None)];
        assert_eq!(held_before(&entries, &[Undecided, Pending, Pending]), [1, 2]);
        let entries = [entry("k1", "A", Some("p-0")), entry("k2", "A", Some("p-1")), entry("k3", "A", None)];
        assert_eq!(held_before(&entries, &[Undecided, Pending, Pending]), Vec::<usize>::new());
    }

    /// A member held behind the caller's failure holds as that one does, even one the batch found
    /// undecided itself: read first or not, it answers the same.
    #[test]
    fn a_member_held_holds_as_widely_as_it_is_held_whatever_it_found() {
        use Before::{FoundUndecided, Pending, Undecided};
        let entries = [entry("k1", "A", Some("p-0")), entry("k2", "B", Some("p-0")), entry("k3", "B", Some("p-1"))];
        assert_eq!(held_before(&entries, &[Undecided, FoundUndecided, Pending]), [1]);
        assert_eq!(held_before(&entries, &[Undecided, Pending, Pending]), [1], "as if not read");
    }
}
