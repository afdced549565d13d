//! What Powertools users expect, each shown working: a tower layer on a Lambda handler, an
//! idempotent function, validation on selected fields, the local cache, the replay hook, the
//! disable switch, and a keyed outbound call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use effectively_once::layer::IdempotencyLayer;
use effectively_once::{outbound, CachedStore, Config, Idempotency, InMemoryStore, Key, Outcome, DISABLED_VARS};
use effectively_once_dynamodb::testing::fresh_store;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};
use tower_layer::Layer;
use tower_service::Service;

#[tokio::test]
async fn a_lambda_handler_wrapped_by_the_layer_runs_once_per_event_id() {
    let (store, requests) = fresh_store().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let handler = lambda_runtime::service_fn(move |event: LambdaEvent<Value>| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok::<_, lambda_runtime::Error>(json!({"charged": event.payload["amount"], "run": n})) }
    });
    let layer = IdempotencyLayer::json_pointer(
        Idempotency::new(store, Config::default()),
        "charges",
        "/event_id",
        |event: &LambdaEvent<Value>| event.payload.clone(),
    );
    let mut service = layer.layer(handler);
    let event = || LambdaEvent::new(json!({"event_id": "ch_1", "amount": 42}), Context::default());
    let first = service.call(event()).await.unwrap();
    let second = service.call(event()).await.unwrap();
    assert_eq!(first, json!({"charged": 42, "run": 1}));
    assert_eq!(second, first, "the stored response, not a second run");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(requests.total(), 3, "claim + complete, then one claim for the duplicate");
}

#[tokio::test]
async fn an_idempotent_function_with_validation_on_selected_fields() {
    let idem = Idempotency::new(InMemoryStore::new(), Config::default().with_payload_fields(["/amount", "/currency"]));
    let runs = Arc::new(AtomicUsize::new(0));
    let refund = idem.wrap(
        "refund",
        |r: &Value| r["refund_id"].as_str().unwrap_or_default().to_owned(),
        |r: Value| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(r["amount"].as_i64().unwrap_or(0))
            }
        },
    );
    let first = refund.call(json!({"refund_id": "r1", "amount": 50, "currency": "EUR"})).await.unwrap();
    // A retry that adds a harmless field is still the same refund.
    let retry = refund.call(json!({"refund_id": "r1", "amount": 50, "currency": "EUR", "trace": "x"})).await.unwrap();
    assert_eq!((first, retry), (Outcome::Fresh(50), Outcome::Replayed(50)));
    // Another amount under the same id is key reuse.
    assert!(refund.call(json!({"refund_id": "r1", "amount": 60, "currency": "EUR"})).await.is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_local_cache_answers_a_duplicate_with_zero_dynamodb_requests() {
    let (store, requests) = fresh_store().await;
    let idem = Idempotency::new(CachedStore::new(store, 256), Config::default());
    let key = Key::new("cached", "e1").unwrap();
    idem.run(&key, &json!(1), || async { Ok::<_, ()>(1) }).await.unwrap();
    assert_eq!(requests.total(), 2);
    requests.reset();
    assert_eq!(idem.run(&key, &json!(1), || async { Ok::<_, ()>(2) }).await.unwrap(), Outcome::Replayed(1));
    assert_eq!(requests.total(), 0, "answered from memory");
}

#[tokio::test]
async fn the_replay_hook_tells_replays_apart() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let idem = Idempotency::new(
        InMemoryStore::new(),
        Config::default().on_replay(move |record| log.lock().unwrap().push(record.id.clone())),
    );
    let key = Key::new("hooked", "e1").unwrap();
    idem.run(&key, &json!(1), || async { Ok::<_, ()>(1) }).await.unwrap();
    assert!(seen.lock().unwrap().is_empty(), "not on a fresh run");
    idem.run(&key, &json!(1), || async { Ok::<_, ()>(1) }).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["hooked#e1"]);
}

#[tokio::test]
async fn the_disable_switch_runs_every_delivery() {
    // The environment as the function would see it, read through `from_env_with`: setting a
    // process variable here would race the other tests of this binary, which read it.
    let config = Config::from_env_with(|name| (name == DISABLED_VARS[0]).then(|| "true".to_owned()));
    assert!(config.is_disabled());
    let idem = Idempotency::new(InMemoryStore::new(), config);
    let key = Key::new("off", "e1").unwrap();
    let runs = AtomicUsize::new(0);
    for expected in [Outcome::Fresh(1), Outcome::Fresh(2)] {
        let run = || async { Ok::<_, ()>(runs.fetch_add(1, Ordering::SeqCst) + 1) };
        assert_eq!(idem.run(&key, &json!(1), run).await.unwrap(), expected);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the handler ran for both deliveries");
    assert_eq!(idem.store().requests(), 0, "nothing stored while disabled");
}

/// A downstream API that deduplicates on `Idempotency-Key`: the first result per key is kept.
async fn deduplicating_server() -> (String, Arc<Mutex<HashMap<String, String>>>, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let results: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let created = Arc::new(AtomicUsize::new(0));
    let (r, c) = (results.clone(), created.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (r, c) = (r.clone(), c.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let key = request
                    .lines()
                    .find_map(|l| l.strip_prefix("Idempotency-Key: ").map(str::to_owned))
                    .unwrap_or_default();
                let body = r
                    .lock()
                    .unwrap()
                    .entry(key)
                    .or_insert_with(|| format!("invoice-{}", c.fetch_add(1, Ordering::SeqCst) + 1))
                    .clone();
                let response =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                socket.write_all(response.as_bytes()).await.ok();
            });
        }
    });
    (addr, results, created)
}

async fn post_invoice(addr: &str, event_id: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (name, value) = outbound::header("invoice", event_id).unwrap();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("POST /invoices HTTP/1.1\r\nHost: {addr}\r\n{name}: {value}\r\nContent-Length: 0\r\n\r\n");
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).await.unwrap();
    response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default()
}

#[tokio::test]
async fn a_keyed_outbound_call_reuses_one_server_side_result_across_retries() {
    let (addr, results, created) = deduplicating_server().await;
    let first = post_invoice(&addr, "pay_0001").await;
    let retry = post_invoice(&addr, "pay_0001").await;
    let other = post_invoice(&addr, "pay_0002").await;
    assert_eq!(first, retry, "the retry got the first call's invoice");
    assert_ne!(first, other);
    assert_eq!(created.load(Ordering::SeqCst), 2, "two invoices for two events, three calls");
    assert!(results.lock().unwrap().contains_key("invoice-pay_0001"));
}
