//! The commands on a user's own template (`--template`): its resources, its function's
//! environment, a sample event sent to its queue, and its queues drained into its function.

use std::time::Duration;

use effectively_once_dynamodb::testing::endpoint;

use super::{OwnTarget, RunArgs, SendArgs};
use crate::error::{Result, ResultExt};
use crate::esm::queue;
use crate::invoke::Http;
use crate::resources::Clients;
use crate::runtime::{Hosted, Process};
use crate::template::{self, Own};

/// How long `run` waits for the queues to empty.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// The template's resources, created (those that exist are kept).
async fn resources(clients: &Clients, target: &OwnTarget) -> Result<Own> {
    let path = target.template.as_ref().ok_or("--template")?;
    let json = std::fs::read_to_string(path).context(path.display().to_string())?;
    template::up(clients, &json, &target.target.prefix).await.context(path.display().to_string())
}

/// `local up --template`: the resources, and the function's environment in
/// `.local-aws/lambda.env` (of the current directory: your crate's).
pub async fn up(clients: &Clients, target: &OwnTarget) -> Result<()> {
    let own = resources(clients, target).await?;
    let env = own.env_file(target.function.as_deref(), &endpoint())?;
    std::fs::create_dir_all(".local-aws").context(".local-aws")?;
    std::fs::write(".local-aws/lambda.env", &env).context(".local-aws/lambda.env")?;
    let path = target.template.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    println!("local AWS at {}: resources from {path}", endpoint());
    let names = |map: &std::collections::BTreeMap<String, String>| map.values().cloned().collect::<Vec<_>>().join(", ");
    println!("  tables   {}", names(&own.tables));
    println!("  queues   {}", names(&own.queues));
    if !own.streams.is_empty() {
        println!("  streams  {}", names(&own.streams));
    }
    if !own.senders.is_empty() {
        println!("  senders  {} verified", own.senders.join(", "));
    }
    if !own.unresolved.is_empty() {
        println!("  left out of the environment (no local value): {}", own.unresolved.join(", "));
    }
    println!("  function env in .local-aws/lambda.env");
    Ok(())
}

/// What `local up --template` created, looked up without creating anything.
async fn existing(clients: &Clients, target: &OwnTarget) -> Result<Own> {
    let path = target.template.as_ref().ok_or("--template")?;
    let json = std::fs::read_to_string(path).context(path.display().to_string())?;
    template::lookup(clients, &json, &target.target.prefix).await.context(path.display().to_string())
}

/// `local down --template`: deletes what exists of the template's resources, creating nothing.
pub async fn down(clients: &Clients, target: &OwnTarget) -> Result<()> {
    let path = target.template.as_ref().ok_or("--template")?;
    let json = std::fs::read_to_string(path).context(path.display().to_string())?;
    template::down_prefix(clients, &json, &target.target.prefix).await.context(path.display().to_string())?;
    println!("deleted the template's local tables, queues and streams");
    Ok(())
}

/// `local env --template`.
pub async fn env(clients: &Clients, target: &OwnTarget) -> Result<()> {
    print!("{}", existing(clients, target).await?.env_file(target.function.as_deref(), &endpoint())?);
    Ok(())
}

/// `local send --template --queue --file`: an SQS sample event's bodies, each a new message.
pub async fn send(clients: &Clients, args: &SendArgs) -> Result<()> {
    let target = OwnTarget { target: args.target.clone(), template: args.template.clone(), function: None };
    let own = resources(clients, &target).await?;
    let queue = args.queue.as_deref().ok_or("--queue")?;
    let url = own.queues.get(queue).ok_or_else(|| format!("the template has no queue {queue}"))?;
    let path = args.file.as_ref().ok_or("--file")?;
    let bodies = queue::bodies_of_event_file(&std::fs::read_to_string(path).context(path.display().to_string())?)?;
    let n = queue::send(&clients.sqs, url, &bodies).await?;
    println!("sent {n} messages to {url}");
    Ok(())
}

/// `local run --template (--bin | --invoke-url)`: the template's SQS event sources drained into
/// the function, run from its binary or behind `cargo lambda watch`.
pub async fn run(clients: &Clients, args: &RunArgs) -> Result<()> {
    let own = resources(clients, &args.own).await?;
    let function = args.own.function.as_deref();
    let mappings = own.sqs_mappings(function)?;
    if mappings.is_empty() {
        return Err("the template has no SQS event source for that function".into());
    }
    let drained = match (&args.bin, &args.invoke_url) {
        (Some(bin), _) => {
            let env = own.env_file(function, &endpoint())?;
            let env: Vec<(String, String)> =
                env.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
            let name = bin.file_name().and_then(|n| n.to_str()).unwrap_or("function");
            let process = Process::new(Hosted::start(bin, name, &env).await?);
            template::drain(clients, &mappings, &process, DRAIN_LIMIT).await?
        }
        (None, Some(url)) => {
            let name = args.name.clone().or(args.own.function.clone()).unwrap_or_else(|| "_".into());
            template::drain(clients, &mappings, &Http { url: url.clone(), function: name }, DRAIN_LIMIT).await?
        }
        (None, None) => return Err("--template needs --bin PATH or --invoke-url URL".into()),
    };
    println!("drained: {} deliveries, {} failed", drained.deliveries, drained.failed);
    Ok(())
}
