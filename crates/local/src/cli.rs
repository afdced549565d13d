//! The `local` command line: what each subcommand does, so `main.rs` only hands it the args.
//!
//! ```text
//! local up                          tables, queues (with DLQ and redrive policy), stream, SES sender
//! local down                        delete them
//! local env                         the functions' environment, for cargo lambda watch
//! local send --file events/sqs-batch-duplicates.json
//! local send --events N [--duplicates P] [--poison K]
//! local run [--pollers N] [--invoke-url http://127.0.0.1:9000]
//! local redrive                     the DLQ back to the payments queue
//! local demo [--events N] [--duplicates P] [--poison K] [--pollers N]
//! local chaos [--events N] [--duplicates P] [--poison K] [--pollers N] [--crash PER_MILLE] [--seed S]
//! ```

use crate::esm::{self, SqsMapping, StreamMapping};
use crate::invoke::Http;
use crate::workload::{self, Workload};
use crate::{demo, resources, Clients};
use effectively_once_dynamodb::testing::endpoint;

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

fn number(args: &[String], name: &str, default: usize) -> Result<usize, String> {
    flag(args, name).map(|v| v.parse().map_err(|_| format!("{name}: not a number: {v}"))).unwrap_or(Ok(default))
}

/// Runs one command line (without the program name).
pub async fn run(args: &[String]) -> Result<(), String> {
    let clients = Clients::local().await;
    let command = args.first().map(String::as_str).unwrap_or("");
    if command == "env" {
        let r = resources::up(&clients, "").await?;
        print!("{}", resources::lambda_env(&r, &endpoint()));
        return Ok(());
    }
    if command == "chaos" {
        let d = crate::chaos::Options::default();
        let options = crate::chaos::Options {
            events: number(args, "--events", d.events)?,
            duplicate_pct: number(args, "--duplicates", d.duplicate_pct as usize)? as u32,
            poison: number(args, "--poison", d.poison)?,
            pollers: number(args, "--pollers", d.pollers)?,
            crash_per_mille: number(args, "--crash", d.crash_per_mille as usize)? as u64,
            seed: number(args, "--seed", d.seed as usize)? as u64,
        };
        let report = crate::chaos::run(&clients, &options).await?;
        println!("\n{}", report.table());
        println!("scenario time {:.1} s", report.elapsed.as_secs_f64());
        if !report.ok() {
            return Err("an invariant failed under faults".into());
        }
        println!("every invariant holds under faults");
        return Ok(());
    }
    // Tests use resources of their own: `--prefix P`.
    let prefix = flag(args, "--prefix").unwrap_or_default();
    let r = resources::up(&clients, &prefix).await?;
    match command {
        "up" => {
            std::fs::create_dir_all(".local-aws").map_err(|e| e.to_string())?;
            std::fs::write(".local-aws/lambda.env", resources::lambda_env(&r, &endpoint()))
                .map_err(|e| e.to_string())?;
            println!("local AWS at {}: resources from infra/template.json", endpoint());
            println!(
                "  tables  {}, {}, {} (stream on {})",
                r.idempotency_table, r.ledger_table, r.outbox_table, r.outbox_table
            );
            println!(
                "  queues  {} (DLQ {} after {} receives), {}",
                r.queue_url, r.dlq_url, r.max_receive_count, r.failures_url
            );
            println!("  sender  {} verified; function env in .local-aws/lambda.env", resources::RECEIPT_FROM);
        }
        "down" => {
            resources::down(&clients, &r).await?;
            println!("deleted the local tables and queues");
        }
        "send" => {
            let bodies = match flag(args, "--file") {
                Some(path) => workload::bodies_of_event_file(
                    &std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?,
                )?,
                None => {
                    let mut w = Workload::new(number(args, "--events", 100)?);
                    w.duplicate_pct = number(args, "--duplicates", 30)? as u32;
                    w.poison = number(args, "--poison", 0)?;
                    workload::plan(&w).deliveries
                }
            };
            let n = workload::send(&clients.sqs, &r.queue_url, &bodies).await?;
            println!("sent {n} messages to {}", r.queue_url);
        }
        "run" => {
            let pollers = number(args, "--pollers", 1)?;
            let sqs = SqsMapping::new(&r.queue_url);
            let mut stream = StreamMapping::new(&r.outbox_table, Some(r.failures_url.clone()));
            let report = |p: esm::Progress| {
                eprint!("\rdeliveries {} failed {} stream records {}", p.deliveries, p.failed, p.stream_records)
            };
            let p = match flag(args, "--invoke-url") {
                Some(url) => {
                    let payments = Http { url: url.clone(), function: payments_consumer::FUNCTION.into() };
                    let relay = Http { url, function: receipts_relay::FUNCTION.into() };
                    esm::run_until_drained(&clients, &sqs, &mut stream, &payments, &relay, pollers, report).await?
                }
                None => {
                    let payments = AbortAfterCommit {
                        inner: demo::payments(&clients, &r),
                        armed: std::env::var_os("LOCAL_CRASH_AFTER_COMMIT").is_some(),
                    };
                    let relay = demo::relay(&clients, &r);
                    esm::run_until_drained(&clients, &sqs, &mut stream, &payments, &relay, pollers, report).await?
                }
            };
            eprintln!();
            println!("drained: {} deliveries, {} failed, {} stream records", p.deliveries, p.failed, p.stream_records);
        }
        "redrive" => {
            let n = esm::redrive(&clients, &r.dlq_url, &r.queue_url).await?;
            println!("moved {n} messages from the DLQ back to the payments queue");
        }
        "demo" => {
            let mut w = Workload::new(number(args, "--events", 300)?);
            w.duplicate_pct = number(args, "--duplicates", 30)? as u32;
            w.poison = number(args, "--poison", 6)?;
            let summary = demo::run(&clients, &r, &w, number(args, "--pollers", 2)?).await?;
            println!("\n{}", summary.table());
            println!("pipeline time {:.1} s", summary.elapsed.as_secs_f64());
            if !summary.ok() {
                return Err("an invariant failed".into());
            }
            println!("every invariant holds");
        }
        other => return Err(format!("unknown command {other:?}; see `local` in crates/local/src/main.rs")),
    }
    Ok(())
}

/// A crash point for tests that kill a real process: with `LOCAL_CRASH_AFTER_COMMIT` set, the
/// process aborts after its first invocation committed and before the emulator acknowledges
/// (deletes) anything, as a Lambda whose sandbox dies right after the ledger commit.
struct AbortAfterCommit<F> {
    inner: F,
    armed: bool,
}

impl<F: crate::invoke::SqsFunction> crate::invoke::SqsFunction for AbortAfterCommit<F> {
    async fn invoke(
        &self,
        event: aws_lambda_events::event::sqs::SqsEvent,
    ) -> Result<aws_lambda_events::event::sqs::SqsBatchResponse, String> {
        let response = self.inner.invoke(event).await?;
        if self.armed {
            eprintln!("local: crash point reached: committed, not acknowledged; aborting");
            std::process::abort();
        }
        Ok(response)
    }
}
