//! The batch's schedule, with no I/O: which members a pass sends and which wait for the next
//! ([`Passes`]), the copies of a key within a pass ([`copies`]), how a round's members group,
//! join into units by lane, and pack into transactions ([`groups`], [`units`], [`cut`],
//! [`pack`], [`shrink`]), what a cancelled transaction means for each member ([`read`]), what a
//! refused shared write says of its group's item ([`observe`], [`States`]), and which members go
//! alone or are held back behind an undecided member of their group or lane ([`Rounds`]). The
//! batch module sends what this decides.

use std::collections::{HashMap, HashSet};

use effectively_once::StoreErrorKind;

use super::{Observed, MAX_ROUNDS};
use crate::transaction::{fits, Cancellation, MAX_TRANSACTION_ITEMS};
use crate::tx::Item;

/// A member as the schedule sees it: its key, its group, its lane, and its payload hash (`None`
/// when it could not be hashed, and is answered already).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry<'m> {
    pub(crate) key: &'m str,
    pub(crate) group: Option<&'m str>,
    pub(crate) lane: Option<&'m str>,
    pub(crate) hash: Option<&'m str>,
}

/// What holds a member back, or defers it to the next pass: its key, its group, or its lane.
/// Apart, as a group may be spelled like a key (an account `payments#E1` is not event `E1`'s
/// record) or like a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Name<'m> {
    Key(&'m str),
    Group(&'m str),
    Lane(&'m str),
}

impl<'m> Entry<'m> {
    /// Its names: its key, and its group and lane if it has them.
    fn names(self) -> impl Iterator<Item = Name<'m>> {
        std::iter::once(Name::Key(self.key)).chain(self.orders())
    }

    /// The names whose members keep their order in the rounds: its group and its lane. (Its
    /// key's copies are answered from the first, [`copies`].)
    fn orders(self) -> impl Iterator<Item = Name<'m>> {
        self.group.map(Name::Group).into_iter().chain(self.lane.map(Name::Lane))
    }
}

/// A member a pass answers without sending it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Early {
    /// Behind an undecided member of its key, group or lane: not started, retryable.
    HeldBack,
    /// Its key was taken in an earlier pass by this member, with the same payload: a replay.
    Replay(usize),
    /// Its key was taken in an earlier pass with another payload.
    KeyReused,
}

/// One pass: the members sent now, and those answered without a request.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    pub(crate) send: Vec<usize>,
    pub(crate) answered: Vec<(usize, Early)>,
}

/// The batch in passes: a member whose key came earlier in the batch with another payload (key
/// reuse, or the reuse's own first copy) waits for the next pass with every later member of its
/// key, group and lane, so what the first copy did is settled before it, and its group and lane
/// keep their order, as one by one. Such a member whose first copy committed is key reuse with
/// no request; one whose first copy is undecided (a failure that is no verdict on the message,
/// so it is delivered again) waits, as do its group's and lane's later members.
#[derive(Debug)]
pub(crate) struct Passes<'m> {
    entries: &'m [Entry<'m>],
    /// Keys, groups and lanes whose member failed with no verdict on it: their later members
    /// wait.
    undecided: HashSet<Name<'m>>,
    /// Keys committed in an earlier pass: the member that took each.
    taken: HashMap<&'m str, usize>,
    pending: Vec<usize>,
}

impl<'m> Passes<'m> {
    /// Every hashed member pending.
    pub(crate) fn new(entries: &'m [Entry<'m>]) -> Self {
        let pending = (0..entries.len()).filter(|&index| entries[index].hash.is_some()).collect();
        Passes { entries, undecided: HashSet::new(), taken: HashMap::new(), pending }
    }

    /// Member `index` failed with no verdict on the message: the later members of its key, group
    /// and lane wait.
    pub(crate) fn undecided(&mut self, index: usize) {
        self.undecided.extend(self.entries[index].names());
    }

    /// Member `index` committed: later members of its key are answered from it.
    pub(crate) fn taken(&mut self, index: usize) {
        self.taken.insert(self.entries[index].key, index);
    }

    /// The next pass, if any member is pending: the rest wait for the one after.
    pub(crate) fn next(&mut self) -> Option<Pass> {
        if self.pending.is_empty() {
            return None;
        }
        let mut pass = Pass::default();
        let mut later = Vec::new();
        let mut first: HashMap<&str, Entry<'m>> = HashMap::new();
        let mut deferred: HashSet<Name<'m>> = HashSet::new();
        for index in std::mem::take(&mut self.pending) {
            let entry = self.entries[index];
            let hash = entry.hash.expect("pending members have hashes");
            if entry.names().any(|name| self.undecided.contains(&name)) {
                self.undecided.extend(entry.names());
                pass.answered.push((index, Early::HeldBack));
            } else if let Some(&earlier) = self.taken.get(entry.key) {
                let same = self.entries[earlier].hash == Some(hash);
                pass.answered.push((index, if same { Early::Replay(earlier) } else { Early::KeyReused }));
            } else if first.get(entry.key).is_some_and(|f| f.hash != Some(hash) || !same_order(f, &entry))
                || entry.names().any(|name| deferred.contains(&name))
            {
                // A copy in another group or lane than its first's is not answered from it in
                // this pass ([`copies`]): its own order would never hear that the first ended
                // undecided, and its later members would pass it. Next pass it is a replay, or
                // held back with them.
                deferred.extend(entry.names());
                later.push(index);
            } else {
                first.entry(entry.key).or_insert(entry);
                pass.send.push(index);
            }
        }
        self.pending = later;
        Some(pass)
    }
}

/// Whether a copy keeps its first's order: the same group and the same lane.
fn same_order(first: &Entry<'_>, copy: &Entry<'_>) -> bool {
    first.group == copy.group && first.lane == copy.lane
}

/// A pass's members split into the first of each key, sent, and the copies answered from it
/// with no request of their own: `(copy, first)`.
pub(crate) fn copies<'m>(members: impl IntoIterator<Item = (usize, &'m str)>) -> (Vec<usize>, Vec<(usize, usize)>) {
    let mut first: HashMap<&str, usize> = HashMap::new();
    let (mut live, mut copies) = (Vec::new(), Vec::new());
    for (index, key) in members {
        match first.get(key) {
            Some(&earlier) => copies.push((index, earlier)),
            None => {
                first.insert(key, index);
                live.push(index);
            }
        }
    }
    (live, copies)
}

/// A round's members by group, groups in order of first appearance; an ungrouped member is a
/// group of one.
pub(crate) fn groups(entries: &[Entry<'_>], live: &[usize]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for &index in live {
        match entries[index].group {
            Some(name) => match by_name.get(name) {
                Some(&at) => groups[at].push(index),
                None => {
                    by_name.insert(name, groups.len());
                    groups.push(vec![index]);
                }
            },
            None => groups.push(vec![index]),
        }
    }
    groups
}

/// A round's groups ([`groups`]) joined into units: groups whose members share a lane, directly
/// or through another group, are one unit, whose parts go in one transaction ([`pack`], or the
/// unit is [`cut`]). So a lane's later member is never committed in one transaction while an
/// earlier one of another group is cancelled in another. Units, and each unit's groups, in order
/// of first appearance; with no lanes, each group is a unit of its own.
pub(crate) fn units(entries: &[Entry<'_>], live: &[usize]) -> Vec<Vec<Vec<usize>>> {
    let groups = groups(entries, live);
    // Each unit's root is its earliest group, so units come in order of first appearance.
    let mut parent: Vec<usize> = (0..groups.len()).collect();
    let mut by_lane: HashMap<&str, usize> = HashMap::new();
    for (at, group) in groups.iter().enumerate() {
        for lane in group.iter().filter_map(|&index| entries[index].lane) {
            let other = *by_lane.entry(lane).or_insert(at);
            let (a, b) = (root(&mut parent, at), root(&mut parent, other));
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut units: Vec<Vec<Vec<usize>>> = Vec::new();
    let mut unit_at: HashMap<usize, usize> = HashMap::new();
    for (at, group) in groups.into_iter().enumerate() {
        match unit_at.get(&root(&mut parent, at)) {
            Some(&unit) => units[unit].push(group),
            None => {
                unit_at.insert(at, units.len());
                units.push(vec![group]);
            }
        }
    }
    units
}

/// The root of `at` in a union of groups, the least group index of its set.
fn root(parent: &mut [usize], mut at: usize) -> usize {
    while parent[at] != at {
        parent[at] = parent[parent[at]];
        at = parent[at];
    }
    at
}

/// How many members of each of `unit`'s groups (each in batch order) to send when `take` of its
/// members go (at least one): the first `take` in batch order. A unit too large for one
/// transaction is cut at a batch position rather than group by group, so a member is sent only
/// with every earlier live member of its group and lane in the same transaction; the rest wait
/// for the next round, which starts once this one's transactions are settled.
pub(crate) fn cut(unit: &[Vec<usize>], take: usize) -> Vec<usize> {
    let mut members: Vec<usize> = unit.iter().flatten().copied().collect();
    members.sort_unstable();
    let last = members[take.clamp(1, members.len()) - 1];
    unit.iter().map(|group| group.partition_point(|&index| index <= last)).collect()
}

/// How many members of a chunk (of a group, or of a unit, [`cut`]) to try next when `take` of
/// them built `actions` actions, too many for one transaction: fewer in proportion, at least one
/// fewer, at least one. `take` is over 1 (a chunk of one is sent whatever its size).
pub(crate) fn shrink(take: usize, actions: usize) -> usize {
    let fits = take * MAX_TRANSACTION_ITEMS / actions.max(1);
    fits.clamp(1, take - 1)
}

/// Packs parts, each `(actions, bytes)`, into transactions in order: a part that would take the
/// current transaction past DynamoDB's limits starts the next. The transaction of each part.
pub(crate) fn pack(parts: &[(usize, usize)]) -> Vec<usize> {
    let mut at = Vec::with_capacity(parts.len());
    let (mut transaction, mut actions, mut bytes) = (0, 0, 0);
    for &(part_actions, part_bytes) in parts {
        if actions > 0 && !fits(actions + part_actions, bytes + part_bytes) {
            transaction += 1;
            (actions, bytes) = (0, 0);
        }
        actions += part_actions;
        bytes += part_bytes;
        at.push(transaction);
    }
    at
}

/// Who an action of a batch transaction belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A member's own write.
    Write(usize),
    /// A member's record.
    Record(usize),
    /// A group's shared write (the group's index in the transaction).
    Shared(usize),
}

/// What a cancelled batch transaction means for its members.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Verdicts {
    /// Members whose record blocked them (duplicates), with the action whose item holds it.
    pub(crate) duplicates: Vec<(usize, usize)>,
    /// Members to commit one at a time, where their own condition gets its own answer.
    pub(crate) alone: Vec<usize>,
    /// Groups (their index in the transaction) decided on their shared item whose shared write
    /// found it otherwise: the item as it is, for their members, sent again, to be decided on.
    pub(crate) observed: Vec<(usize, Observed)>,
    /// Members cancelled by another's condition, or a conflict: sent again next round.
    pub(crate) again: Vec<usize>,
    /// Members failed with [`Verdicts::failure`].
    pub(crate) failed: Vec<usize>,
    /// The store error the first failing reason means.
    pub(crate) failure: Option<StoreErrorKind>,
    /// Whether a conflicting transaction cancelled it.
    pub(crate) conflicted: bool,
}

/// Reads a cancelled transaction reason by reason: `owners` says whose each action is,
/// `groups` the members of each group in it, `decided` what each group was decided on
/// ([`crate::BatchWrites::decide`]; `None`: not decided, its members go alone when its shared
/// write is refused), `members` every member in it.
pub(crate) fn read(
    owners: &[Owner],
    groups: &[Vec<usize>],
    decided: &[Option<&Observed>],
    members: &[usize],
    cancellation: &Cancellation,
) -> Verdicts {
    let mut verdicts = Verdicts {
        failure: cancellation.first_failure(),
        conflicted: cancellation.conflicted(),
        ..Verdicts::default()
    };
    let mut to_alone: Vec<usize> = Vec::new();
    for (at, owner) in owners.iter().enumerate().filter(|(at, _)| cancellation.condition_failed(*at)) {
        match *owner {
            Owner::Record(index) => verdicts.duplicates.push((index, at)),
            Owner::Write(index) => to_alone.push(index),
            Owner::Shared(group) => {
                let seen = decided.get(group).copied().flatten().and_then(|on| observe(on, cancellation.item(at)));
                match seen {
                    Some(seen) => verdicts.observed.push((group, seen)),
                    None => to_alone.extend(groups[group].iter().copied()),
                }
            }
        }
    }
    for &index in members {
        if verdicts.duplicates.iter().any(|&(duplicate, _)| duplicate == index) {
            continue;
        }
        if to_alone.contains(&index) {
            verdicts.alone.push(index);
        } else if let Some(kind) = verdicts.failure {
            // A request refused for one member's items: each alone gets its own verdict,
            // rather than every member of the batch one that is not theirs.
            if kind == StoreErrorKind::Other {
                verdicts.alone.push(index);
            } else {
                verdicts.failed.push(index);
            }
        } else {
            verdicts.again.push(index);
        }
    }
    verdicts
}

/// What a shared write refused says of its group's item, decided on `before`: the item it
/// returned (none: no item). `None` when that cannot be: a write conditioned on no item refused
/// with no item returned (a server that returns no items), so the group goes alone rather than
/// deciding again on what it cannot see.
pub(crate) fn observe(before: &Observed, item: Option<&Item>) -> Option<Observed> {
    match (before, item) {
        (Observed::Seen(None), None) => None,
        (_, item) => Some(Observed::Seen(item.cloned())),
    }
}

/// Whether a cancellation was only groups decided on their shared item finding it otherwise:
/// seen for the first time, or changed by another writer across a threshold of their decisions;
/// nothing else refused, failed or conflicted. Such a cancellation does not count towards
/// [`MAX_ROUNDS`], which bounds the others, so a hot group does not fail the quiet groups that
/// share its transactions: a group sees its item for the first time once in a pass (a group
/// seen stays seen), and is decided again on a changed item at most [`MAX_ROUNDS`] times in a
/// pass ([`States::changed`]) before its members go alone.
pub(crate) fn only_sights(verdicts: &Verdicts) -> bool {
    let quiet = verdicts.duplicates.is_empty()
        && verdicts.alone.is_empty()
        && verdicts.failed.is_empty()
        && verdicts.failure.is_none()
        && !verdicts.conflicted;
    quiet && !verdicts.observed.is_empty()
}

/// What a pass knows of each group's shared item: seen in a cancelled transaction, or as the
/// group's last committed transaction left it; unseen until then. Kept across the pass's
/// rounds, so a group's later chunks are decided on it with no cancellation of their own.
#[derive(Debug, Default)]
pub(crate) struct States<'m> {
    known: HashMap<&'m str, Observed>,
    changed: HashMap<&'m str, u32>,
}

impl<'m> States<'m> {
    /// What is known of `group`'s item.
    pub(crate) fn get(&self, group: &str) -> &Observed {
        self.known.get(group).unwrap_or(&Observed::Unseen)
    }

    /// `group`'s item, decided on as seen, was found otherwise: how many times now in the pass.
    pub(crate) fn changed(&mut self, group: &'m str) -> u32 {
        let times = self.changed.entry(group).or_insert(0);
        *times += 1;
        *times
    }

    /// `group`'s item is (or, once its transaction commits, will be) `state`.
    pub(crate) fn set(&mut self, group: &'m str, state: Observed) {
        self.known.insert(group, state);
    }
}

/// The rounds of one pass: which members go alone, which groups and lanes are held behind an
/// undecided member, and how many times the batch was cancelled.
#[derive(Debug)]
pub(crate) struct Rounds<'m> {
    entries: &'m [Entry<'m>],
    /// Each group's and lane's first member that failed with no verdict on the message
    /// (delivered again): their later members are not started.
    held: HashMap<Name<'m>, usize>,
    alone: Vec<usize>,
    cancellations: u32,
}

/// What the end of a round decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct RoundEnd {
    /// Members behind an undecided member of their group or lane: not started.
    pub(crate) held_back: Vec<usize>,
    /// Members still undecided after [`MAX_ROUNDS`] cancellations: retried later.
    pub(crate) exhausted: Vec<usize>,
    /// Members sent in the next round, in batch order.
    pub(crate) live: Vec<usize>,
}

impl<'m> Rounds<'m> {
    pub(crate) fn new(entries: &'m [Entry<'m>]) -> Self {
        Rounds { entries, held: HashMap::new(), alone: Vec::new(), cancellations: 0 }
    }

    /// Member `index` failed with no verdict on the message, or is not started: its group's and
    /// lane's later members wait.
    pub(crate) fn undecided(&mut self, index: usize) {
        first_of(&mut self.held, self.entries[index], index);
    }

    /// These members go alone, after the rounds.
    pub(crate) fn go_alone(&mut self, members: impl IntoIterator<Item = usize>) {
        self.alone.extend(members);
    }

    /// Whether an earlier member of `index`'s group or lane is undecided.
    pub(crate) fn held(&self, index: usize) -> bool {
        self.earlier(&self.held, index)
    }

    fn earlier(&self, firsts: &HashMap<Name<'m>, usize>, index: usize) -> bool {
        self.entries[index].orders().any(|name| firsts.get(&name).is_some_and(|&first| first < index))
    }

    /// Ends a round whose transactions left `next` to send again (`cancelled`: a cancellation
    /// left some): a member behind an undecided one of its group or lane is held back, one
    /// behind a member of its group or lane gone alone goes alone too (in order), the rest are
    /// sent again, unless the batch has been cancelled [`MAX_ROUNDS`] times. In batch order, as
    /// a member held back or gone alone takes the later members of its other group or lane
    /// with it (a lane spans groups).
    pub(crate) fn end_round(&mut self, mut next: Vec<usize>, cancelled: bool) -> RoundEnd {
        let mut gone_alone: HashMap<Name<'m>, usize> = HashMap::new();
        for &index in &self.alone {
            first_of(&mut gone_alone, self.entries[index], index);
        }
        next.sort_unstable();
        let mut end = RoundEnd::default();
        for index in next {
            if self.held(index) {
                self.undecided(index);
                end.held_back.push(index);
            } else if self.earlier(&gone_alone, index) {
                first_of(&mut gone_alone, self.entries[index], index);
                self.alone.push(index);
            } else {
                end.live.push(index);
            }
        }
        if cancelled {
            self.cancellations += 1;
            if self.cancellations == MAX_ROUNDS && !end.live.is_empty() {
                end.exhausted = std::mem::take(&mut end.live);
                // Undecided: its group's later members (gone alone) must wait for it.
                for &index in &end.exhausted {
                    self.undecided(index);
                }
            }
        }
        end
    }

    /// The members gone alone, once each, in batch order.
    pub(crate) fn alone(&mut self) -> Vec<usize> {
        let mut alone = std::mem::take(&mut self.alone);
        alone.sort_unstable();
        alone.dedup();
        alone
    }
}

/// Notes `index` as the first member of `entry`'s group and lane in `firsts`, unless an earlier
/// one is there.
fn first_of<'m>(firsts: &mut HashMap<Name<'m>, usize>, entry: Entry<'m>, index: usize) {
    for name in entry.orders() {
        let first = firsts.entry(name).or_insert(index);
        *first = (*first).min(index);
    }
}

#[cfg(test)]
mod tests;
