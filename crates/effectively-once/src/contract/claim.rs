//! Claiming a key: what a claim answers and writes, and what a claim whose answer was lost
//! learns when it is sent again (its own record, what it replaced, a run of takeovers). Kept
//! together because the retried-claim cases share one fault-injecting store.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use super::{counted, in_progress, setup, unique, Counted};
use crate::{Claim, Clock, Completion, Outcome, Record, Status, Store};

/// A first claim acquires; a second, by another owner, reports the first as stored.
pub async fn claim_acquires_then_reports_the_existing_record<S: Store>(store: S) {
    let key = unique("claim");
    let now = 1_800_000_000_000;
    let first = in_progress(&key, "a", now, 30_000);
    assert_eq!(store.claim(&first, now).await.unwrap(), Claim::Acquired { replaced: None });
    let second = in_progress(&key, "b", now, 30_000);
    assert_eq!(store.claim(&second, now + 1).await.unwrap(), Claim::Exists(first));
}

/// `get` reads back what `claim` and `complete` wrote.
pub async fn get_returns_every_field<S: Store>(store: S) {
    let key = unique("get");
    let now = 1_800_000_000_000;
    assert_eq!(store.get(key.as_str()).await.unwrap(), None);
    let record = in_progress(&key, "a", now, 30_000);
    store.claim(&record, now).await.unwrap();
    assert_eq!(store.get(key.as_str()).await.unwrap().as_ref(), Some(&record));
    let completion = Completion { response: Some(r#"{"ok":true}"#), expiration_s: now / 1000 + 7200, now_ms: now };
    store.complete(key.as_str(), "a", completion).await.unwrap();
    let done = store.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(done.status, Status::Completed);
    assert_eq!(done.response.as_deref(), Some(r#"{"ok":true}"#));
    assert_eq!(done.expiration_s, now / 1000 + 7200);
    assert_eq!(done.owner, "a");
    assert_eq!(done.payload_hash, "hash");
}

/// A claim whose answer was lost and which was sent again meets its own record: claimed, not
/// "in progress elsewhere", and on a free key it replaced nothing.
pub async fn lost_claim_answer_retried_counts_as_claimed<S: Store>(store: S) {
    let (idem, _) = setup(ClaimTwice(store));
    let key = unique("retried-claim");
    let runs = Counted::default();
    let crate::Begin::Claimed(attempt) = idem.begin::<_, u64>(&key, &json!({"n": 1})).await.unwrap() else {
        panic!("a retried claim that meets its own record is a claim")
    };
    assert_eq!(attempt.replaced(), None, "the key was free");
    assert!(!attempt.took_over(), "the retry learns its first write replaced nothing");
    idem.release(attempt).await.unwrap();
    let outcome = idem.run(&key, &json!({"n": 1}), || counted(runs.clone(), 7)).await.unwrap();
    assert_eq!(outcome, Outcome::Fresh(7));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = idem.store().0.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Completed);
}

/// A claim whose answer was lost, after another attempt died in progress, learns on its retry
/// what its first write replaced: the dead attempt's record, its body's hash included. Without
/// it the takeover is hidden (the payments API would send a second body under one key).
pub async fn a_lost_claim_answer_still_tells_what_it_replaced<S: Store>(store: S) {
    let (idem, clock) = setup(ClaimTwice(store));
    let key = unique("retried-takeover");
    let crate::Begin::Claimed(dead) = idem.begin::<_, u64>(&key, &json!({"body": "x"})).await.unwrap() else {
        panic!("claimed")
    };
    let dead_record = idem.store().get(key.as_str()).await.unwrap().unwrap();
    clock.advance(Duration::from_millis(dead.lease_expires_at_ms() - clock.now_ms() + 1));
    drop(dead);
    let crate::Begin::Claimed(takeover) = idem.begin::<_, u64>(&key, &json!({"body": "y"})).await.unwrap() else {
        panic!("a claim past the lease takes the key over")
    };
    assert_eq!(takeover.replaced(), Some(&dead_record), "what the first write replaced, as stored");
    assert!(takeover.took_over());
    // The retry did not overwrite its own record: the record is the takeover's, in progress.
    let record = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.status), (takeover.owner(), Status::InProgress));
    idem.complete(takeover, &1u64).await.unwrap();
    let done = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!((done.status, done.response.as_deref()), (Status::Completed, Some("1")));
}

/// Attempts that each take the key over and die make a run of takeovers: a claim that ends it
/// is answered with the record it replaced and the one the run began with, first sent and
/// resent alike; a completion ends the run.
pub async fn a_run_of_takeovers_is_answered_with_its_first_record<S: Store>(store: S) {
    let store = ClaimTwice(store);
    let key = unique("run");
    let now = 1_800_000_000_000;
    let x = Record { payload_hash: "x".into(), ..in_progress(&key, "a", now, 1_000) };
    assert_eq!(store.claim(&x, now).await.unwrap(), Claim::Acquired { replaced: None });
    let y = Record { payload_hash: "y".into(), ..in_progress(&key, "b", now + 2_000, 1_000) };
    assert_eq!(store.claim(&y, now + 2_000).await.unwrap(), Claim::Acquired { replaced: Some(x.clone()) });
    let z = in_progress(&key, "c", now + 4_000, 1_000);
    let run = Claim::AcquiredInRun { replaced: y.clone(), first: x.clone() };
    assert_eq!(store.claim(&z, now + 4_000).await.unwrap(), run, "b died after taking a's over");
    let w = in_progress(&key, "d", now + 6_000, 1_000);
    let run = Claim::AcquiredInRun { replaced: z.clone(), first: x };
    assert_eq!(store.claim(&w, now + 6_000).await.unwrap(), run, "the run still began with a");
    let completion = Completion { response: Some("1"), expiration_s: 0, now_ms: now + 6_000 };
    store.complete(&w.id, "d", completion).await.unwrap();
    let done = store.get(&w.id).await.unwrap().unwrap();
    let v = in_progress(&key, "e", now + 8_000, 1_000);
    assert_eq!(store.claim(&v, now + 8_000).await.unwrap(), Claim::Acquired { replaced: Some(done) });
}

/// A store whose every claim is sent twice, as an SDK does when the first answer is lost.
struct ClaimTwice<S>(S);

impl<S: Store> Store for ClaimTwice<S> {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, crate::StoreError> {
        let _lost = self.0.claim(record, now_ms).await?;
        self.0.claim(record, now_ms).await
    }
    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), crate::StoreError> {
        self.0.complete(id, owner, completion).await
    }
    async fn release(&self, id: &str, owner: &str) -> Result<(), crate::StoreError> {
        self.0.release(id, owner).await
    }
    async fn get(&self, id: &str) -> Result<Option<Record>, crate::StoreError> {
        self.0.get(id).await
    }
}
