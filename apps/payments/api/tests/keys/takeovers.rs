//! A send whose outcome is unknown holds the key for its body until the lease ends, and then the
//! same body takes it over and sends again. If another body's request comes first after the
//! lease, it is refused (`422`) and its attempt holds the key until its own lease ends; then the
//! first body's retry takes the key over, sends once, and is replayed. Over real HTTP, on the
//! local AWS's idempotency table.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use effectively_once::{Config, Idempotency, ManualClock};
use effectively_once_dynamodb::testing::fresh_store;
use local::api::{post, Reply, Server};
use payments::PaymentEvent;
use payments_api::{Api, EnqueueError, Queue};

/// A queue whose first send times out before the message is sent (its outcome unknown to the
/// API), and which keeps the rest.
#[derive(Default)]
struct FirstSendTimesOut {
    sent: Mutex<Vec<PaymentEvent>>,
    calls: Mutex<u32>,
}

impl Queue for FirstSendTimesOut {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        let first = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls == 1
        };
        if first {
            return Err(EnqueueError("timed out: the outcome is unknown".into()));
        }
        self.sent.lock().unwrap().push(event.clone());
        Ok(())
    }
}

fn body(account: &str, cents: i64) -> String {
    format!(r#"{{"account_id": "{account}", "amount_cents": {cents}, "currency": "USD"}}"#)
}

async fn pay(server: &Server, key: &str, body: &str) -> Reply {
    post(&server.addr().to_string(), "/payments", Some(key), body, Duration::from_secs(30)).await.unwrap()
}

#[tokio::test]
async fn the_first_body_takes_its_key_over_after_another_bodys_refusal() {
    let (store, _) = fresh_store().await;
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_lease(Duration::from_secs(2)).with_clock(clock.clone());
    let queue = Arc::new(FirstSendTimesOut::default());
    let api = Arc::new(Api::new(Idempotency::new(store, config), queue.clone()));
    let server = local::api::serve(move |request| {
        let api = api.clone();
        async move { api.handle(request).await }
    })
    .await
    .unwrap();
    let key = effectively_once_dynamodb::testing::unique_name("pay");

    let first = pay(&server, &key, &body("acct_a", 4200)).await;
    assert_eq!(first.status, 503, "outcome unknown: {first:?}");
    // After the lease, another body under the same key is refused, rightly.
    clock.advance(Duration::from_secs(3));
    let other = pay(&server, &key, &body("acct_a", 9999)).await;
    assert_eq!(other.status, 422, "{other:?}");
    // The refused attempt holds the key until its own lease ends: the first body waits.
    let early = pay(&server, &key, &body("acct_a", 4200)).await;
    assert_eq!(early.status, 409, "{early:?}");
    clock.advance(Duration::from_secs(3));
    // The first body's client honours Retry-After and retries: its key, its body.
    let retry = pay(&server, &key, &body("acct_a", 4200)).await;
    let sent: Vec<i64> = queue.sent.lock().unwrap().iter().map(|e| e.amount_cents).collect();
    assert_eq!((retry.status, sent), (202, vec![4200]), "the first body's retry is accepted and enqueued: {retry:?}");
    // Its answer is stored: a later retry replays it and sends nothing more.
    let again = pay(&server, &key, &body("acct_a", 4200)).await;
    let sent: Vec<i64> = queue.sent.lock().unwrap().iter().map(|e| e.amount_cents).collect();
    assert_eq!((again.status, sent), (202, vec![4200]), "replayed: {again:?}");
}

/// A queue that answers from a script: the first send lands but its answer is lost (unknown),
/// the second is refused (nothing sent), the rest land.
#[derive(Default)]
struct Scripted {
    sent: Mutex<Vec<PaymentEvent>>,
    calls: Mutex<u32>,
}

impl Queue for Scripted {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        match call {
            1 => {
                self.sent.lock().unwrap().push(event.clone());
                Err(EnqueueError("the answer was lost: the outcome is unknown".into()))
            }
            2 => Err(EnqueueError::refused("throttled: nothing sent")),
            _ => {
                self.sent.lock().unwrap().push(event.clone());
                Ok(())
            }
        }
    }
}

#[tokio::test]
async fn a_refused_takeover_keeps_the_key_of_a_send_that_may_have_landed() {
    let (store, _) = fresh_store().await;
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_lease(Duration::from_secs(2)).with_clock(clock.clone());
    let queue = Arc::new(Scripted::default());
    let api = Arc::new(Api::new(Idempotency::new(store, config), queue.clone()));
    let server = local::api::serve(move |request| {
        let api = api.clone();
        async move { api.handle(request).await }
    })
    .await
    .unwrap();
    let key = effectively_once_dynamodb::testing::unique_name("pay");

    // Body A: its send lands, its answer is lost.
    let first = pay(&server, &key, &body("acct_a", 4200)).await;
    assert_eq!(first.status, 503, "{first:?}");
    // After the lease, A's retry takes the key over; its resend is refused, and the key released.
    clock.advance(Duration::from_secs(3));
    let retry = pay(&server, &key, &body("acct_a", 4200)).await;
    assert_eq!(retry.status, 503, "{retry:?}");
    // Body B under the same key: A's event is on the queue, so B must never be accepted: it
    // waits while A's retry holds the key (409), and is refused after (422).
    let other = pay(&server, &key, &body("acct_a", 9999)).await;
    assert_eq!(other.status, 409, "{other:?}");
    clock.advance(Duration::from_secs(3));
    let other = pay(&server, &key, &body("acct_a", 9999)).await;
    let sent: Vec<i64> = queue.sent.lock().unwrap().iter().map(|e| e.amount_cents).collect();
    assert_eq!(
        (other.status, sent),
        (422, vec![4200]),
        "one body per event id on the queue; a 202 for B would be a payment the consumer drops as key reuse"
    );
}
