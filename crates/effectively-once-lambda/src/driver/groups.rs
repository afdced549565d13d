//! How a batch's records group: records sharing an ordering key (a partition, an item, a
//! message group) or the handler's business key form one group in batch order, and each record
//! follows the previous record with each of its keys. Pure, so it is tested without a trigger.

use super::Handler;
#[cfg(doc)]
use super::{OrderedBatch, OrderedBatchHandler};

/// A batch's ordered groups ([`joined_groups`]): the positions of each group, in batch order,
/// and, with `hold_back`, what each record waits for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Groups {
    /// Positions into the records, each group in order; groups in order of their first record.
    pub(crate) groups: Vec<Vec<usize>>,
    /// For each position, the earlier positions it follows: the previous record with each of its
    /// ordering keys (its partition, its business key). A record is held back when one of them
    /// may still take effect, and only then: an earlier record of another partition that merely
    /// shares the group does not hold it.
    pub(crate) after: Vec<Vec<usize>>,
    /// Whether a record that may take effect later holds back those that follow it.
    pub(crate) hold_back: bool,
    /// For each position, its lane: its first ordering key (a topic-partition, a partition key,
    /// an item, a message group) when `hold_back`; `None` when nothing is held back (a standard
    /// queue). What an [`OrderedBatchHandler`] sees as [`OrderedBatch::lane`].
    pub(crate) lanes: Vec<Option<String>>,
}

/// The handler's key for `record`. The key is the user's code: one that panics leaves its record
/// without one (no grouping), and the handler's own panic isolation then judges that record.
pub(crate) fn key_of<R, H: Handler<R>>(handler: &H, record: &R) -> Option<String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.key(record))).unwrap_or(None)
}

/// Records in one group when they share any of their keys (an ordering key such as a partition
/// key, and the handler's business key), each group in batch order, groups in order of their
/// first record; each record follows the previous record with each of its keys
/// ([`Groups::after`]). Joined by hand (a union of positions, a dozen lines) rather than a crate.
pub(crate) fn joined_groups<R, const N: usize>(
    records: &[R],
    hold_back: bool,
    keys: impl Fn(&R) -> [Option<String>; N],
) -> Groups {
    fn root(parent: &mut [usize], mut at: usize) -> usize {
        while parent[at] != at {
            parent[at] = parent[parent[at]];
            at = parent[at];
        }
        at
    }
    let mut parent: Vec<usize> = (0..records.len()).collect();
    let mut after: Vec<Vec<usize>> = (0..records.len()).map(|_| Vec::new()).collect();
    let mut lanes: Vec<Option<String>> = Vec::with_capacity(records.len());
    let mut last_with: std::collections::HashMap<(usize, String), usize> = std::collections::HashMap::new();
    for (position, record) in records.iter().enumerate() {
        let keys = keys(record);
        // The first key is the trigger's ordering key: the record's lane.
        lanes.push(if hold_back { keys.first().cloned().flatten() } else { None });
        for (kind, key) in keys.into_iter().enumerate() {
            let Some(key) = key else { continue };
            let Some(previous) = last_with.insert((kind, key), position) else { continue };
            if !after[position].contains(&previous) {
                after[position].push(previous);
            }
            let (a, b) = (root(&mut parent, previous), root(&mut parent, position));
            // The earlier position stays the root: groups come out in order of their first record.
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for position in 0..records.len() {
        let at = root(&mut parent, position);
        let index = *group_of.entry(at).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[index].push(position);
    }
    Groups { groups, after, hold_back, lanes }
}

#[cfg(test)]
mod tests {
    use super::joined_groups;

    /// Records sharing either key are one group, in batch order; the rest stay apart.
    #[test]
    fn records_sharing_any_key_are_one_group() {
        let records = [("p1", "a"), ("p2", "b"), ("p3", "a"), ("p2", "c"), ("p4", "d"), ("p3", "e")];
        let groups =
            joined_groups(&records, true, |(partition, key)| [Some(partition.to_string()), Some(key.to_string())]);
        assert_eq!(groups.groups, vec![vec![0, 2, 5], vec![1, 3], vec![4]]);
        assert_eq!(groups.after, vec![vec![], vec![], vec![0], vec![1], vec![], vec![2]]);
        let unkeyed = joined_groups(&records, false, |_| [None::<String>]);
        assert_eq!(unkeyed.groups, (0..6).map(|p| vec![p]).collect::<Vec<_>>());
    }

    /// A chain of shared keys joins groups formed apart, and the group keeps batch order.
    #[test]
    fn a_chain_of_keys_joins_groups_formed_apart() {
        let records = [("p1", "a"), ("p2", "b"), ("p2", "a")];
        let groups =
            joined_groups(&records, true, |(partition, key)| [Some(partition.to_string()), Some(key.to_string())]);
        assert_eq!(groups.groups, vec![vec![0, 1, 2]]);
        // The third follows the second (its partition) and the first (its key); the second
        // follows nothing: the first, of another partition, does not hold it back.
        assert_eq!(groups.after, vec![vec![], vec![], vec![1, 0]]);
    }
}
