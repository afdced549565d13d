//! What a key answers after its send failed or its window passed: a send whose answer was lost
//! holds the key for its body until the lease ends, then the same body is sent again; a send SQS
//! refused frees the key; another body under a key is refused, within the dedup window or past
//! it. The handler is called as Lambda calls it (a Function URL event parsed by `lambda_http`),
//! over an in-memory store and a queue that records what it is sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use effectively_once::{Config, Idempotency, InMemoryStore, ManualClock};
use lambda_http::Body;
use payments::PaymentEvent;
use payments_api::{Api, EnqueueError, Queue};
use serde_json::{json, Value};

/// Records every event sent; the first send fails after it landed when `lose_first` is set
/// (SQS took the message, its answer was lost), or is refused (not sent) when `refuse_first` is.
#[derive(Default, Clone)]
struct Recording {
    sent: Arc<Mutex<Vec<PaymentEvent>>>,
    lose_first: Arc<AtomicBool>,
    refuse_first: Arc<AtomicBool>,
}

impl Queue for Recording {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        if self.refuse_first.swap(false, Ordering::SeqCst) {
            return Err(EnqueueError::refused("SendMessage: AccessDenied"));
        }
        self.sent.lock().unwrap().push(event.clone());
        if self.lose_first.swap(false, Ordering::SeqCst) {
            return Err(EnqueueError("SendMessage: the answer was lost (timeout)".into()));
        }
        Ok(())
    }
}

impl Recording {
    fn sent(&self) -> Vec<PaymentEvent> {
        self.sent.lock().unwrap().clone()
    }
}

/// `POST /payments` as a Function URL event, with `Idempotency-Key: key`.
fn request(key: &str, body: &str) -> lambda_http::Request {
    let mut event: Value = serde_json::from_str(include_str!("../../../../../events/http-payment.json")).unwrap();
    event["headers"]["idempotency-key"] = json!(key);
    event["body"] = json!(body);
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

async fn pay<S: effectively_once::Store>(api: &Api<S, Recording>, key: &str, body: &str) -> (u16, Value) {
    let response = api.handle(request(key, body)).await;
    let Body::Text(text) = response.body() else { panic!("a text body") };
    (response.status().as_u16(), serde_json::from_str(text).unwrap())
}

/// The status, and whether the answer says it is replayed.
async fn pay_replayed<S: effectively_once::Store>(api: &Api<S, Recording>, key: &str, body: &str) -> (u16, bool) {
    let response = api.handle(request(key, body)).await;
    (response.status().as_u16(), response.headers().get(payments_api::REPLAYED).is_some())
}

fn body(account: &str, cents: i64) -> String {
    format!(r#"{{"account_id": "{account}", "amount_cents": {cents}, "currency": "USD"}}"#)
}

/// After the API's dedup window (24 h by default) the key would be new again to the API, but not
/// to the consumer, whose `payments#{event_id}` record never expires: a second, different event
/// with the same event id would be enqueued and reported as key reuse (DLQ), while the client
/// holds a 202 for a payment never applied. So the same key with another body is `422`, past
/// the window too.
#[tokio::test]
async fn same_key_other_body_after_the_dedup_window_is_not_accepted() {
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_dedup_window(Duration::from_secs(60)).with_clock(clock.clone());
    let queue = Recording::default();
    let api = Api::new(Idempotency::new(InMemoryStore::new(), config), queue.clone());

    let (status, _) = pay(&api, "pay_window", &body("acct_w", 1250)).await;
    assert_eq!(status, 202);
    clock.advance(Duration::from_secs(61));
    let (status, answer) = pay(&api, "pay_window", &body("acct_w", 9999)).await;
    assert_eq!(status, 422, "the event id is taken in the ledger for good: {answer}");
    assert_eq!(queue.sent().len(), 1, "no second, conflicting event for one event id: {:?}", queue.sent());
    // The refusal is stored with the other body: past the window again it is still refused.
    clock.advance(Duration::from_secs(61));
    assert_eq!(pay(&api, "pay_window", &body("acct_w", 9999)).await.0, 422);
    assert_eq!(queue.sent().len(), 1, "{:?}", queue.sent());
}

/// A send whose answer was lost (the message landed) answers 503 and keeps the key: a retry with
/// the same key and *another* body must not claim it afresh, or two different events with one
/// event id would be on the queue (the consumer applying whichever comes first, likely the one
/// the client never got a 202 for, and sending the other to the DLQ).
#[tokio::test]
async fn a_lost_send_then_another_body_is_not_accepted() {
    let queue = Recording::default();
    queue.lose_first.store(true, Ordering::SeqCst);
    let api = Api::new(Idempotency::new(InMemoryStore::new(), Config::default()), queue.clone());

    let (status, _) = pay(&api, "pay_lost", &body("acct_l", 1250)).await;
    assert_eq!(status, 503, "the first send's answer was lost");
    let (status, answer) = pay(&api, "pay_lost", &body("acct_l", 9999)).await;
    let sent = queue.sent();
    assert!(
        sent.iter().all(|event| event.amount_cents == sent[0].amount_cents),
        "one event id, two payloads on the queue ({status} {answer}): {sent:?}"
    );
    // In flight until the first's lease ends (409), refused after it (422).
    assert_eq!((status, &answer["error"]), (409, &json!("request_in_progress")), "{answer}");
}

/// After a lost send the key is held until the lease ends (409 with
/// Retry-After); then the same body is sent again (safe: the consumer keys on the event id), its
/// 202 is stored and replayed to later retries; another body waits (409), then is refused.
#[tokio::test]
async fn a_lost_send_then_the_same_body_is_sent_again() {
    let queue = Recording::default();
    queue.lose_first.store(true, Ordering::SeqCst);
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_lease(Duration::from_secs(10)).with_clock(clock.clone());
    let api = Api::new(Idempotency::new(InMemoryStore::new(), config), queue.clone());

    assert_eq!(pay(&api, "pay_again", &body("acct_a", 1250)).await.0, 503);
    assert_eq!(pay(&api, "pay_again", &body("acct_a", 1250)).await.0, 409, "held until the lease ends");
    assert_eq!(pay(&api, "pay_again", &body("acct_a", 9999)).await.0, 409, "another body waits too");
    clock.advance(Duration::from_secs(11));
    let (status, answer) = pay(&api, "pay_again", &body("acct_a", 1250)).await;
    assert_eq!((status, answer), (202, json!({"event_id": "pay_again"})));
    let replay = pay_replayed(&api, "pay_again", &body("acct_a", 1250)).await;
    assert_eq!(replay, (202, true), "the stored 202 is replayed, not sent again");
    assert_eq!(pay(&api, "pay_again", &body("acct_a", 9999)).await.0, 422);
    let amounts: Vec<i64> = queue.sent().iter().map(|event| event.amount_cents).collect();
    assert_eq!(amounts, [1250, 1250], "the same event twice, never the other body");
}

/// A send SQS refused (nothing on the queue) frees the key: a retry with another body is the
/// first request, and is accepted.
#[tokio::test]
async fn a_refused_send_frees_the_key() {
    let queue = Recording::default();
    queue.refuse_first.store(true, Ordering::SeqCst);
    let api = Api::new(Idempotency::new(InMemoryStore::new(), Config::default()), queue.clone());

    assert_eq!(pay(&api, "pay_refused", &body("acct_r", 1250)).await.0, 503);
    assert_eq!(pay(&api, "pay_refused", &body("acct_r", 1300)).await.0, 202);
    let amounts: Vec<i64> = queue.sent().iter().map(|event| event.amount_cents).collect();
    assert_eq!(amounts, [1300]);
}
