//! In-process overhead of `Idempotency::run` with `InMemoryStore`, against a bare handler call.
//!
//! Three measurements, each one handler call per iteration:
//!
//! - `bare_handler`: the handler alone (what a consumer without idempotency pays);
//! - `run_first_delivery`: a fresh key every iteration (key, payload hash, claim, handler,
//!   response serialisation, completion);
//! - `run_replay`: the same key and payload every iteration (key, payload hash, the claim that
//!   finds the completed record, the stored response deserialised; the handler does not run).
//!
//! The store is in memory, so this is the library's own cost per message, with no network: what
//! it adds on top of the DynamoDB requests that `bench/harness/` counts. After criterion's own
//! report the overhead per call is printed, and written to `target/bench/overhead.json` for the
//! bench report. `cargo bench -p effectively-once --bench overhead` runs it; measurement time and
//! sample count are kept short so `make bench` stays quick.

use std::convert::Infallible;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::Criterion;
use effectively_once::{Config, Idempotency, InMemoryStore, Key, Outcome};
use serde::{Deserialize, Serialize};

const GROUP: &str = "overhead";
const BARE: &str = "bare_handler";
const FIRST: &str = "run_first_delivery";
const REPLAY: &str = "run_replay";

/// A payment event as the payments consumer sees it (the contract's fields).
#[derive(Debug, Clone, Serialize)]
struct Payment {
    event_id: String,
    account_id: String,
    amount_cents: i64,
    currency: String,
    receipt_email: Option<String>,
}

/// A small response, like the ledger's `Posting`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Posting {
    Applied { balance_cents: i64 },
}

fn payment(i: u64) -> Payment {
    Payment {
        event_id: format!("pay-{i}"),
        account_id: format!("acct-{}", i % 50),
        amount_cents: 1250,
        currency: "USD".to_owned(),
        receipt_email: None,
    }
}

/// The handler under test: trivial on purpose, so the measured difference is the library's.
async fn handler(amount_cents: i64) -> Result<Posting, Infallible> {
    Ok(Posting::Applied { balance_cents: black_box(amount_cents) })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a tokio runtime")
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group(GROUP);

    group.bench_function(BARE, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(handler(black_box(1250)).await.expect("infallible"));
                }
                start.elapsed()
            })
        })
    });

    group.bench_function(FIRST, |b| {
        b.iter_custom(|iters| {
            // A fresh store per sample keeps the map as small as one sample's keys; building the
            // payloads is the caller's work, outside the timed loop.
            let idempotency = Idempotency::new(InMemoryStore::new(), Config::default());
            let payments: Vec<Payment> = (0..iters).map(payment).collect();
            rt.block_on(async {
                let start = Instant::now();
                for p in &payments {
                    let key = Key::new("payments", &p.event_id).expect("a valid key");
                    let out = idempotency.run(&key, p, || handler(p.amount_cents)).await.expect("runs");
                    assert!(matches!(out, Outcome::Fresh(_)));
                    black_box(out);
                }
                start.elapsed()
            })
        })
    });

    group.bench_function(REPLAY, |b| {
        let idempotency = Idempotency::new(InMemoryStore::new(), Config::default());
        let p = payment(1);
        let key = Key::new("payments", &p.event_id).expect("a valid key");
        rt.block_on(idempotency.run(&key, &p, || handler(p.amount_cents))).expect("first delivery");
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let key = Key::new("payments", &p.event_id).expect("a valid key");
                    let out = idempotency.run(&key, &p, || handler(p.amount_cents)).await.expect("replays");
                    assert!(out.is_replay());
                    black_box(out);
                }
                start.elapsed()
            })
        })
    });

    group.finish();
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// Criterion's estimate of one call in nanoseconds: the slope of its linear sampling when it
/// has one, the mean otherwise.
fn estimate_ns(criterion_dir: &std::path::Path, function: &str) -> Option<f64> {
    let path = criterion_dir.join(GROUP).join(function).join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    ["slope", "mean"].iter().find_map(|k| json[k]["point_estimate"].as_f64())
}

fn summarise(criterion_dir: &std::path::Path, bench_dir: &std::path::Path) {
    let (Some(bare), Some(first), Some(replay)) =
        (estimate_ns(criterion_dir, BARE), estimate_ns(criterion_dir, FIRST), estimate_ns(criterion_dir, REPLAY))
    else {
        // `cargo test --benches` runs each once without estimates: nothing to summarise.
        return;
    };
    let us = |ns: f64| ns / 1000.0;
    println!();
    println!("| in-process, InMemoryStore | per call | overhead over the bare handler |");
    println!("|---|---|---|");
    println!("| bare handler | {:.3} µs | - |", us(bare));
    println!("| Idempotency::run, first delivery | {:.3} µs | {:.3} µs |", us(first), us(first - bare));
    println!("| Idempotency::run, replay | {:.3} µs | {:.3} µs |", us(replay), us(replay - bare));
    let summary = serde_json::json!({
        "bare_handler_ns": bare,
        "first_delivery_ns": first,
        "replay_ns": replay,
        "first_delivery_overhead_ns": first - bare,
        "replay_overhead_ns": replay - bare,
    });
    if std::fs::create_dir_all(bench_dir).is_ok() {
        let _ = std::fs::write(bench_dir.join("overhead.json"), format!("{summary:#}\n"));
    }
}

fn main() {
    let target = target_dir();
    let criterion_dir = target.join("criterion");
    let mut criterion = Criterion::default()
        .output_directory(&criterion_dir)
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();
    summarise(&criterion_dir, &target.join("bench"));
}
