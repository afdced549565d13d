//! The charges consumer against a fake provider on 127.0.0.1 and the local AWS: one request per
//! payment however often it is delivered, the same key on a retry, 4xx answers stored.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use effectively_once::{Config, Idempotency, Key, Lookup};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_effects::testing::unique_name;
use effectively_once_lambda::events::{Context, LambdaEvent};
use effectively_once_lambda::sqs::{self, Options};
use effectively_once_lambda::testing::sqs::Batch;
use outbound_idempotency_key::{Answer, Charges, Provider};

/// What the fake provider received: each request's `Idempotency-Key` (empty when absent).
type Requests = Arc<Mutex<Vec<String>>>;

/// A provider on a loopback port answering the `statuses` in turn (the last one from then on),
/// recording every request's key. Hand-rolled on std: one request per connection.
fn provider(statuses: &[u16]) -> (Provider, Requests) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let requests = Requests::default();
    let seen = requests.clone();
    let statuses = statuses.to_vec();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut key, mut length) = (String::new(), 0);
            reader.read_line(&mut String::new()).unwrap(); // POST /charges HTTP/1.1
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let Some((name, value)) = line.trim_end().split_once(": ") else { break };
                match name.to_ascii_lowercase().as_str() {
                    "idempotency-key" => key = value.to_owned(),
                    "content-length" => length = value.parse().unwrap(),
                    _ => {}
                }
            }
            reader.read_exact(&mut vec![0; length]).unwrap();
            seen.lock().unwrap().push(key);
            let status = statuses[n.min(statuses.len() - 1)];
            let body = format!(r#"{{"status":{status}}}"#);
            let head = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            stream.write_all(format!("{head}{body}").as_bytes()).unwrap();
        }
    });
    (Provider { addr }, requests)
}

async fn charges(provider: Provider) -> Charges {
    let (store, _) = fresh_store().await;
    Charges { idempotency: Idempotency::new(store, Config::default()), provider }
}

/// Delivers `body` `copies` times in one batch; returns the message ids to redeliver.
async fn deliver(charges: &Charges, body: &str, copies: usize) -> Vec<String> {
    let batch = (0..copies).fold(Batch::new(), |batch, _| batch.message(body));
    let options = Options { emit_metrics: false, ..Options::new("outbound-idempotency-key") };
    let response = sqs::process(charges, LambdaEvent::new(batch.build(), Context::default()), &options).await;
    response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()
}

fn payment() -> (String, String) {
    let id = unique_name("pay");
    let body = format!(r#"{{"payment_id": "{id}", "amount_cents": 1250, "currency": "USD"}}"#);
    (id, body)
}

async fn stored(charges: &Charges, id: &str) -> Lookup<Answer> {
    charges.idempotency.get::<Answer>(&Key::new("charge", id).unwrap()).await.unwrap()
}

/// The same payment twice in one batch, then the batch again: one request reaches the
/// provider, keyed by the record's key.
#[tokio::test]
async fn a_duplicate_delivery_sends_no_second_request() {
    let (provider, requests) = provider(&[201]);
    let charges = charges(provider).await;
    let (id, body) = payment();
    assert!(deliver(&charges, &body, 2).await.is_empty());
    assert!(deliver(&charges, &body, 1).await.is_empty());
    let key = Key::new("charge", &id).unwrap().idempotency_key();
    assert_eq!(*requests.lock().unwrap(), vec![key], "one request, with the record's key");
    let answer = Answer { status: 201, body: r#"{"status":201}"#.into() };
    assert_eq!(stored(&charges, &id).await, Lookup::Completed(answer));
}

/// A 500 fails the message (redelivered); the redelivery sends the same key and its 201 is
/// stored; a later duplicate sends nothing.
#[tokio::test]
async fn a_provider_500_then_success_sends_the_same_key_twice_and_stores_one_answer() {
    let (provider, requests) = provider(&[500, 201]);
    let charges = charges(provider).await;
    let (id, body) = payment();
    assert_eq!(deliver(&charges, &body, 1).await, vec!["m-1".to_owned()], "a 500 is retried");
    assert_eq!(stored(&charges, &id).await, Lookup::Absent, "nothing stored for a 500");
    assert!(deliver(&charges, &body, 1).await.is_empty());
    assert!(deliver(&charges, &body, 1).await.is_empty());
    let key = Key::new("charge", &id).unwrap().idempotency_key();
    assert_eq!(*requests.lock().unwrap(), vec![key.clone(), key], "the same key twice, then nothing");
    let answer = Answer { status: 201, body: r#"{"status":201}"#.into() };
    assert_eq!(stored(&charges, &id).await, Lookup::Completed(answer));
}

/// A 402 (card declined) is the provider's verdict: stored, the message not retried, and a
/// redelivery answered from the record without asking again.
#[tokio::test]
async fn a_402_is_stored_and_replayed_not_retried() {
    let (provider, requests) = provider(&[402, 201]);
    let charges = charges(provider).await;
    let (id, body) = payment();
    assert!(deliver(&charges, &body, 1).await.is_empty(), "a 402 is not retried");
    assert!(deliver(&charges, &body, 1).await.is_empty(), "the redelivery is answered");
    assert_eq!(requests.lock().unwrap().len(), 1, "one request");
    let answer = Answer { status: 402, body: r#"{"status":402}"#.into() };
    assert_eq!(stored(&charges, &id).await, Lookup::Completed(answer));
}
