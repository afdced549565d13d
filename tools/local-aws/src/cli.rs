//! The `local` command line: the commands on a template given at run time (`--template`), as one
//! enum parsed once by clap (`--help` on each, unknown flags refused) and then applied. An
//! application with resources of its own builds its commands on the same modules.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use effectively_once_dynamodb::testing::endpoint;

use crate::error::Result;
use crate::invoke::Http;
use crate::resources::Clients;
use crate::{esm, loopback};

mod own;

/// A local AWS for Lambda functions: your template's tables, queues, streams and sender
/// identities on the local AWS, its functions' environment, and its event sources emulated as
/// Lambda runs them, into your function's binary or `cargo lambda watch`.
#[derive(Debug, Parser)]
#[command(name = "local", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Whether an endpoint off this machine may be used.
    #[command(flatten)]
    pub remote: Remote,
}

/// The one switch every local CLI shares: whether the commands may act on an endpoint that is
/// not on this machine.
#[derive(Debug, Args)]
pub struct Remote {
    /// Use AWS_ENDPOINT_URL (or a service's AWS_ENDPOINT_URL_*) even when it is not on this
    /// machine: the commands create, purge and delete tables and queues wherever it points
    /// (LOCAL_ALLOW_REMOTE=1 does the same)
    #[arg(long, global = true)]
    pub allow_remote: bool,
}

impl Remote {
    /// `--allow-remote`, or `LOCAL_ALLOW_REMOTE=1`.
    pub fn allowed(&self) -> bool {
        self.allow_remote || loopback::allowed_by_env()
    }
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
    /// Create the template's tables, queues (with DLQ and redrive policy), Kinesis streams and
    /// SES identities; write the function's environment to .local-aws/lambda.env
    Up(OwnTarget),
    /// Delete the template's tables, queues and streams that exist, creating none
    Down(OwnTarget),
    /// Print the function's environment, for cargo lambda watch (after `up`: creates nothing)
    Env(OwnTarget),
    /// Send an SQS sample event's bodies to one of the template's queues
    Send(SendArgs),
    /// Drain the template's SQS event sources into the function: its binary under a local Lambda
    /// Runtime API, or behind `cargo lambda watch`
    Run(RunArgs),
    /// Replay a stream driver's park destination (the function's PARK_QUEUE_URL): rebuild each
    /// parked record's one-record event, invoke the function, delete the message unless the
    /// answer names the record
    ReplayParked(ParkedArgs),
}

/// Which resources.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Resources named PREFIX-... (tests use their own)
    #[arg(long, default_value = "")]
    pub prefix: String,
}

/// Your template, and which of its functions.
#[derive(Debug, Args)]
pub struct OwnTarget {
    #[command(flatten)]
    target: Target,
    /// Your template (CloudFormation or SAM, JSON): its tables, queues, Kinesis streams and SES
    /// email identities, its functions' environment
    #[arg(long, value_name = "PATH", required = true)]
    template: Option<PathBuf>,
    /// The function (logical id) whose environment and event sources to use; every function's
    /// when absent
    #[arg(long, value_name = "LOGICAL_ID")]
    function: Option<String>,
}

/// `local send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    #[command(flatten)]
    target: Target,
    /// Your template (JSON)
    #[arg(long, value_name = "PATH", required = true)]
    template: Option<PathBuf>,
    /// The queue's logical id
    #[arg(long, value_name = "LOGICAL_ID", required = true)]
    queue: Option<String>,
    /// An SQS sample event (events/*.json) whose bodies to send
    #[arg(long, required = true)]
    file: Option<PathBuf>,
}

/// `local run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    own: OwnTarget,
    /// Run this binary (your function, built) under a local Lambda Runtime API
    #[arg(long, value_name = "PATH", required_unless_present = "invoke_url", conflicts_with = "invoke_url")]
    bin: Option<PathBuf>,
    /// With --invoke-url: the function's name under `cargo lambda watch` (its binary's name)
    #[arg(long, requires = "invoke_url")]
    name: Option<String>,
    /// Invoke the function behind `cargo lambda watch` at this address (http://127.0.0.1:9000)
    #[arg(long, value_name = "URL")]
    invoke_url: Option<String>,
}

/// `local replay-parked`.
#[derive(Debug, Args)]
pub struct ParkedArgs {
    /// The park destination: the SQS queue the function's PARK_QUEUE_URL names
    #[arg(long, value_name = "URL")]
    queue: String,
    /// The function's name under `cargo lambda watch`
    #[arg(long)]
    function: String,
    /// Invoke the function behind `cargo lambda watch` at this address
    #[arg(long, value_name = "URL")]
    invoke_url: String,
    /// The function's trigger (aws:kafka, aws:kinesis or aws:dynamodb); a parked record of
    /// another trigger is kept, never handed to it
    #[arg(long, value_name = "TRIGGER")]
    trigger: String,
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
            Command::Up(t) => own::up(&clients, &t).await,
            Command::Down(t) => own::down(&clients, &t).await,
            Command::Env(t) => own::env(&clients, &t).await,
            Command::Send(args) => own::send(&clients, &args).await,
            Command::Run(args) => own::run(&clients, &args).await,
            Command::ReplayParked(args) => replay_parked(&clients, &args).await,
        }
    }
}

/// `local replay-parked`: through the function under `cargo lambda watch`.
async fn replay_parked(clients: &Clients, args: &ParkedArgs) -> Result<()> {
    let function = Http { url: args.invoke_url.clone(), function: args.function.clone() };
    let trigger = args.trigger.as_str();
    let targets = esm::Targets::only(trigger, function)
        .ok_or_else(|| format!("--trigger {trigger}: aws:kafka, aws:kinesis or aws:dynamodb"))?;
    let replayed = esm::replay_parked(clients, &args.queue, &targets).await?;
    println!("replayed {} parked records from {}; {} kept", replayed.batches, args.queue, replayed.kept);
    replayed.all_through()
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_guides_command_lines_parse() {
        for line in [
            "local up --template template.json",
            "local up --template template.json --function OrdersFunction",
            "local env --template template.json --prefix t1",
            "local send --template template.json --queue OrdersQueue --file events/order.json",
            "local run --template template.json --bin target/debug/orders-consumer",
            "local run --template template.json --invoke-url http://127.0.0.1:9000 --name orders-consumer",
            "local replay-parked --queue http://127.0.0.1:4566/000000000000/park --function my-fn --invoke-url http://127.0.0.1:9000 --trigger aws:kinesis",
            "local down --template template.json --allow-remote",
            "local --allow-remote up --template template.json --prefix t1",
        ] {
            Cli::try_parse_from(line.split(' ')).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    #[test]
    fn an_unknown_or_misspelt_flag_or_a_missing_template_is_an_error() {
        for line in [
            "local up",
            "local up --template template.json --verbose",
            "local sned",
            "local run --template template.json",
            "local run --bin target/debug/orders-consumer",
            "local run --template template.json --bin x --invoke-url http://127.0.0.1:9000",
            "local send --template template.json --file events/order.json",
            "local replay-parked --function kafka-consumer",
            "local demo",
        ] {
            assert!(Cli::try_parse_from(line.split(' ')).is_err(), "{line} parsed");
        }
    }
}
