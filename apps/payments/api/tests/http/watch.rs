//! The payments API through `cargo lambda watch`'s function URL route: the real binary, the real
//! Lambda runtime and the emulator's Function URL events, over HTTP.
//!
//! `cargo test -p payments-api --test http watch:: -- --ignored` starts `cargo lambda watch` itself
//! (`infra/cargo-lambda.sh`, which installs the pinned cargo-lambda from PyPI on first use) on a
//! free port, against resources of its own on the local AWS, and stops it after. With
//! `PAYMENTS_API_URL` set (`http://127.0.0.1:9000/lambda-url/payments-api` under `make watch`)
//! it uses that one instead, and checks the HTTP answers only. Ignored by default, for the
//! PyPI install and the build under `watch`; the same contract runs over real HTTP in process
//! in `served.rs` beside it, which `make test` runs.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use effectively_once_dynamodb::testing::{endpoint, unique_name};
use local::api::post;
use local::esm::queue_depth;
use payments_local::{Clients, Pipeline};

/// The first request under `watch` builds the function: give it time.
const TIMEOUT: Duration = Duration::from_secs(600);

/// `cargo lambda watch` on a port of its own; stopped with SIGINT (its own clean shutdown,
/// which ends the function's process too) when dropped.
struct Watch {
    child: Child,
    port: u16,
}

impl Watch {
    fn start(env_file: &PathBuf) -> Watch {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..");
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(std::env::temp_dir().join(format!("payments-api-watch-{port}.log"))).unwrap();
        let child = Command::new(root.join("infra/cargo-lambda.sh"))
            .current_dir(&root)
            .args(["watch", "--ignore-changes", "--invoke-address", "127.0.0.1", "--invoke-port", &port.to_string()])
            .arg("--env-file")
            .arg(env_file)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("infra/cargo-lambda.sh");
        let watch = Watch { child, port };
        // Up once its port answers (the first run installs cargo-lambda).
        for _ in 0..3000 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return watch;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("cargo lambda watch did not listen on {port}");
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

#[tokio::test]
#[ignore = "starts cargo lambda watch (PyPI install on first use, a build): run with --ignored"]
async fn first_request_replay_and_key_reuse_through_cargo_lambda_watch() {
    let (url, own) = match std::env::var("PAYMENTS_API_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let pipeline = Pipeline::up(Clients::local().await, &unique_name("watch")).await.unwrap();
            let env_file = std::env::temp_dir().join(format!("{}.env", unique_name("payments-api-watch")));
            std::fs::write(&env_file, payments_local::resources::lambda_env(&pipeline.resources, &endpoint())).unwrap();
            let watch = tokio::task::spawn_blocking(move || Watch::start(&env_file)).await.unwrap();
            (format!("http://127.0.0.1:{}/lambda-url/payments-api", watch.port), Some((pipeline, watch)))
        }
    };
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

    if let Some((pipeline, watch)) = own {
        let depth = queue_depth(&pipeline.clients, &pipeline.resources.queue_url).await.unwrap();
        assert_eq!(depth, 1, "the binary enqueued the first request alone");
        drop(watch);
        pipeline.down().await.unwrap();
    }
}
