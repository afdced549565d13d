//! The local Redis script (`infra/local/redis.sh`): its instances are keyed by port, so two
//! checkouts, or a user's crate and this workspace, never stop each other's server.

use std::path::Path;
use std::process::{Command, Output};

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
    // The other still answers a real client, not only the script's PING.
    let client = redis::Client::open(format!("redis://127.0.0.1:{b}")).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.expect("the instance on b serves");
    let _: () = redis::cmd("SET").arg("two-ports").arg("b").query_async(&mut connection).await.unwrap();
    let value: String = redis::cmd("GET").arg("two-ports").query_async(&mut connection).await.unwrap();
    assert_eq!(value, "b");
}
