//! One body per key, whatever answer is lost and whoever dies: a claim's write lands and its
//! answer does not (the retry, the SDK's or the Redis store's resend, meets the claim's own
//! record), or an attempt takes the key over and dies before it decides. A takeover of another
//! body's key must stay a takeover.
//!
//! The handler is called as Lambda calls it (a Function URL event parsed by `lambda_http`), over
//! an in-memory store wrapped to lose answers and a queue that records what it is sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use effectively_once::{Claim, Completion, Config, Idempotency, InMemoryStore, ManualClock, Record, Store, StoreError};
use lambda_http::Body;
use payments::PaymentEvent;
use payments_api::{Api, EnqueueError, Queue};
use serde_json::{json, Value};

/// A store that, when told, lets the next claim land and then answers its retry (as an SDK
/// retries a write whose answer was lost), or fails the next completion without landing it.
#[derive(Default, Clone)]
struct Lossy {
    store: Arc<InMemoryStore>,
    lose_next_claim: Arc<AtomicBool>,
    fail_next_completion: Arc<AtomicBool>,
}

impl Store for Lossy {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        if self.lose_next_claim.swap(false, Ordering::SeqCst) {
            let _lost = self.store.claim(record, now_ms).await?;
        }
        self.store.claim(record, now_ms).await
    }
    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        if self.fail_next_completion.swap(false, Ordering::SeqCst) {
            return Err(StoreError::new(effectively_once::StoreErrorKind::Other, "completion refused"));
        }
        self.store.complete(id, owner, completion).await
    }
    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        self.store.release(id, owner).await
    }
    async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
        self.store.get(id).await
    }
}

/// Records every event sent. `lose_next` lets the next send land and loses its answer;
/// `refuse_next` refuses it (4xx, never sent).
#[derive(Default, Clone)]
struct Recording {
    sent: Arc<Mutex<Vec<PaymentEvent>>>,
    lose_next: Arc<AtomicBool>,
    refuse_next: Arc<AtomicBool>,
}

impl Queue for Recording {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        if self.refuse_next.swap(false, Ordering::SeqCst) {
            return Err(EnqueueError::refused("SendMessage: AccessDenied"));
        }
        self.sent.lock().unwrap().push(event.clone());
        if self.lose_next.swap(false, Ordering::SeqCst) {
            return Err(EnqueueError("SendMessage: the answer was lost (timeout)".into()));
        }
        Ok(())
    }
}

impl Recording {
    /// The amounts sent, in order: one per body here.
    fn amounts(&self) -> Vec<i64> {
        self.sent.lock().unwrap().iter().map(|event| event.amount_cents).collect()
    }
}

struct Setup {
    api: Api<Lossy, Recording>,
    store: Lossy,
    queue: Recording,
    clock: Arc<ManualClock>,
}

fn setup() -> Setup {
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_lease(Duration::from_secs(30)).with_clock(clock.clone());
    let store = Lossy::default();
    let queue = Recording::default();
    let api = Api::new(Idempotency::new(store.clone(), config), queue.clone());
    Setup { api, store, queue, clock }
}

/// `POST /payments` as a Function URL event, with `Idempotency-Key: key`.
fn request(key: &str, cents: i64) -> lambda_http::Request {
    let mut event: Value = serde_json::from_str(include_str!("../../../../../events/http-payment.json")).unwrap();
    event["headers"]["idempotency-key"] = json!(key);
    event["body"] = json!(format!(r#"{{"account_id": "acct_l", "amount_cents": {cents}, "currency": "USD"}}"#));
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

impl Setup {
    async fn pay(&self, key: &str, cents: i64) -> (u16, Value) {
        let response = self.api.handle(request(key, cents)).await;
        let Body::Text(text) = response.body() else { panic!("a text body") };
        (response.status().as_u16(), serde_json::from_str(text).unwrap())
    }

    fn past_the_lease(&self) {
        self.clock.advance(Duration::from_secs(31));
    }
}

/// X is answered 202 but its completion fails, so its record stays in progress; after X's
/// lease, Y's takeover claim loses its answer. Y is the other body: 422, never sent, its
/// attempt left holding the key until its lease ends (X's retry meanwhile: 409); then X's
/// retries are still X's (sent again, harmlessly, and 202).
#[tokio::test]
async fn a_takeover_whose_claim_answer_is_lost_refuses_another_body() {
    let s = setup();
    s.store.fail_next_completion.store(true, Ordering::SeqCst);
    assert_eq!(s.pay("pay_c1", 100).await.0, 202);
    s.past_the_lease();
    s.store.lose_next_claim.store(true, Ordering::SeqCst);
    let (status, answer) = s.pay("pay_c1", 999).await;
    assert_eq!((status, &answer["error"]), (422, &json!("idempotency_key_reused")), "{answer}");
    assert_eq!(s.pay("pay_c1", 100).await.0, 409, "Y's refused attempt holds the key until its lease ends");
    s.past_the_lease();
    assert_eq!(s.pay("pay_c1", 100).await.0, 202, "X's retry: the key is X's");
    assert_eq!(s.pay("pay_c1", 999).await.0, 422);
    assert!(s.queue.amounts().iter().all(|&cents| cents == 100), "only X on the queue: {:?}", s.queue.amounts());
}

/// X's send lands with its answer lost (503, the key held for X); after the lease, Y's takeover
/// claim loses its answer. Y: 422; X, the payment that is on the queue, keeps its key (202).
#[tokio::test]
async fn a_lost_send_keeps_its_key_through_a_takeover_with_a_lost_claim_answer() {
    let s = setup();
    s.queue.lose_next.store(true, Ordering::SeqCst);
    assert_eq!(s.pay("pay_c2", 100).await.0, 503);
    s.past_the_lease();
    s.store.lose_next_claim.store(true, Ordering::SeqCst);
    let (status, answer) = s.pay("pay_c2", 999).await;
    assert_eq!((status, &answer["error"]), (422, &json!("idempotency_key_reused")), "{answer}");
    s.past_the_lease();
    let (status, answer) = s.pay("pay_c2", 100).await;
    assert_eq!(status, 202, "X is the payment on the queue: {answer}");
    assert!(s.queue.amounts().iter().all(|&cents| cents == 100), "only X on the queue: {:?}", s.queue.amounts());
}

/// X's send lands with its answer lost; after the lease X's own retry takes the key over with a
/// lost claim answer and its resend is refused (4xx). The first send may be on the queue: the
/// key stays X's, so Y is never answered 202.
#[tokio::test]
async fn a_refused_resend_over_a_lost_claim_answer_keeps_the_key() {
    let s = setup();
    s.queue.lose_next.store(true, Ordering::SeqCst);
    assert_eq!(s.pay("pay_c3", 100).await.0, 503);
    s.past_the_lease();
    s.store.lose_next_claim.store(true, Ordering::SeqCst);
    s.queue.refuse_next.store(true, Ordering::SeqCst);
    let (status, _) = s.pay("pay_c3", 100).await;
    assert_eq!(status, 503, "the key is held, not released");
    for _ in 0..2 {
        let (status, answer) = s.pay("pay_c3", 999).await;
        assert_ne!(status, 202, "Y must not take X's key: {answer}");
        s.past_the_lease();
    }
    assert_eq!(s.pay("pay_c3", 100).await.0, 202, "X's retry sends again");
    assert!(s.queue.amounts().iter().all(|&cents| cents == 100), "only X on the queue: {:?}", s.queue.amounts());
}

/// Y's send lands with its answer lost; after the lease X takes the key over and dies before its
/// refusal is stored (its record, X's body, stays in progress); after that lease X comes again.
/// The key is still Y's: X is refused, never sent, and Y's retry is accepted.
#[tokio::test]
async fn an_attempt_that_died_before_deciding_does_not_bind_the_key() {
    let s = setup();
    s.queue.lose_next.store(true, Ordering::SeqCst);
    assert_eq!(s.pay("pay_c5", 999).await.0, 503);
    s.past_the_lease();
    s.store.fail_next_completion.store(true, Ordering::SeqCst);
    assert_eq!(s.pay("pay_c5", 100).await.0, 422, "its refusal is not stored");
    s.past_the_lease();
    let (status, answer) = s.pay("pay_c5", 100).await;
    assert_eq!((status, &answer["error"]), (422, &json!("idempotency_key_reused")), "{answer}");
    s.past_the_lease();
    assert_eq!(s.pay("pay_c5", 999).await.0, 202, "Y, the body on the queue, keeps its key");
    assert!(s.queue.amounts().iter().all(|&cents| cents == 999), "only Y on the queue: {:?}", s.queue.amounts());
}

/// X is answered 202 (on the queue) but its completion fails; after X's lease Y takes the key
/// over and is refused, but its refusal is not stored either, so Y's record stays in progress.
/// X's retry during Y's lease meets Y's record: `409` in flight, not a final `422`; after the
/// lease X is accepted again.
#[tokio::test]
async fn the_body_on_the_queue_is_never_refused() {
    let s = setup();
    s.store.fail_next_completion.store(true, Ordering::SeqCst);
    assert_eq!(s.pay("pay_c6", 100).await.0, 202, "X accepted: on the queue");
    s.past_the_lease();
    s.store.fail_next_completion.store(true, Ordering::SeqCst);
    assert_eq!(s.pay("pay_c6", 999).await.0, 422, "Y refused; its refusal not stored");
    let (status, answer) = s.pay("pay_c6", 100).await;
    assert_eq!((status, &answer["error"]), (409, &json!("request_in_progress")), "{answer}");
    s.past_the_lease();
    assert_eq!(s.pay("pay_c6", 100).await.0, 202);
    assert!(s.queue.amounts().iter().all(|&cents| cents == 100), "only X on the queue: {:?}", s.queue.amounts());
}

/// A store that, like one that cannot keep what a claim replaced, answers a retried claim with
/// the claim's own record: what the first write replaced is unknown.
#[derive(Default, Clone)]
struct Forgetful(Lossy);

impl Store for Forgetful {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        if self.0.lose_next_claim.swap(false, Ordering::SeqCst) {
            let _lost = self.0.store.claim(record, now_ms).await?;
            let own = self.0.store.get(&record.id).await?.expect("the claim landed");
            return Ok(Claim::Exists(own));
        }
        self.0.claim(record, now_ms).await
    }
    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        self.0.complete(id, owner, completion).await
    }
    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        self.0.release(id, owner).await
    }
    async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
        self.0.get(id).await
    }
}

/// Where what a claim replaced is unknown, the key is held for every body: nothing more is
/// sent, nobody gets `202`, and nobody gets `422` (the body on the queue may be either).
#[tokio::test]
async fn an_unknown_replaced_record_holds_the_key() {
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_lease(Duration::from_secs(30)).with_clock(clock.clone());
    let store = Forgetful::default();
    let queue = Recording::default();
    let api = Api::new(Idempotency::new(store.clone(), config), queue.clone());
    let pay = |cents: i64| {
        let api = &api;
        async move {
            let response = api.handle(request("pay_c4", cents)).await;
            let Body::Text(text) = response.body() else { panic!("a text body") };
            (response.status().as_u16(), serde_json::from_str::<Value>(text).unwrap())
        }
    };
    queue.lose_next.store(true, Ordering::SeqCst);
    assert_eq!(pay(100).await.0, 503);
    clock.advance(Duration::from_secs(31));
    store.0.lose_next_claim.store(true, Ordering::SeqCst);
    for cents in [999, 999, 100, 100, 7] {
        let (status, answer) = pay(cents).await;
        assert_eq!((status, &answer["error"]), (503, &json!("key_held")), "{cents}: {answer}");
        clock.advance(Duration::from_secs(31));
    }
    assert_eq!(queue.amounts(), vec![100], "nothing sent after the hold");
}
