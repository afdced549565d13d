//! The local Redis script (`infra/local/redis.sh`): its instances are keyed by port, so two
//! checkouts, or a user's crate and this workspace, never stop each other's server; and a start
//! that times out stops its server.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// `infra/local/redis.sh VERB` for the local Redis on `port`.
fn redis_sh(port: u16, verb: &str) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Command::new(root.join("infra/local/redis.sh"))
        .arg(verb)
        .env("LOCAL_REDIS_PORT", port.to_string())
        .env_remove("REDIS_URL")
        .current_dir(&root)
        .output()
        .expect("redis.sh runs")
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Stops the local Redis on each port when the test ends, passed or not.
struct Stop(Vec<u16>);

impl Drop for Stop {
    fn drop(&mut self) {
        for port in &self.0 {
            redis_sh(*port, "down");
        }
    }
}

#[tokio::test]
async fn two_local_redis_ports_serve_at_once_and_each_stops_alone() {
    let (a, b) = (free_port(), free_port());
    let _stop = Stop(vec![a, b]);
    for port in [a, b] {
        let up = redis_sh(port, "ensure");
        assert!(up.status.success(), "ensure on {port}: {}", String::from_utf8_lossy(&up.stderr));
    }
    assert!(redis_sh(a, "status").status.success() && redis_sh(b, "status").status.success(), "both serve");
    assert!(redis_sh(a, "down").status.success());
    let stopped = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        !redis_sh(a, "status").status.success()
    });
    assert!(stopped, "the instance on {a} stopped");
    // The other still answers a real client, not only the script's PING, with the password
    // the script gives; and refuses one without it.
    let url = String::from_utf8(redis_sh(b, "url").stdout).unwrap();
    assert!(url.trim().ends_with(&format!("@127.0.0.1:{b}")), "{url}");
    let anonymous = redis::Client::open(format!("redis://127.0.0.1:{b}")).unwrap();
    let mut anonymous = anonymous.get_multiplexed_async_connection().await.expect("the instance on b answers");
    let refused: redis::RedisResult<String> = redis::cmd("GET").arg("two-ports").query_async(&mut anonymous).await;
    assert!(refused.is_err_and(|e| e.to_string().contains("NOAUTH")), "a client without the password is refused");
    let client = redis::Client::open(url.trim()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.expect("the instance on b serves");
    let _: () = redis::cmd("SET").arg("two-ports").arg("b").query_async(&mut connection).await.unwrap();
    let value: String = redis::cmd("GET").arg("two-ports").query_async(&mut connection).await.unwrap();
    assert_eq!(value, "b");
}

/// A stand-in `redis-server` that takes `DELAY` seconds to bind, then answers `+PONG`; it
/// appends its pid to `$CHECKOUT/starts`, and to `$CHECKOUT/overlaps` when an earlier one runs.
const SLOW_SERVER: &str = r#"#!/usr/bin/env python3
import os, socket, sys, time
if "--version" in sys.argv:
    print("Redis server v=0.0.0 (a slow stand-in)"); sys.exit(0)
port = int(sys.argv[sys.argv.index("--port") + 1])
starts = os.path.join(os.environ["CHECKOUT"], "starts")
if os.path.exists(starts):
    for line in open(starts):
        try:
            os.kill(int(line), 0)
        except OSError:
            continue
        with open(os.path.join(os.environ["CHECKOUT"], "overlaps"), "a") as f:
            f.write(line)
with open(starts, "a") as f:
    f.write(f"{os.getpid()}\n")
time.sleep(float(os.environ["DELAY"]))
listener = socket.create_server(("127.0.0.1", port))
while True:
    connection, _ = listener.accept()
    connection.recv(64); connection.sendall(b"+PONG\r\n"); connection.close()
"#;

/// Two test binaries ask for the local Redis at once and it starts slower than `ensure` waits:
/// the first stops the server it gave up on before the second, waiting on the port lock, starts
/// its own, so one port never has two servers, nor a server no pid file names.
#[test]
fn an_ensure_that_times_out_stops_its_server_before_the_next_starts_one() {
    let port = free_port();
    let checkout = std::env::temp_dir().join(format!("local-redis-slow-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&checkout);
    let (scripts, bin) = (checkout.join("infra/local"), checkout.join("bin"));
    for dir in [&scripts, &bin, &checkout.join("tmp")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for file in ["redis.sh", "lib.sh"] {
        std::fs::copy(repo.join("infra/local").join(file), scripts.join(file)).unwrap();
    }
    std::fs::copy(repo.join("infra/tools.sh"), checkout.join("infra/tools.sh")).unwrap();
    std::fs::write(bin.join("redis-server"), SLOW_SERVER).unwrap();
    std::fs::set_permissions(bin.join("redis-server"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Found before any real one, under either name the script looks for.
    std::os::unix::fs::symlink(bin.join("redis-server"), bin.join("valkey-server")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    // Through bash rather than exec'ing the copy: a fork by another test thread while the copy
    // was still open for writing would make that exec fail with ETXTBSY ("Text file busy").
    let ensure = || {
        Command::new("bash")
            .arg(scripts.join("redis.sh"))
            .arg("ensure")
            .env("LOCAL_REDIS_PORT", port.to_string())
            .env("LOCAL_REDIS_START_TIMEOUT", "2")
            .env("PATH", &path)
            .env("CHECKOUT", &checkout)
            .env("DELAY", "5")
            .env("TMPDIR", checkout.join("tmp"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("redis.sh runs")
    };
    let first = ensure();
    std::thread::sleep(Duration::from_millis(500));
    let second = ensure();
    let (first, second) = (first.wait_with_output().unwrap(), second.wait_with_output().unwrap());
    let starts = std::fs::read_to_string(checkout.join("starts")).unwrap_or_default();
    let overlaps = std::fs::read_to_string(checkout.join("overlaps")).unwrap_or_default();
    let pid_file = checkout.join(format!(".local-aws/redis-{port}/redis.pid")).exists();
    std::thread::sleep(Duration::from_secs(4));
    let serving = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
    for pid in starts.lines() {
        let _ = Command::new("kill").arg(pid).stderr(Stdio::null()).status();
    }
    let _ = std::fs::remove_dir_all(&checkout);
    for (which, ensure) in [("first", &first), ("second", &second)] {
        let stderr = String::from_utf8_lossy(&ensure.stderr);
        assert!(stderr.contains("did not answer within 2 s; stopped it"), "the {which} ensure: {stderr}");
    }
    assert_eq!(overlaps, "", "a server started while an earlier one still ran");
    assert_eq!(starts.lines().count(), 2, "each ensure started one server in turn");
    assert!(!pid_file, "the pid file of a stopped server is left");
    assert!(!serving, "a server serves on {port} that no pid file names");
}
