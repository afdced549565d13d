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

/// What becomes of one send.
#[derive(Clone, Copy)]
enum Fate {
    /// Times out before the message is sent: its outcome unknown to the API.
    TimesOut,
    /// Lands, but its answer is lost: its outcome unknown to the API.
    LandsUnanswered,
    /// Refused: nothing sent.
    Refused,
    /// Lands and is answered.
    Lands,
}

/// A queue whose sends go as its script says, one entry a call (`Lands` past its end), and
/// which keeps what landed.
struct Scripted {
    script: Vec<Fate>,
    sent: Mutex<Vec<PaymentEvent>>,
    calls: Mutex<usize>,
}

impl Queue for Scripted {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        let send = self.script.get(call - 1).copied().unwrap_or(Fate::Lands);
        if let Fate::LandsUnanswered | Fate::Lands = send {
            self.sent.lock().unwrap().push(event.clone());
        }
        match send {
            Fate::TimesOut => Err(EnqueueError("timed out: the outcome is unknown".into())),
            Fate::LandsUnanswered => Err(EnqueueError("the answer was lost: the outcome is unknown".into())),
            Fate::Refused => Err(EnqueueError::refused("throttled: nothing sent")),
            Fate::Lands => Ok(()),
        }
    }
}

/// The API over real HTTP, on an idempotency table of its own with a 2 s lease on a clock the
/// test moves, sending to a scripted queue; and a key no other test uses.
struct Served {
    server: Server,
    clock: Arc<ManualClock>,
    queue: Arc<Scripted>,
    key: String,
}

impl Served {
    async fn new(script: &[Fate]) -> Served {
        let (store, _) = fresh_store().await;
        let clock = Arc::new(ManualClock::new());
        let config = Config::default().with_lease(Duration::from_secs(2)).with_clock(clock.clone());
        let queue = Arc::new(Scripted { script: script.to_vec(), sent: Mutex::default(), calls: Mutex::default() });
        let api = Arc::new(Api::new(Idempotency::new(store, config), queue.clone()));
        let server = local::api::serve(move |request| {
            let api = api.clone();
            async move { api.handle(request).await }
        })
        .await
        .unwrap();
        Served { server, clock, queue, key: effectively_once_dynamodb::testing::unique_name("pay") }
    }

    /// A payment of `cents` to `acct_a` under the test's key.
    async fn pay(&self, cents: i64) -> Reply {
        let body = format!(r#"{{"account_id": "acct_a", "amount_cents": {cents}, "currency": "USD"}}"#);
        let addr = self.server.addr().to_string();
        post(&addr, "/payments", Some(&self.key), &body, Duration::from_secs(30)).await.unwrap()
    }

    /// Past the lease of the attempt that holds the key.
    fn after_the_lease(&self) {
        self.clock.advance(Duration::from_secs(3));
    }

    /// The amounts that landed on the queue, in order.
    fn sent(&self) -> Vec<i64> {
        self.queue.sent.lock().unwrap().iter().map(|e| e.amount_cents).collect()
    }
}

#[tokio::test]
async fn the_first_body_takes_its_key_over_after_another_bodys_refusal() {
    let run = Served::new(&[Fate::TimesOut]).await;

    let first = run.pay(4200).await;
    assert_eq!(first.status, 503, "outcome unknown: {first:?}");
    // After the lease, another body under the same key is refused, rightly.
    run.after_the_lease();
    let other = run.pay(9999).await;
    assert_eq!(other.status, 422, "{other:?}");
    // The refused attempt holds the key until its own lease ends: the first body waits.
    let early = run.pay(4200).await;
    assert_eq!(early.status, 409, "{early:?}");
    run.after_the_lease();
    // The first body's client honours Retry-After and retries: its key, its body.
    let retry = run.pay(4200).await;
    assert_eq!(
        (retry.status, run.sent()),
        (202, vec![4200]),
        "the first body's retry is accepted and enqueued: {retry:?}"
    );
    // Its answer is stored: a later retry replays it and sends nothing more.
    let again = run.pay(4200).await;
    assert_eq!((again.status, run.sent()), (202, vec![4200]), "replayed: {again:?}");
}

#[tokio::test]
async fn a_refused_takeover_keeps_the_key_of_a_send_that_may_have_landed() {
    let run = Served::new(&[Fate::LandsUnanswered, Fate::Refused]).await;

    // Body A: its send lands, its answer is lost.
    let first = run.pay(4200).await;
    assert_eq!(first.status, 503, "{first:?}");
    // After the lease, A's retry takes the key over; its resend is refused, and the key released.
    run.after_the_lease();
    let retry = run.pay(4200).await;
    assert_eq!(retry.status, 503, "{retry:?}");
    // Body B under the same key: A's event is on the queue, so B must never be accepted: it
    // waits while A's retry holds the key (409), and is refused after (422).
    let other = run.pay(9999).await;
    assert_eq!(other.status, 409, "{other:?}");
    run.after_the_lease();
    let other = run.pay(9999).await;
    assert_eq!(
        (other.status, run.sent()),
        (422, vec![4200]),
        "one body per event id on the queue; a 202 for B would be a payment the consumer drops as key reuse"
    );
}
