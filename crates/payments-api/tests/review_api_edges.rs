//! Review of issue 16 (the payments API): what the API let through, each test failing before its
//! fix (they were ignored until then), plus the fixes' other halves.
//! The handler is called as Lambda calls it (a Function URL event parsed by `lambda_http`), over
//! an in-memory store and a queue that records what it is sent; the FIFO test sends to the local
//! AWS's SQS.

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
    let mut event: Value = serde_json::from_str(include_str!("../../../events/http-payment.json")).unwrap();
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

/// After the API's dedup window (24 h by default) the key is new again to the API, but not to
/// the consumer, whose `payments#{event_id}` record never expires: the same key with another
/// body is answered `202` and a second, different event with the same event id is enqueued,
/// which the consumer reports as key reuse (DLQ). The client holds a 202 for a payment that is
/// never applied; the contract's answer for "same key, other body" is 422.
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

/// A send whose answer was lost (the message landed) releases the record and answers 503; a
/// retry with the same key and *another* body then claims the key afresh and is answered 202.
/// Two different events with one event id are on the queue: the consumer applies whichever
/// comes first (likely the one the client never got a 202 for) and sends the other to the DLQ.
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

/// The fix's other half: after a lost send the key is held until the lease ends (409 with
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

/// A body naming `amount_cents` twice: `5.0` and `7.0` is refused (`400`, the payments crate
/// will not guess which copy the producer meant), but `5` and `7` is accepted as 7 with a 202.
#[tokio::test]
async fn a_body_naming_the_amount_twice_is_refused() {
    let queue = Recording::default();
    let api = Api::new(Idempotency::new(InMemoryStore::new(), Config::default()), queue.clone());
    let twice = r#"{"account_id": "acct_d", "amount_cents": 5, "amount_cents": 7, "currency": "USD"}"#;
    let (status, answer) = pay(&api, "pay_twice", twice).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["message"].as_str().unwrap().starts_with("amount_cents:"), "{answer}");
    assert!(queue.sent().is_empty(), "{:?}", queue.sent());
}

/// A key of 129 to 200 characters (valid by the contract) and an account id as long: on a FIFO
/// queue they become `MessageDeduplicationId` and `MessageGroupId`, which SQS caps at 128
/// characters. Real SQS refuses the send (InvalidParameterValue) on every try, so the client
/// gets `503 unavailable, try again` forever; the local emulator does not check the length,
/// so this test reads the ids back off the message.
#[tokio::test]
async fn fifo_ids_fit_sqs_limits_for_every_valid_key() {
    use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
    use effectively_once_dynamodb::testing::unique_name;

    let clients = local::Clients::local().await;
    let sqs = clients.sqs.clone();
    let fifo = sqs
        .create_queue()
        .queue_name(format!("{}.fifo", unique_name("review-api")))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let api = Api::new(
        Idempotency::new(InMemoryStore::new(), Config::default()),
        payments_api::SqsQueue::new(sqs.clone(), &fifo, true),
    );
    let key = format!("pay_{}", "k".repeat(196));
    let account = format!("acct_{}", "a".repeat(195));
    let response = api.handle(request(&key, &body(&account, 800))).await;
    let status = response.status().as_u16();
    let received = sqs
        .receive_message()
        .queue_url(&fifo)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    sqs.delete_queue().queue_url(&fifo).send().await.unwrap();
    assert_eq!(status, 202, "a key and an account id of 200 characters are valid");
    let attributes = received.messages()[0].attributes().unwrap();
    let dedup = &attributes[&MessageSystemAttributeName::MessageDeduplicationId];
    let group = &attributes[&MessageSystemAttributeName::MessageGroupId];
    assert!(dedup.len() <= 128, "MessageDeduplicationId has {} characters", dedup.len());
    assert!(group.len() <= 128, "MessageGroupId has {} characters", group.len());
}

/// Behind an API Gateway HTTP API on a named stage (`prod`), API Gateway sends
/// `rawPath: "/prod/payments"`, and `lambda_http` keeps the stage in the path (unless
/// `AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH` is set, which nothing sets): every request is
/// answered `404 no route /prod/payments`. The crate says it serves HTTP API events; only the
/// `$default` stage works.
#[tokio::test]
async fn an_http_api_on_a_named_stage_reaches_the_route() {
    let mut event: Value = serde_json::from_str(include_str!("../../../events/apigw-http-payment.json")).unwrap();
    event["rawPath"] = json!("/prod/payments");
    event["requestContext"]["http"]["path"] = json!("/prod/payments");
    event["requestContext"]["stage"] = json!("prod");
    event["headers"]["idempotency-key"] = json!("pay_stage");
    let queue = Recording::default();
    let api = Api::new(Idempotency::new(InMemoryStore::new(), Config::default()), queue.clone());
    let response = api.handle(lambda_http::request::from_str(&event.to_string()).unwrap()).await;
    let Body::Text(text) = response.body() else { panic!("a text body") };
    assert_eq!(response.status().as_u16(), 202, "{text}");
    assert_eq!(queue.sent().len(), 1);
}
