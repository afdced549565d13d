//! The keys of batch commits dropped before they answered ([`CutCommits`]): a driver that cuts
//! its call at the invocation's deadline drops a commit that may have committed, and nothing
//! tells the next delivery so. [`super::commit_batch`] reads such keys' records first.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lru::LruCache;

use super::Member;

/// How many keys of commits cut short a store keeps (about 20 batches of 100).
const CUT_CAPACITY: usize = 2_048;

/// The keys of this process's batch commits that were dropped before they answered (a driver
/// cutting its call at the invocation's deadline): each may have committed, and nothing here
/// knows. Delivered again, such a key's record is read first, so what did commit is answered
/// from one read instead of a transaction refused as a duplicate, which costs as long as the
/// commit did and would cut the next delivery at the same place. Shared by a store's clones.
#[derive(Debug, Clone)]
pub(crate) struct CutCommits(Arc<Mutex<LruCache<String, ()>>>);

impl Default for CutCommits {
    fn default() -> Self {
        let capacity = NonZeroUsize::new(CUT_CAPACITY).expect("a capacity above zero");
        CutCommits(Arc::new(Mutex::new(LruCache::new(capacity))))
    }
}

impl CutCommits {
    fn lock(&self) -> MutexGuard<'_, LruCache<String, ()>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A guard over a commit of `members`: dropped before [`Unanswered::answered`], it notes
    /// their keys (copied then only: the commit that answers, nearly all, copies nothing).
    pub(crate) fn guard<'c, 'm, P: ?Sized>(&'c self, members: &'m [Member<'m, P>]) -> Unanswered<'c, 'm, P> {
        Unanswered { cut: self, members }
    }

    /// Whether `key`'s commit was cut, forgetting it: it is read now.
    pub(crate) fn take(&self, key: &str) -> bool {
        self.lock().pop(key).is_some()
    }
}

/// A commit under way; see [`CutCommits::guard`].
pub(crate) struct Unanswered<'c, 'm, P: ?Sized> {
    cut: &'c CutCommits,
    members: &'m [Member<'m, P>],
}

impl<P: ?Sized> Unanswered<'_, '_, P> {
    /// The commit answered: nothing to note.
    pub(crate) fn answered(mut self) {
        self.members = &[];
    }
}

impl<P: ?Sized> Drop for Unanswered<'_, '_, P> {
    fn drop(&mut self) {
        if self.members.is_empty() {
            return;
        }
        let mut cut = self.cut.lock();
        for member in self.members {
            cut.put(member.key.as_str().to_owned(), ());
        }
    }
}

#[cfg(test)]
mod tests {
    use effectively_once::Key;

    use super::*;

    /// A commit dropped before it answered notes its keys, each read once when it comes again;
    /// one that answered notes nothing.
    #[test]
    fn a_commit_dropped_before_it_answers_marks_its_keys_for_one_read() {
        let members: Vec<Member<'_, str>> =
            ["a", "b", "c"].into_iter().map(|id| Member::new(Key::new("t", id).unwrap(), id)).collect();
        let key = |at: usize| members[at].key.as_str().to_owned();
        let cut = CutCommits::default();
        drop(cut.guard(&members[..2]));
        cut.guard(&members[2..]).answered();
        assert!(cut.take(&key(0)) && cut.take(&key(1)));
        assert!(!cut.take(&key(0)), "read once");
        assert!(!cut.take(&key(2)), "answered: nothing noted");
    }
}
