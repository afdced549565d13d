//! The `payments-local` command line: the payments pipeline's commands as one enum, parsed once
//! by clap (`--help` on each, unknown flags refused) and then applied. A function of your own,
//! on your own template, runs under the `local` tool's command line instead.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use clap::{Args, Parser, Subcommand};
use effectively_once_dynamodb::testing::endpoint;
use receipts_relay::Sweep;

use local::error::{Result, ResultExt};
use local::invoke::{Http, SqsFunction, StreamFunction};
use local::progress::Tracker;
use local::{esm, loopback};

use crate::pipeline::Pipeline;
use crate::resources::{self, Clients, RECEIPT_FROM};
use crate::workload::{self, Workload};
use crate::{chaos, demo};

/// The payments pipeline on the local AWS: the resources of apps/payments/template.json, its
/// event source mappings emulated (SQS, DynamoDB Streams, Kafka) into the payments functions in
/// process, workloads, the DLQ redrive, the demo and the chaos scenario.
#[derive(Debug, Parser)]
#[command(name = "payments-local", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Whether an endpoint off this machine may be used.
    #[command(flatten)]
    pub remote: local::cli::Remote,
}

impl Cli {
    /// Carries the command out, unless the endpoint is off this machine and neither
    /// `--allow-remote` nor `LOCAL_ALLOW_REMOTE=1` allows it.
    pub async fn apply(self) -> Result<()> {
        self.command.apply_allowing(self.remote.allowed()).await
    }
}

/// One command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the tables (one with a stream), queues (with DLQ and redrive policy) and SES sender; write
    /// the functions' environment to .local-aws/lambda.env
    Up(Target),
    /// Delete the tables, queues and stream that exist, creating none
    Down(Target),
    /// Print the functions' environment, for cargo lambda watch (after `up`: creates nothing)
    Env(Target),
    /// Send a sample event file, or a generated workload, to the payments queue
    Send(SendArgs),
    /// Run the event source mapping emulator until the queue and the stream are drained
    Run(RunArgs),
    /// Move the DLQ back to the payments queue
    Redrive(Target),
    /// Replay a stream mapping's on-failure destination: fetch each discarded batch's records
    /// from the stream by sequence number, invoke the function, delete the record once they pass
    ReplayStream(ReplayArgs),
    /// Replay a stream driver's park destination (the function's PARK_QUEUE_URL): rebuild each
    /// parked record's one-record event, invoke the function, delete the message unless the
    /// answer names the record
    ReplayParked(ParkedArgs),
    /// Sweep the outbox once: send the receipts whose rows are still PENDING past --after
    /// through the receipts relay's keyed path (the email marker decides: once per receipt)
    SweepOutbox(SweepArgs),
    /// Produce a Kafka sample event's records to the local broker (`make local-kafka-up`), run
    /// the Kafka event source emulator's pollers until their group has committed every record
    Kafka(KafkaArgs),
    /// A hostile workload through the pipeline, a DLQ redrive, and the invariants checked
    Demo(DemoArgs),
    /// The demo's workload with faults injected at every layer, on resources of its own
    Chaos(chaos::Options),
}

/// Which resources.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Resources named PREFIX-... (tests use their own)
    #[arg(long, default_value = "")]
    pub prefix: String,
}

/// `payments-local send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    #[command(flatten)]
    target: Target,
    /// An SQS sample event (events/*.json) whose bodies to send
    #[arg(long, conflicts_with_all = ["events", "duplicates", "poison"])]
    file: Option<PathBuf>,
    /// Unique events of a generated workload
    #[arg(long, default_value_t = 100)]
    events: usize,
    /// Duplicate share of deliveries, percent
    #[arg(long, value_name = "PERCENT", default_value_t = 30)]
    duplicates: u32,
    /// Poison messages
    #[arg(long, default_value_t = 0)]
    poison: usize,
}

/// `payments-local run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    target: Target,
    /// Concurrent SQS pollers
    #[arg(long, default_value_t = 1)]
    pollers: usize,
    /// Invoke the functions behind `cargo lambda watch` at this address
    /// (http://127.0.0.1:9000) instead of in process
    #[arg(long, value_name = "URL")]
    invoke_url: Option<String>,
}

/// `payments-local kafka`.
#[derive(Debug, Args)]
pub struct KafkaArgs {
    #[command(flatten)]
    target: Target,
    /// The topic (created with 3 partitions when missing)
    #[arg(long, default_value = "payments")]
    topic: String,
    /// A Kafka sample event (events/kafka-*.json) whose records to produce first
    #[arg(long)]
    file: Option<PathBuf>,
    /// Pollers in the consumer group
    #[arg(long, default_value_t = 2)]
    pollers: usize,
    /// Then replay the on-failure destination through the function
    #[arg(long)]
    replay: bool,
    /// Invoke the kafka-consumer behind `cargo lambda watch` at this address
    /// (http://127.0.0.1:9000) instead of in process
    #[arg(long, value_name = "URL")]
    invoke_url: Option<String>,
    /// How the mapping reads the records an answer names: retry exactly those (per-record), or
    /// resume each named partition at the lowest (resume)
    #[arg(long, value_enum, default_value_t = esm::kafka::Reading::PerRecord)]
    reading: esm::kafka::Reading,
}

/// `payments-local replay-stream`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    target: Target,
    /// Invoke the function behind `cargo lambda watch` at this address instead of in process
    #[arg(long, value_name = "URL")]
    invoke_url: Option<String>,
}

/// `payments-local replay-parked`.
#[derive(Debug, Args)]
pub struct ParkedArgs {
    #[command(flatten)]
    target: Target,
    /// The park destination: the SQS queue the function's PARK_QUEUE_URL names
    #[arg(long, value_name = "URL")]
    queue: String,
    /// The function the records go back to: in process, kafka-consumer or receipts-relay; with
    /// --invoke-url, its name under `cargo lambda watch`
    #[arg(long)]
    function: String,
    /// Invoke the function behind `cargo lambda watch` at this address instead of in process
    #[arg(long, value_name = "URL", requires = "trigger")]
    invoke_url: Option<String>,
    /// With --invoke-url: the function's trigger (aws:kafka, aws:kinesis or aws:dynamodb); a
    /// parked record of another trigger is kept, never handed to it
    #[arg(long, value_name = "TRIGGER")]
    trigger: Option<String>,
}

/// `payments-local sweep-outbox`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    target: Target,
    /// Rows PENDING longer than this are swept (0: every pending row)
    #[arg(long, value_name = "SECONDS", default_value_t = Sweep::default().after.as_secs())]
    after: u64,
    /// Rows per query of the outbox's pending index
    #[arg(long, value_name = "ROWS", default_value_t = Sweep::default().page_size)]
    page_size: i32,
    /// Rows per sweep; the rest wait for the next
    #[arg(long, value_name = "ROWS", default_value_t = Sweep::default().max_rows)]
    max_rows: usize,
}

/// `payments-local demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    target: Target,
    /// Unique valid events
    #[arg(long, default_value_t = 300)]
    events: usize,
    /// Duplicate share of deliveries, percent
    #[arg(long, value_name = "PERCENT", default_value_t = 30)]
    duplicates: u32,
    /// Poison messages
    #[arg(long, default_value_t = 6)]
    poison: usize,
    /// Concurrent consumers
    #[arg(long, default_value_t = 2)]
    pollers: usize,
    /// Producers send through the payments API over HTTP (Idempotency-Key, client timeouts and
    /// retries, lost SendMessage answers); valid payments only
    #[arg(long)]
    via_api: bool,
}

/// A workload of `events` with `duplicates` percent duplicates and `poison` poison messages.
fn workload(events: usize, duplicates: u32, poison: usize) -> Workload {
    let mut w = Workload::new(events);
    w.duplicate_pct = duplicates;
    w.poison = poison;
    w
}

impl Command {
    /// Carries the command out against the local AWS (or `AWS_ENDPOINT_URL`), refusing an
    /// endpoint off this machine unless `LOCAL_ALLOW_REMOTE=1` ([`loopback`]).
    pub async fn apply(self) -> Result<()> {
        self.apply_allowing(loopback::allowed_by_env()).await
    }

    async fn apply_allowing(self, allow_remote: bool) -> Result<()> {
        // Before the first request: `down` deletes, `up` creates, wherever the SDK points.
        let vars = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        loopback::check(&loopback::configured(&endpoint(), vars), allow_remote)?;
        let clients = Clients::local().await;
        match self {
            Command::Chaos(options) => chaos(&clients, &options).await,
            Command::Up(t) => up(&Pipeline::up(clients, &t.prefix).await?),
            Command::Down(t) => {
                resources::down_prefix(&clients, &t.prefix).await?;
                println!("deleted the local tables and queues");
                Ok(())
            }
            Command::Env(t) => {
                print!("{}", resources::lambda_env(&Pipeline::find(clients, &t.prefix).await?.resources, &endpoint()));
                Ok(())
            }
            Command::Send(args) => send(&Pipeline::up(clients, &args.target.prefix).await?, &args).await,
            Command::Run(args) => run(&Pipeline::up(clients, &args.target.prefix).await?, &args).await,
            Command::Redrive(t) => {
                let pipeline = Pipeline::up(clients, &t.prefix).await?;
                let r = &pipeline.resources;
                let n = esm::redrive(&pipeline.clients, &r.dlq_url, &r.queue_url).await?;
                println!("moved {n} messages from the DLQ back to the payments queue");
                Ok(())
            }
            Command::ReplayStream(args) => replay(&Pipeline::up(clients, &args.target.prefix).await?, &args).await,
            Command::ReplayParked(args) => replay_parked(clients, &args).await,
            Command::SweepOutbox(args) => sweep(&Pipeline::up(clients, &args.target.prefix).await?, &args).await,
            Command::Demo(args) => demo(&Pipeline::up(clients, &args.target.prefix).await?, &args).await,
            Command::Kafka(args) => kafka(&Pipeline::up(clients, &args.target.prefix).await?, &args).await,
        }
    }
}

fn up(pipeline: &Pipeline) -> Result<()> {
    let r = &pipeline.resources;
    std::fs::create_dir_all(".local-aws").context(".local-aws")?;
    std::fs::write(".local-aws/lambda.env", resources::lambda_env(r, &endpoint())).context(".local-aws/lambda.env")?;
    println!("local AWS at {}: resources from apps/payments/template.json", endpoint());
    println!(
        "  tables  {}, {}, {} (stream on {})",
        r.idempotency_table, r.ledger_table, r.outbox_table, r.outbox_table
    );
    println!(
        "  queues  {} (DLQ {} after {} receives), {}",
        r.queue_url, r.dlq_url, r.max_receive_count, r.failures_url
    );
    println!("  sender  {RECEIPT_FROM} verified; function env in .local-aws/lambda.env");
    Ok(())
}

async fn send(pipeline: &Pipeline, args: &SendArgs) -> Result<()> {
    let bodies = match &args.file {
        Some(path) => {
            let json = std::fs::read_to_string(path).context(path.display().to_string())?;
            workload::bodies_of_event_file(&json)?
        }
        None => workload::plan(&workload(args.events, args.duplicates, args.poison)).deliveries,
    };
    let queue_url = &pipeline.resources.queue_url;
    let n = workload::send(&pipeline.clients.sqs, queue_url, &bodies).await?;
    println!("sent {n} messages to {queue_url}");
    Ok(())
}

async fn run(pipeline: &Pipeline, args: &RunArgs) -> Result<()> {
    match &args.invoke_url {
        Some(url) => {
            let payments = Http { url: url.clone(), function: payments_consumer::FUNCTION.into() };
            let relay = Http { url: url.clone(), function: receipts_relay::FUNCTION.into() };
            drain(pipeline, payments, relay, args.pollers).await
        }
        None => {
            let armed = std::env::var_os("LOCAL_CRASH_AFTER_COMMIT").is_some();
            let payments = AbortAfterCommit { inner: pipeline.payments(), armed };
            drain(pipeline, payments, pipeline.relay(), args.pollers).await
        }
    }
}

/// Runs the emulator on `pipeline` until drained.
async fn drain<P: SqsFunction, R: StreamFunction>(
    pipeline: &Pipeline,
    payments: P,
    relay: R,
    pollers: usize,
) -> Result<()> {
    let mut esm = pipeline.emulator(payments, relay).pollers(pollers);
    let tracker = Tracker::open();
    let p = esm.run_until_drained(&pipeline.clients, |p| tracker.show(p)).await?;
    tracker.finish();
    println!("drained: {} deliveries, {} failed, {} stream records", p.deliveries, p.failed, p.stream_records);
    Ok(())
}

/// `payments-local kafka`: produce the sample's records, drain with the pollers, replay if asked.
async fn kafka(pipeline: &Pipeline, args: &KafkaArgs) -> Result<()> {
    use esm::kafka::{KafkaMapping, KafkaPoller};
    let bootstrap = esm::kafka::bootstrap()?;
    esm::kafka::create_topic(&bootstrap, &args.topic, 3).await?;
    if let Some(path) = &args.file {
        let json = std::fs::read_to_string(path).context(path.display().to_string())?;
        let produced = esm::kafka::produce_event_file(&bootstrap, &args.topic, &json).await?;
        println!("produced {produced} records of {} to {}", path.display(), args.topic);
    }
    let group = resources::local_name(&args.target.prefix, "KafkaConsumer");
    let failures = Some(pipeline.resources.kafka_failures_url.clone());
    let settings = resources::mapping(resources::KAFKA_CLUSTER);
    let mut mapping = KafkaMapping::new(&bootstrap, &args.topic, &group, None).with_settings(&settings, failures);
    mapping.reading = args.reading;
    let mut pollers = (0..args.pollers.max(1))
        .map(|i| KafkaPoller::join(&mapping, &format!("{group}-poller-{i}")))
        .collect::<Result<Vec<_>>>()?;
    match &args.invoke_url {
        Some(url) => {
            let function = Http { url: url.clone(), function: kafka_consumer::FUNCTION.into() };
            drain_kafka(pipeline, &mapping, &mut pollers, &function, args.replay).await
        }
        None => drain_kafka(pipeline, &mapping, &mut pollers, &pipeline.kafka(), args.replay).await,
    }
}

async fn drain_kafka<F: esm::kafka::KafkaFunction>(
    pipeline: &Pipeline,
    mapping: &esm::kafka::KafkaMapping,
    pollers: &mut [esm::kafka::KafkaPoller],
    function: &F,
    replay: bool,
) -> Result<()> {
    let clients = &pipeline.clients;
    let p = esm::kafka::drain(clients, pollers, function, std::time::Duration::from_secs(300)).await?;
    println!(
        "drained {} as group {} ({} reading): {} records delivered, {} failed batches, {} records discarded to {}, {} commits refused",
        mapping.topic, mapping.group, mapping.reading, p.delivered, p.failed_batches, p.given_up,
        pipeline.resources.kafka_failures_url, p.commits_refused
    );
    if replay {
        let r = esm::kafka::replay_kafka_failures(clients, mapping, function).await?;
        println!("replayed {} discarded batches ({} records); {} kept", r.batches, r.records, r.kept);
        return r.all_through();
    }
    Ok(())
}

async fn replay(pipeline: &Pipeline, args: &ReplayArgs) -> Result<()> {
    let clients = &pipeline.clients;
    let mapping = pipeline.outbox_mapping();
    let replayed = match &args.invoke_url {
        Some(url) => {
            let function = Http { url: url.clone(), function: receipts_relay::FUNCTION.into() };
            esm::replay_stream_failures(clients, &mapping, &function).await?
        }
        None => esm::replay_stream_failures(clients, &mapping, &pipeline.relay()).await?,
    };
    println!(
        "replayed {} records of {} discarded batches; {} left in the destination",
        replayed.records, replayed.batches, replayed.kept
    );
    // Each one kept, and why, in the error: the command fails while anything is left.
    replayed.all_through()
}

/// `payments-local replay-parked`: through the function under `cargo lambda watch`, or in process on the
/// local pipeline's resources.
async fn replay_parked(clients: Clients, args: &ParkedArgs) -> Result<()> {
    let replayed = match &args.invoke_url {
        Some(url) => {
            let function = Http { url: url.clone(), function: args.function.clone() };
            let trigger = args.trigger.as_deref().unwrap_or_default();
            let targets = esm::Targets::only(trigger, function)
                .ok_or_else(|| format!("--trigger {trigger}: aws:kafka, aws:kinesis or aws:dynamodb"))?;
            esm::replay_parked(&clients, &args.queue, &targets).await?
        }
        None => replay_parked_in_process(&Pipeline::up(clients, &args.target.prefix).await?, args).await?,
    };
    println!("replayed {} parked records from {}; {} kept", replayed.batches, args.queue, replayed.kept);
    replayed.all_through()
}

/// The workspace's stream functions in process, each for its own trigger's records.
async fn replay_parked_in_process(pipeline: &Pipeline, args: &ParkedArgs) -> Result<esm::Replayed> {
    use esm::Targets;
    let (clients, queue) = (&pipeline.clients, args.queue.as_str());
    let none = None::<Http>;
    match args.function.as_str() {
        kafka_consumer::FUNCTION => {
            let targets = Targets { kafka: Some(pipeline.kafka()), kinesis: none.clone(), dynamodb: none };
            esm::replay_parked(clients, queue, &targets).await
        }
        receipts_relay::FUNCTION => {
            let targets = Targets { kafka: none.clone(), kinesis: none, dynamodb: Some(pipeline.relay()) };
            esm::replay_parked(clients, queue, &targets).await
        }
        other => Err(format!(
            "{other} is no stream function here: in process, kafka-consumer or receipts-relay \
             (another, under `cargo lambda watch`, with --invoke-url)"
        )
        .into()),
    }
}

/// `payments-local sweep-outbox`: one sweep now, through the local SES.
async fn sweep(pipeline: &Pipeline, args: &SweepArgs) -> Result<()> {
    let sweep = Sweep { after: Duration::from_secs(args.after), page_size: args.page_size, max_rows: args.max_rows };
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let swept = pipeline.sweeper(sweep).run(now_ms, None).await;
    println!(
        "swept {}: {} rows PENDING for over {} s; {} sent, {} settled already, {} held, {} busy, {} not sent{}",
        pipeline.resources.outbox_table,
        swept.found,
        args.after,
        swept.sent,
        swept.settled,
        swept.held,
        swept.busy,
        swept.unsent,
        if swept.complete { "" } else { "; more left for the next sweep" }
    );
    if swept.failed_reads > 0 {
        return Err(format!("{} pages of the pending index could not be read", swept.failed_reads).into());
    }
    Ok(())
}

async fn demo(pipeline: &Pipeline, args: &DemoArgs) -> Result<()> {
    let w = workload(args.events, args.duplicates, args.poison);
    if args.via_api {
        return demo_via_api(pipeline, &w, args.pollers).await;
    }
    let summary = demo::run(pipeline, &w, args.pollers).await?;
    println!("\n{}", summary.table());
    println!("pipeline time {:.1} s", summary.elapsed.as_secs_f64());
    if !summary.ok() {
        return Err("an invariant failed".into());
    }
    println!("every invariant holds");
    Ok(())
}

async fn demo_via_api(pipeline: &Pipeline, w: &Workload, pollers: usize) -> Result<()> {
    let summary = crate::via_api::run(pipeline, w, pollers, &crate::via_api::Faults::default()).await?;
    println!("\n{}", summary.table());
    println!("time {:.1} s", summary.elapsed.as_secs_f64());
    if !summary.ok() {
        return Err("an invariant failed".into());
    }
    println!("every invariant holds: one entry and one receipt per key");
    Ok(())
}

async fn chaos(clients: &Clients, options: &chaos::Options) -> Result<()> {
    let report = chaos::run(clients, options).await?;
    println!("\n{}", report.table());
    println!("scenario time {:.1} s", report.elapsed.as_secs_f64());
    if !report.ok() {
        return Err("an invariant failed under faults".into());
    }
    println!("every invariant holds under faults");
    Ok(())
}

/// A crash point for tests that kill a real process: with `LOCAL_CRASH_AFTER_COMMIT` set, the
/// process aborts after its first invocation committed and before the emulator acknowledges
/// (deletes) anything, as a Lambda whose sandbox dies right after the ledger commit.
struct AbortAfterCommit<F> {
    inner: F,
    armed: bool,
}

impl<F: SqsFunction> SqsFunction for AbortAfterCommit<F> {
    async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse> {
        let response = self.inner.invoke(event).await?;
        if self.armed {
            eprintln!("local: crash point reached: committed, not acknowledged; aborting");
            std::process::abort();
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{esm, Cli, Command};

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_makefiles_command_lines_parse() {
        for line in [
            "payments-local chaos --events 300 --poison 4",
            "payments-local chaos --events 40 --orders 0 --kafka 75 --poison 4 --kafka-reading resume",
            "payments-local demo --events 1000 --duplicates 40 --poison 10 --pollers 4",
            "payments-local demo --via-api --events 200",
            "payments-local send --file events/sqs-payment.json",
            "payments-local send --events 500 --duplicates 30 --poison 5",
            "payments-local run --invoke-url http://127.0.0.1:9000",
            "payments-local run --prefix t1",
            "payments-local up",
            "payments-local down",
            "payments-local redrive",
            "payments-local replay-stream",
            "payments-local replay-stream --invoke-url http://127.0.0.1:9000",
            "payments-local replay-parked --queue http://127.0.0.1:4566/000000000000/park --function kafka-consumer",
            "payments-local replay-parked --queue http://127.0.0.1:4566/000000000000/park --function my-fn --invoke-url http://127.0.0.1:9000 --trigger aws:kinesis",
            "payments-local sweep-outbox",
            "payments-local sweep-outbox --after 0 --page-size 10 --max-rows 100 --prefix t1",
            "payments-local env",
            "payments-local down --allow-remote",
            "payments-local --allow-remote up --prefix t1",
        ] {
            Cli::try_parse_from(line.split(' ')).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        let Command::Chaos(options) = Cli::parse_from(["payments-local", "chaos", "--events", "300"]).command else {
            panic!()
        };
        assert_eq!((options.events, options.poison, options.seed, options.crash_per_mille), (300, 10, 42, 40));
        assert_eq!(options.kafka_reading, esm::kafka::Reading::PerRecord, "the harsher reading unless asked");
        let line = ["payments-local", "chaos", "--kafka-reading", "resume"];
        let Command::Chaos(options) = Cli::parse_from(line).command else { panic!() };
        assert_eq!(options.kafka_reading, esm::kafka::Reading::Resume);
        let Command::Kafka(args) = Cli::parse_from(["payments-local", "kafka", "--reading", "per-record"]).command
        else {
            panic!()
        };
        assert_eq!(args.reading, esm::kafka::Reading::PerRecord);
    }

    #[test]
    fn an_unknown_or_misspelt_flag_is_an_error() {
        for line in [
            "payments-local demo --event 10",
            "payments-local chaos --seeds 1",
            "payments-local up --verbose",
            "payments-local sned",
            "payments-local up --function OrdersFunction",
            "payments-local run --bin target/debug/orders-consumer",
            "payments-local up --template template.json",
            "payments-local replay-stream --source orders",
            "payments-local send --template template.json --file events/order.json",
            "payments-local replay-parked --function kafka-consumer",
        ] {
            assert!(Cli::try_parse_from(line.split(' ')).is_err(), "{line} parsed");
        }
        assert!(
            Cli::try_parse_from(["payments-local", "send", "--file", "x.json", "--events", "3"]).is_err(),
            "file or workload"
        );
    }
}
