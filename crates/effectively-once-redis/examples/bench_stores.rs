//! `make bench-stores`: claim -> complete latency and requests per message of the Redis and
//! DynamoDB stores, side by side in one run, on this machine (the local Redis and the local AWS).
//!
//! ```text
//! cargo run -p effectively-once-redis --example bench_stores -- [--messages 2000] [--rounds 4]
//! ```
//!
//! Each round sends every store `messages / rounds` fresh messages (claim, a handler that does
//! nothing, complete) then as many duplicates (one claim that finds the completed record),
//! alternating stores round by round so a drift of the machine weighs on both alike. Requests are
//! counted by each store's client: `RedisStore::requests` (scripts and commands sent) and the
//! DynamoDB client's interceptor; for Redis the server's `INFO commandstats` is read as well,
//! so nothing else should use the local Redis during the run.

use std::time::{Duration, Instant};

use effectively_once::{Config, Idempotency, Key, Outcome, Store};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_redis::testing::url as test_url;
use effectively_once_redis::RedisStore;
use serde_json::json;

struct Measured {
    fresh: Vec<Duration>,
    duplicate: Vec<Duration>,
    requests_fresh: u64,
    requests_duplicate: u64,
}

impl Measured {
    fn new() -> Self {
        Measured { fresh: Vec::new(), duplicate: Vec::new(), requests_fresh: 0, requests_duplicate: 0 }
    }
}

/// One round: `n` fresh messages, then their duplicates; `requests` reads the store's counter.
async fn round<S: Store>(idem: &Idempotency<S>, tag: &str, n: usize, requests: &dyn Fn() -> u64, into: &mut Measured) {
    let keys: Vec<Key> = (0..n).map(|i| Key::new("bench", &format!("{tag}-{i}")).unwrap()).collect();
    let before = requests();
    for key in &keys {
        let start = Instant::now();
        let outcome = idem.run(key, &json!({"n": 1}), || async { Ok::<_, std::io::Error>(1u32) }).await.unwrap();
        into.fresh.push(start.elapsed());
        assert_eq!(outcome, Outcome::Fresh(1));
    }
    let middle = requests();
    for key in &keys {
        let start = Instant::now();
        let outcome = idem.run(key, &json!({"n": 1}), || async { Ok::<_, std::io::Error>(2u32) }).await.unwrap();
        into.duplicate.push(start.elapsed());
        assert_eq!(outcome, Outcome::Replayed(1));
    }
    into.requests_fresh += middle - before;
    into.requests_duplicate += requests() - middle;
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

/// Scripts the server ran (`EVALSHA`, `EVAL`) and loaded (`SCRIPT`), from `INFO commandstats`:
/// the round trips of claim, complete and release as the server counts them (the commands a
/// script calls are counted under their own names, and left out here).
async fn server_calls(store: &RedisStore) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut store.connection()).await.unwrap();
    info.lines()
        .filter(|l| ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_script:"].iter().any(|c| l.starts_with(c)))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (messages, rounds) = (arg("--messages", 2000), arg("--rounds", 4).max(1));
    let per_round = (messages / rounds).max(1);
    let run = uuid::Uuid::new_v4().simple().to_string();
    let url = test_url();
    let redis = RedisStore::connect(&url, &format!("bench.{run}"))
        .await
        .unwrap_or_else(|e| panic!("Redis at {url}: {e} (make local-redis-up)"));
    let (dynamodb, counter) = fresh_store().await;
    let redis_idem = Idempotency::new(redis.clone(), Config::default());
    let dynamodb_idem = Idempotency::new(dynamodb, Config::default());

    // Warm up: connections, the scripts' first load, the table's first writes.
    let (mut warm_r, mut warm_d) = (Measured::new(), Measured::new());
    round(&redis_idem, &format!("warm-{run}"), 50, &|| redis.requests(), &mut warm_r).await;
    round(&dynamodb_idem, &format!("warm-{run}"), 50, &|| counter.total(), &mut warm_d).await;

    let (mut r, mut d) = (Measured::new(), Measured::new());
    let server_before = server_calls(&redis).await;
    for i in 0..rounds {
        round(&redis_idem, &format!("{run}-{i}"), per_round, &|| redis.requests(), &mut r).await;
        round(&dynamodb_idem, &format!("{run}-{i}"), per_round, &|| counter.total(), &mut d).await;
    }
    let server = server_calls(&redis).await - server_before;
    let n = (per_round * rounds) as f64;

    println!("| store | messages | first delivery p50 (ms) | p99 (ms) | duplicate p50 (ms) | p99 (ms) | requests per first delivery | per duplicate |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, m) in [("Redis (local redis-server)", &mut r), ("DynamoDB (local AWS, moto)", &mut d)] {
        m.fresh.sort();
        m.duplicate.sort();
        println!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} |",
            per_round * rounds,
            percentile(&m.fresh, 0.5),
            percentile(&m.fresh, 0.99),
            percentile(&m.duplicate, 0.5),
            percentile(&m.duplicate, 0.99),
            m.requests_fresh as f64 / n,
            m.requests_duplicate as f64 / n,
        );
    }
    println!();
    println!(
        "Redis scripts run per message as the server counts them (INFO commandstats; first delivery and duplicate together, other clients of the server included): {:.2}",
        server as f64 / n
    );
}
