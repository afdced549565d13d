//! Hostile review of the Redis store (issue 17): each test here shows a way the store breaks
//! "once per key, nothing lost" or leaks what it should not, and stays ignored until fixed.

mod common;

use effectively_once::{Claim, Completion, Key, Record, Status, Store};
use effectively_once_redis::RedisStore;

const NOW: u64 = 1_800_000_000_000;

fn claim_record(key: &Key, owner: &str, hash: &str) -> Record {
    Record {
        id: key.as_str().to_owned(),
        status: Status::InProgress,
        lease_expires_at_ms: NOW + 30_000,
        expiration_s: NOW / 1000 + 3600,
        payload_hash: hash.into(),
        owner: owner.into(),
        response: None,
    }
}

/// Two stores whose prefixes are not delimited: `{p}app` + `2orders#1` is the same Redis key as
/// `{p}app2` + `orders#1`. Application `app2`'s first delivery of `orders#1` is blocked by
/// application `app`'s record for `2orders#1` (another payload: key reused; the same hash: a
/// replay of someone else's response), so app2's effect never runs. The store takes any prefix.
#[tokio::test]
async fn undelimited_prefixes_collide_and_block_another_applications_first_delivery() {
    let base = common::fresh_store("collide").await;
    // `with_key_prefix` now answers a `Result` (an invalid prefix is refused).
    let app = base.with_key_prefix(&format!("{}app", base.key_prefix())).unwrap();
    let app2 = base.with_key_prefix(&format!("{}app2", base.key_prefix())).unwrap();
    let theirs = Key::new("2orders", "1").unwrap();
    let ours = Key::new("orders", "1").unwrap();

    app.claim(&claim_record(&theirs, "app-owner", "v2:aa"), NOW).await.unwrap();
    let done = Completion { response: Some("\"app's answer\""), expiration_s: NOW / 1000 + 3600, now_ms: NOW };
    app.complete(theirs.as_str(), "app-owner", done).await.unwrap();

    let claimed = app2.claim(&claim_record(&ours, "app2-owner", "v2:bb"), NOW).await.unwrap();
    assert_eq!(claimed, Claim::Acquired { replaced: None }, "app2 never wrote orders#1");
}

/// The same with `:`-terminated prefixes, as the default `idempotency:` was: a business key may
/// hold `#` and `:`, so prefix `{p}x:` with key `a#b:orders#1` was prefix `{p}x:a#b:` with key
/// `orders#1`.
///
/// Fixed by refusing such prefixes: a prefix is `[A-Za-z0-9._-]+` and the store adds the `:`,
/// so the review's two prefixes are `Misconfigured`, and a key splits at its first `:` only.
/// (The test as written used those prefixes; it now checks they are refused, then runs the
/// same two claims under the nearest valid prefixes.)
#[tokio::test]
async fn colon_terminated_prefixes_collide_when_one_holds_a_hash() {
    use effectively_once::StoreErrorKind;

    let base = common::fresh_store("collide2").await;
    for prefix in [format!("{}x:", base.key_prefix()), format!("{}x:a#b:", base.key_prefix())] {
        let refused = base.with_key_prefix(&prefix).unwrap_err();
        assert_eq!(refused.kind(), StoreErrorKind::Misconfigured, "{prefix}");
    }
    let outer = base.with_key_prefix(&format!("{}x", base.key_prefix())).unwrap();
    let inner = base.with_key_prefix(&format!("{}x.a-b", base.key_prefix())).unwrap();
    let theirs = Key::new("a", "b:orders#1").unwrap();
    let ours = Key::new("orders", "1").unwrap();

    outer.claim(&claim_record(&theirs, "outer", "v2:aa"), NOW).await.unwrap();
    let claimed = inner.claim(&claim_record(&ours, "inner", "v2:bb"), NOW).await.unwrap();
    assert_eq!(claimed, Claim::Acquired { replaced: None }, "inner never wrote orders#1");
}

/// `Builder` derives `Debug` over the URL, password included: `tracing::info!(?builder)` or a
/// panic message that formats it puts the ElastiCache AUTH token in the logs.
#[test]
fn builder_debug_hides_the_password() {
    let builder = RedisStore::builder("rediss://payments-user:hunter2-secret@cache.example:6379");
    let shown = format!("{builder:?}");
    assert!(!shown.contains("hunter2-secret"), "{shown}");
}

/// `AnyStore::from_env` reads `IDEMPOTENCY_STORE` with `unwrap_or_default`: a value that is not
/// UTF-8 reads as unset, and the handler silently runs on DynamoDB, while the functions that read
/// `redis` keep their records in Redis, so the same message is claimed once in each store.
/// Anything but `dynamodb`/`redis`/unset is documented as `Misconfigured`.
#[cfg(all(unix, feature = "dynamodb"))]
#[tokio::test]
async fn an_unreadable_store_choice_is_misconfigured_not_dynamodb() {
    use std::os::unix::ffi::OsStrExt;

    use effectively_once::StoreErrorKind;
    use effectively_once_redis::AnyStore;

    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    std::env::set_var("IDEMPOTENCY_TABLE", "review-table");
    std::env::set_var("IDEMPOTENCY_STORE", std::ffi::OsStr::from_bytes(b"redis\xff"));
    let chosen = AnyStore::from_env(&client).await;
    assert!(matches!(&chosen, Err(error) if error.kind() == StoreErrorKind::Misconfigured), "{chosen:?}");
}

/// A TCP proxy in front of the test server. Once `arm` is set, the next reply from the server is
/// swallowed: the proxy tells the test (`landed`), waits for `go`, then closes both sockets, as
/// a connection that dies after the server ran a command and before its answer arrived.
struct CuttingProxy {
    url: String,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

fn cutting_proxy(landed: std::sync::mpsc::Sender<()>, go: std::sync::mpsc::Receiver<()>) -> CuttingProxy {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let upstream = effectively_once_redis::test_url();
    let upstream = upstream.trim_start_matches("redis://").trim_end_matches('/').to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let armed = Arc::new(AtomicBool::new(false));
    let flag = armed.clone();
    let signals = Arc::new(Mutex::new((landed, go)));
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let server = TcpStream::connect(&upstream).unwrap();
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = c_in.read(&mut buf) {
                    if s_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
            let (mut s_in, mut c_out) = (server, client);
            let (flag, signals) = (flag.clone(), signals.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = s_in.read(&mut buf) {
                    if flag.swap(false, Ordering::SeqCst) {
                        let signals = signals.lock().unwrap();
                        signals.0.send(()).unwrap();
                        signals.1.recv().unwrap();
                        let _ = c_out.shutdown(std::net::Shutdown::Both);
                        let _ = s_in.shutdown(std::net::Shutdown::Both);
                        return;
                    }
                    if c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    CuttingProxy { url, armed }
}

/// The store resends a script once when the connection dies before its answer. A release that
/// landed (record deleted) and whose answer was lost is resent; if another delivery claimed the
/// free key in between, the resend meets that record and the store answers `Fenced`. The core
/// tells exactly this case apart for its own retries ("an earlier release landed; the key has
/// been claimed again since" -> Ok within the lease), but the store's hidden resend makes it a
/// first try, so `Idempotency::release` fails with `LeaseLost` for a release that succeeded.
#[tokio::test]
async fn a_release_resent_after_a_reclaim_is_not_reported_as_lost() {
    use effectively_once::{Begin, Clock, Config, Idempotency};

    let (landed_tx, landed) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let proxy = cutting_proxy(landed_tx, go_rx);
    let prefix = common::unique_prefix("resend");
    let through_proxy = RedisStore::connect(&proxy.url, &prefix).await.unwrap();
    let direct = RedisStore::connect(&effectively_once_redis::test_url(), &prefix).await.unwrap();
    let idem = Idempotency::new(through_proxy, Config::default());
    let key = Key::new("t", "release-resend").unwrap();
    let Begin::Claimed(attempt) = idem.begin::<_, u32>(&key, &1u32).await.unwrap() else {
        panic!("a fresh key is claimed")
    };

    // Load the release script first (a release of a key that does not exist): on a server that
    // never ran it, the armed reply would be the `NOSCRIPT` to `EVALSHA`, not the release's.
    idem.store().release("t#warm-up", "nobody").await.unwrap();
    proxy.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let release = tokio::spawn(async move { idem.release(attempt).await });
    tokio::task::spawn_blocking(move || landed.recv().unwrap()).await.unwrap();
    // The release landed: the key is free, and the next delivery claims it.
    assert_eq!(direct.get(key.as_str()).await.unwrap(), None);
    let next = claim_record(&key, "next-delivery", "v2:aa");
    let now = effectively_once::SystemClock.now_ms();
    direct.claim(&Record { lease_expires_at_ms: now + 60_000, ..next }, now).await.unwrap();
    go.send(()).unwrap();

    let released = release.await.unwrap();
    assert!(released.is_ok(), "the release landed, yet: {:?}", released.unwrap_err().kind());
    assert_eq!(direct.get(key.as_str()).await.unwrap().unwrap().owner, "next-delivery");
}
