//! The payments API through `cargo lambda watch`'s function URL route: the real binary, the
//! real runtime and the emulator's Function URL event. Needs `make watch` running; set
//! `PAYMENTS_API_URL` to its URL (`http://127.0.0.1:9000/lambda-url/payments-api`) and run
//! `cargo test -p payments-api --test watch -- --ignored`. Ignored by default, as it needs a
//! running `make watch` (cargo-lambda, installed from PyPI on first use, and port 9000). The same
//! contract runs over real HTTP in process in `tests/http.rs`, which `make test` runs.

use std::time::Duration;

use effectively_once_dynamodb::testing::unique_name;
use local::api::post;

/// The first build under `watch` compiles the function: give it time.
const TIMEOUT: Duration = Duration::from_secs(600);

#[tokio::test]
#[ignore = "needs `make watch` and PAYMENTS_API_URL"]
async fn first_request_replay_and_key_reuse_through_cargo_lambda_watch() {
    let url = std::env::var("PAYMENTS_API_URL")
        .expect("PAYMENTS_API_URL, e.g. http://127.0.0.1:9000/lambda-url/payments-api");
    let rest = url.trim_start_matches("http://");
    let (addr, base) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, String::new()));
    let path = format!("{}/payments", base.trim_end_matches('/'));
    let key = unique_name("pay_watch");
    let body = r#"{"account_id": "acct_watch", "amount_cents": 1250, "currency": "USD"}"#;

    let first = post(addr, &path, Some(&key), body, TIMEOUT).await.unwrap();
    assert_eq!((first.status, &first.body), (202, &serde_json::json!({ "event_id": key })), "{first:?}");
    let replay = post(addr, &path, Some(&key), body, TIMEOUT).await.unwrap();
    assert_eq!((replay.status, &replay.body, replay.header("idempotent-replayed")), (202, &first.body, Some("true")));
    let reuse = post(addr, &path, Some(&key), &body.replace("1250", "9999"), TIMEOUT).await.unwrap();
    assert_eq!((reuse.status, reuse.body["error"].as_str()), (422, Some("idempotency_key_reused")), "{reuse:?}");
    let missing = post(addr, &path, None, body, TIMEOUT).await.unwrap();
    assert_eq!((missing.status, missing.body["error"].as_str()), (400, Some("invalid_idempotency_key")), "{missing:?}");
}
