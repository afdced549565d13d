//! `make model`: checks the protocol models, larger than `make test` does, and prints the states
//! explored. `model [--workers N] [--horizon MS] [--depth N] [--threads N]`: workers per key
//! (deliveries, requests, relay invocations; default 3), the clock's last moment (default 6,
//! leases of 1: three generations of takeovers; `make test` stops at 4), a depth bound (default
//! none: every reachable state), threads (default 2). Four workers outgrow 16 GB of states.

use protocol_model::{api::ApiModel, check, email::EmailModel, run::RunModel};

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut workers, mut horizon, mut depth, mut threads) = (3, 6, None, 2);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse::<usize>().ok());
        match (arg.as_str(), value) {
            ("--workers", Some(n)) => workers = n,
            ("--horizon", Some(n)) => horizon = n as u64,
            ("--depth", Some(n)) => depth = Some(n),
            ("--threads", Some(n)) => threads = n,
            _ => {
                eprintln!("usage: model [--workers N] [--horizon MS] [--depth N] [--threads N]");
                std::process::exit(2);
            }
        }
    }
    println!("{workers} workers per key, clock 0..={horizon} ms, leases of {} ms", protocol_model::LEASE);
    let started = std::time::Instant::now();
    let reports = [
        check("run", RunModel::new(workers).with_horizon(horizon), depth, threads),
        check("api", ApiModel::new(protocol_model::api::bodies(workers)).with_horizon(horizon), depth, threads),
        check("email", EmailModel::new(workers).with_horizon(horizon), depth, threads),
    ];
    let mut failed = false;
    for report in &reports {
        print!("{report}");
        failed |= !report.violations.is_empty() || !report.unreached.is_empty();
    }
    let states: usize = reports.iter().map(|r| r.states).sum();
    println!("{states} states in all, checked in {:.1} s", started.elapsed().as_secs_f64());
    if failed {
        std::process::exit(1);
    }
}
