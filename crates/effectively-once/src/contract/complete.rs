//! Completing and releasing: the owner fence, retried writes whose answers were lost, and a
//! release that never deletes a completed record; with the store that loses completion answers,
//! which the schedules suite uses too.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::json;

use super::{counted, in_progress, setup, unique, Counted};
use crate::{Claim, Completion, Outcome, Record, RunError, Status, Store, StoreErrorKind};

/// A failing handler releases its record; the retry runs the handler.
pub async fn handler_error_releases_and_a_retry_runs<S: Store>(store: S) {
    let (idem, _) = setup(store);
    let key = unique("release");
    let payload = json!({"n": 1});
    let runs = Counted::default();
    let failed = idem
        .run(&key, &payload, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<u64, _>(std::io::Error::other("throttled downstream"))
        })
        .await;
    assert!(matches!(failed, Err(RunError::Handler(_))));
    assert_eq!(idem.store().get(key.as_str()).await.unwrap(), None, "record released");
    let retried = idem.run(&key, &payload, || counted(runs.clone(), 5)).await.unwrap();
    assert_eq!(retried, Outcome::Fresh(5));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// Once another attempt has taken a key over, the old owner can neither complete nor release.
pub async fn stale_owner_is_fenced<S: Store>(store: S) {
    let key = unique("fence");
    let now = 1_800_000_000_000;
    store.claim(&in_progress(&key, "old", now, 1_000), now).await.unwrap();
    let later = now + 2_000;
    let old = store.get(key.as_str()).await.unwrap();
    let taken = store.claim(&in_progress(&key, "new", later, 1_000), later).await.unwrap();
    assert_eq!(taken, Claim::Acquired { replaced: old });
    let completion = Completion { response: Some("1"), expiration_s: later / 1000 + 60, now_ms: later };
    assert_eq!(
        store.complete(key.as_str(), "old", completion.clone()).await.unwrap_err().kind(),
        StoreErrorKind::Fenced
    );
    assert_eq!(store.release(key.as_str(), "old").await.unwrap_err().kind(), StoreErrorKind::Fenced);
    let record = store.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.status), ("new", Status::InProgress));
    store.complete(key.as_str(), "new", completion).await.unwrap();
    assert_eq!(store.get(key.as_str()).await.unwrap().unwrap().status, Status::Completed);
}

/// Retried complete and release requests (their first answer lost) succeed.
pub async fn complete_and_release_are_idempotent_for_the_owner<S: Store>(store: S) {
    let key = unique("retry");
    let now = 1_800_000_000_000;
    store.claim(&in_progress(&key, "a", now, 30_000), now).await.unwrap();
    let completion = Completion { response: Some("1"), expiration_s: now / 1000 + 60, now_ms: now };
    store.complete(key.as_str(), "a", completion.clone()).await.unwrap();
    store.complete(key.as_str(), "a", completion).await.unwrap();
    let other = unique("retry-release");
    store.claim(&in_progress(&other, "a", now, 30_000), now).await.unwrap();
    store.release(other.as_str(), "a").await.unwrap();
    store.release(other.as_str(), "a").await.unwrap();
    assert_eq!(store.get(other.as_str()).await.unwrap(), None);
    assert_eq!(store.get(key.as_str()).await.unwrap().unwrap().status, Status::Completed);
}

/// A release deletes only an in-progress record of its owner: a completed record stays, even
/// against its owner (deleting it would make the next delivery run the effect again), and
/// another owner's record stays.
pub async fn release_deletes_only_an_in_progress_record_of_its_owner<S: Store>(store: S) {
    let now = 1_800_000_000_000;
    let done = unique("release-completed");
    store.claim(&in_progress(&done, "a", now, 30_000), now).await.unwrap();
    let completion = Completion { response: Some("1"), expiration_s: now / 1000 + 60, now_ms: now };
    store.complete(done.as_str(), "a", completion).await.unwrap();
    for owner in ["a", "b"] {
        let err = store.release(done.as_str(), owner).await.unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Fenced, "release of a completed record by {owner}");
    }
    let kept = store.get(done.as_str()).await.unwrap().expect("the completed record is kept");
    assert_eq!((kept.status, kept.response.as_deref(), kept.owner.as_str()), (Status::Completed, Some("1"), "a"));

    let live = unique("release-other");
    let record = in_progress(&live, "a", now, 30_000);
    store.claim(&record, now).await.unwrap();
    assert_eq!(store.release(live.as_str(), "b").await.unwrap_err().kind(), StoreErrorKind::Fenced);
    assert_eq!(store.get(live.as_str()).await.unwrap(), Some(record), "another owner's release changes nothing");
    store.release(live.as_str(), "a").await.unwrap();
    assert_eq!(store.get(live.as_str()).await.unwrap(), None, "its owner's release deletes it");
}

/// The store refuses a completion once the lease has ended, even with no takeover yet, and a
/// retried completion that finds its own write landed succeeds, the record unchanged.
pub async fn completion_after_the_lease_is_refused<S: Store>(store: S) {
    let key = unique("late-completion");
    let now = 1_800_000_000_000;
    let record = in_progress(&key, "a", now, 1_000);
    store.claim(&record, now).await.unwrap();
    let late = Completion { response: Some("1"), expiration_s: now / 1000 + 60, now_ms: now + 1_001 };
    assert_eq!(store.complete(key.as_str(), "a", late).await.unwrap_err().kind(), StoreErrorKind::Fenced);
    assert_eq!(store.get(key.as_str()).await.unwrap(), Some(record), "not completed");

    // Up to the lease's last millisecond the owner completes.
    let on_time = Completion { response: Some("1"), expiration_s: now / 1000 + 60, now_ms: now + 1_000 };
    store.complete(key.as_str(), "a", on_time).await.unwrap();
    // Its retry, after the lease, finds its own completed record: success, nothing rewritten.
    let retried = Completion { response: Some("2"), expiration_s: now / 1000 + 999, now_ms: now + 5_000 };
    store.complete(key.as_str(), "a", retried.clone()).await.unwrap();
    let done = store.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.response.as_deref(), done.expiration_s),
        (Status::Completed, Some("1"), now / 1000 + 60)
    );
    // Another owner is refused.
    assert_eq!(store.complete(key.as_str(), "b", retried).await.unwrap_err().kind(), StoreErrorKind::Fenced);
}

/// A completion whose answer is lost is sent again before the record is left to its lease:
/// whether the first write landed (the retry finds its own completed record) or not.
pub async fn a_lost_completion_answer_is_retried<S: Store>(store: S) {
    let (idem, _) = setup(LoseCompletionAnswers::new(store));
    for landed in [true, false] {
        let key = unique(if landed { "lost-answer-landed" } else { "lost-answer-not-landed" });
        let runs = Counted::default();
        idem.store().lost.store(1, Ordering::SeqCst);
        idem.store().land.store(landed, Ordering::SeqCst);
        idem.store().sent.store(0, Ordering::SeqCst);
        let outcome = idem.run(&key, &json!({"n": 1}), || counted(runs.clone(), 7)).await.unwrap();
        assert_eq!(outcome, Outcome::Fresh(7), "landed: {landed}");
        assert_eq!(idem.store().sent.load(Ordering::SeqCst), 2, "one retry");
        let record = idem.store().store.get(key.as_str()).await.unwrap().unwrap();
        assert_eq!((record.status, record.response.as_deref()), (Status::Completed, Some("7")));
        assert_eq!(idem.run(&key, &json!({"n": 1}), || counted(runs.clone(), 8)).await.unwrap(), Outcome::Replayed(7));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

/// A store that loses the answers of the next `lost` completions, each after its write landed
/// (`land`) or before, counting the completions `sent`. The schedules suite uses it too.
pub(crate) struct LoseCompletionAnswers<S> {
    pub(crate) store: S,
    pub(crate) lost: AtomicUsize,
    pub(crate) land: AtomicBool,
    pub(crate) sent: AtomicUsize,
}

impl<S> LoseCompletionAnswers<S> {
    /// `store`, losing no answer until told to.
    pub(crate) fn new(store: S) -> Self {
        LoseCompletionAnswers {
            store,
            lost: AtomicUsize::new(0),
            land: AtomicBool::new(false),
            sent: AtomicUsize::new(0),
        }
    }
}

impl<S: Store> Store for LoseCompletionAnswers<S> {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, crate::StoreError> {
        self.store.claim(record, now_ms).await
    }
    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), crate::StoreError> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let lost = self.lost.load(Ordering::SeqCst);
        if lost == 0 {
            return self.store.complete(id, owner, completion).await;
        }
        self.lost.store(lost - 1, Ordering::SeqCst);
        if self.land.load(Ordering::SeqCst) {
            self.store.complete(id, owner, completion).await?;
        }
        Err(crate::StoreError::new(StoreErrorKind::Unavailable, "connection reset: answer lost"))
    }
    async fn release(&self, id: &str, owner: &str) -> Result<(), crate::StoreError> {
        self.store.release(id, owner).await
    }
    async fn get(&self, id: &str) -> Result<Option<Record>, crate::StoreError> {
        self.store.get(id).await
    }
}
