//! A command whose answer the connection loses: the store resends it once, and a resend that
//! meets what happened since the first send landed is answered as the first send's outcome.

use crate::common::claim_record;
use effectively_once::{Key, Record, Store};
use effectively_once_redis::RedisStore;

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

    let upstream = effectively_once_redis::testing::url();
    let upstream = upstream.trim_start_matches("redis://").trim_end_matches('/');
    // A password (`default:PASSWORD@`, the local Redis's) goes into the proxy's URL.
    let (auth, upstream) = match upstream.rsplit_once('@') {
        Some((auth, address)) => (format!("{auth}@"), address.to_owned()),
        None => (String::new(), upstream.to_owned()),
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{auth}{}", listener.local_addr().unwrap());
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
/// free key in between, the resend meets that record. The core tells this case apart for its own
/// retries ("an earlier release landed; the key has been claimed again since": Ok within the
/// lease), and the store's resend counts as such a retry: `Idempotency::release` reports the
/// release that succeeded as done, not `LeaseLost`.
#[tokio::test]
async fn a_release_resent_after_a_reclaim_is_not_reported_as_lost() {
    use effectively_once::{Begin, Clock, Config, Idempotency};

    let (landed_tx, landed) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let proxy = cutting_proxy(landed_tx, go_rx);
    let prefix = crate::common::unique_prefix("resend");
    let through_proxy = RedisStore::connect(&proxy.url, &prefix).await.unwrap();
    let direct = RedisStore::connect(&effectively_once_redis::testing::url(), &prefix).await.unwrap();
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
