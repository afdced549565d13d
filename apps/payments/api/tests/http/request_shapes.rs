//! Requests as they arrive: an HTTP API on a named stage reaches the route, and a body naming a
//! field twice is refused rather than guessed at. The handler is called as Lambda calls it, over
//! an in-memory store and a queue that records what it is sent.

use std::sync::{Arc, Mutex};

use effectively_once::{Config, Idempotency, InMemoryStore};
use lambda_http::Body;
use payments::PaymentEvent;
use payments_api::{Api, EnqueueError, Queue};
use serde_json::{json, Value};

/// Records every event sent.
#[derive(Default, Clone)]
struct Recording {
    sent: Arc<Mutex<Vec<PaymentEvent>>>,
}

impl Queue for Recording {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        self.sent.lock().unwrap().push(event.clone());
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

/// Behind an API Gateway HTTP API on a named stage (`prod`), API Gateway sends
/// `rawPath: "/prod/payments"`, and `lambda_http` keeps the stage in the path (unless
/// `AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH` is set, which nothing sets): every request is
/// answered `404 no route /prod/payments`. The crate says it serves HTTP API events; only the
/// `$default` stage works.
#[tokio::test]
async fn an_http_api_on_a_named_stage_reaches_the_route() {
    let mut event: Value = serde_json::from_str(include_str!("../../../../../events/apigw-http-payment.json")).unwrap();
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
