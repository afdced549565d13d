//! The own-consumer guide (`docs/own-consumer.md`) followed end to end: a crate of the reader's
//! own, outside this workspace, depending on the crates by path, with its own template, run
//! under the local pipeline as the guide's last section says:
//!
//! ```sh
//! cargo run -p local -- up   --template template.json
//! cargo run -p local -- send --template template.json --queue OrdersQueue --file events/orders.json
//! cargo run -p local -- run  --template template.json --bin target/debug/my-orders
//! ```
//!
//! The crate is generated into a temporary directory: the guide's `Cargo.toml` (versions and
//! features from this workspace's `[workspace.dependencies]`), the handler and `main` of
//! `examples/orders-consumer` (the guide's finished result). It is built with this workspace's
//! `Cargo.lock` into the target directory the examples' check builds in (`infra/examples.sh
//! target`, one per user): the registry crates with the features it picks are compiled once per
//! machine, and a run compiles only its own code and the path crates.

use std::path::{Path, PathBuf};
use std::process::Command;

use aws_sdk_dynamodb::types::AttributeValue;
use clap::Parser;
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_effects::testing::emails_to;
use local::cli::Cli;
use local::Clients;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The target directory of crates built outside the workspace: the examples' check's, shared by
/// every clone of this user (not this workspace's own: a path crate built from outside its
/// workspace gets the same artifact names under other fingerprints, so the two builds would
/// each rebuild what the other wrote).
fn target_dir() -> PathBuf {
    let out = Command::new(root().join("infra/examples.sh")).arg("target").output().expect("infra/examples.sh runs");
    assert!(out.status.success(), "infra/examples.sh target: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim_end())
}

/// The reader's crate's directory: one per checkout, the same path every run, so each run builds
/// the same package (same artifact names) and the shared target does not grow by a crate a run.
/// Beside the shared target in the user's cache, as the examples' copies are (infra/examples.sh),
/// not in a shared temporary directory another user could create first.
fn crate_dir(target: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    root().hash(&mut hasher);
    target.parent().unwrap().join(format!("outside-crates/own-consumer-{:016x}", hasher.finish()))
}

/// The line `name = ...` the guide (docs/own-consumer.md, section 1) gives the reader for a
/// program's own choices (SDK behaviour version, HTTP client, runtime), else the workspace's
/// `[workspace.dependencies]` line: the reader's crate is built as the guide says.
fn workspace_dependency(name: &str) -> String {
    let prefix = format!("{name} = ");
    let guide = std::fs::read_to_string(root().join("docs/own-consumer.md")).unwrap();
    if let Some(line) = guide.lines().find(|l| l.starts_with(&prefix)) {
        return line.to_owned();
    }
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    manifest.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {name}")).to_owned()
}

/// The reader's crate, as the guide's section 1 and 2 make it: `Cargo.toml`, `src/lib.rs` (the
/// handler), `src/main.rs`.
fn generate_crate(dir: &Path) {
    let crates = root().join("crates");
    let path = |name: &str| format!("{{ path = {:?}", crates.join(name).display().to_string());
    let mut manifest = String::from(
        "[package]\nname = \"my-orders\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         # Not a member of any workspace above it.\n[workspace]\n\n[dependencies]\n",
    );
    manifest += &format!("effectively-once = {} }}\n", path("effectively-once"));
    manifest += &format!(
        "effectively-once-dynamodb = {}, features = [\"sdk-defaults\"] }}\n",
        path("effectively-once-dynamodb")
    );
    manifest += &format!("effectively-once-lambda = {} }}\n", path("effectively-once-lambda"));
    manifest +=
        &format!("effectively-once-effects = {}, features = [\"lambda\"] }}\n", path("effectively-once-effects"));
    for dependency in
        ["aws-config", "aws-sdk-dynamodb", "aws-sdk-sesv2", "lambda_runtime", "serde", "serde_json", "tokio", "tracing"]
    {
        manifest += &workspace_dependency(dependency);
        manifest.push('\n');
    }
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    // The workspace's lock: the versions the workspace tested, offline.
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let example = root().join("examples/orders-consumer/src");
    std::fs::copy(example.join("lib.rs"), dir.join("src/lib.rs")).unwrap();
    let main = std::fs::read_to_string(example.join("main.rs")).unwrap().replace("orders_consumer::", "my_orders::");
    std::fs::write(dir.join("src/main.rs"), main).unwrap();
}

/// The reader's template: the idempotency table, the orders table, the queue with its DLQ, the
/// sender identity and the function with its SQS event source, in SAM's form.
const TEMPLATE: &str = r#"{
  "Transform": "AWS::Serverless-2016-10-31",
  "Parameters": {"ConfirmationFrom": {"Type": "String", "Default": "orders@example.com"}},
  "Resources": {
    "IdempotencyTable": {"Type": "AWS::DynamoDB::Table", "Properties": {
      "BillingMode": "PAY_PER_REQUEST",
      "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "S"}],
      "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
      "TimeToLiveSpecification": {"AttributeName": "expiration", "Enabled": true}}},
    "OrdersTable": {"Type": "AWS::DynamoDB::Table", "Properties": {
      "BillingMode": "PAY_PER_REQUEST",
      "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
      "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}]}},
    "OrdersDeadLetterQueue": {"Type": "AWS::SQS::Queue"},
    "OrdersQueue": {"Type": "AWS::SQS::Queue", "Properties": {
      "RedrivePolicy": {"deadLetterTargetArn": {"Fn::GetAtt": ["OrdersDeadLetterQueue", "Arn"]}, "maxReceiveCount": 2}}},
    "Sender": {"Type": "AWS::SES::EmailIdentity", "Properties": {"EmailIdentity": {"Ref": "ConfirmationFrom"}}},
    "OrdersFunction": {"Type": "AWS::Serverless::Function", "Properties": {
      "Runtime": "provided.al2023", "Handler": "bootstrap", "CodeUri": ".",
      "Environment": {"Variables": {
        "IDEMPOTENCY_TABLE": {"Ref": "IdempotencyTable"},
        "ORDERS_TABLE": {"Ref": "OrdersTable"},
        "CONFIRMATION_FROM": {"Ref": "ConfirmationFrom"}}},
      "Events": {"Orders": {"Type": "SQS", "Properties": {
        "Queue": {"Fn::GetAtt": ["OrdersQueue", "Arn"]}, "BatchSize": 10,
        "FunctionResponseTypes": ["ReportBatchItemFailures"]}}}}}
  }
}"#;

/// `local ARGS` in the reader's crate (the current directory), in process: the `local` binary
/// of a target directory shared by several checkouts may be another checkout's.
async fn local(args: &[&str]) {
    let cli = Cli::try_parse_from(["local"].iter().chain(args)).unwrap_or_else(|e| panic!("local {args:?}: {e}"));
    if let Err(error) = cli.command.apply().await {
        panic!("local {args:?}: {error}");
    }
}

#[tokio::test]
async fn the_guides_own_crate_runs_under_the_local_pipeline_and_stores_each_order_once() {
    // Every clone of this user builds `my-orders` into the shared target, and cargo copies each
    // clone's build to the one name `debug/my-orders`: held from the crate's generation to the
    // end of its run, so no other run's build replaces the binary this run starts.
    let target = target_dir();
    std::fs::create_dir_all(&target).unwrap();
    let lock = std::fs::File::create(target.join("own-consumer.lock")).unwrap();
    lock.lock().unwrap();
    let dir = crate_dir(&target);
    generate_crate(&dir);
    // The reader's crate is where they run `local` (the test's only one in this binary).
    std::env::set_current_dir(&dir).unwrap();
    std::fs::write(dir.join("template.json"), TEMPLATE).unwrap();
    let prefix = unique_name("own");
    let order_id = unique_name("ord");
    let email = format!("{order_id}@example.com");
    let order = format!(r#"{{"order_id": "{order_id}", "email": "{email}", "total_cents": 4200}}"#);
    // The same order twice (a producer retry: a new message id), and a body that is no order.
    let records: Vec<_> = [order.as_str(), order.as_str(), "{not an order"]
        .iter()
        .enumerate()
        .map(|(i, body)| serde_json::json!({"messageId": format!("m-{i}"), "body": body}))
        .collect();
    std::fs::create_dir_all(dir.join("events")).unwrap();
    std::fs::write(dir.join("events/orders.json"), serde_json::json!({ "Records": records }).to_string()).unwrap();

    // The resources, and the function's environment in .local-aws/lambda.env.
    let template = ["--template", "template.json", "--prefix", prefix.as_str()];
    local(&[&["up"], &template[..]].concat()).await;
    let env = std::fs::read_to_string(dir.join(".local-aws/lambda.env")).unwrap();
    assert!(env.contains(&format!("ORDERS_TABLE={prefix}-orders\n")), "{env}");

    // The reader's crate, built with the workspace's lock into the shared target, as the examples'
    // check builds its copies (same settings and build environment, so the same artifacts).
    let build = Command::new(root().join("infra/examples.sh"))
        .args(["cargo", "build", "--quiet", "--offline", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .output()
        .expect("infra/examples.sh runs");
    assert!(build.status.success(), "cargo build: {}", String::from_utf8_lossy(&build.stderr));
    let binary = target.join("debug/my-orders");

    local(&[&["send", "--queue", "OrdersQueue", "--file", "events/orders.json"], &template[..]].concat()).await;
    local(&[&["run", "--bin", binary.to_str().unwrap()], &template[..]].concat()).await;

    // One item and one email for the order; the body that is no order in the DLQ.
    let clients = Clients::local().await;
    let items = clients.dynamodb.scan().table_name(format!("{prefix}-orders")).send().await.unwrap();
    let ids: Vec<_> = items.items().iter().map(|item| item.get("pk").cloned()).collect();
    assert_eq!(ids, vec![Some(AttributeValue::S(format!("order#{order_id}")))]);
    assert_eq!(emails_to(&email).len(), 1, "one confirmation");
    let dlq = clients.sqs.get_queue_url().queue_name(format!("{prefix}-orders-dead-letter")).send().await.unwrap();
    let depth = local::esm::queue_depth(&clients, dlq.queue_url().unwrap()).await.unwrap();
    assert_eq!(depth, 1, "the body that is no order, after its receives");

    local(&[&["down"], &template[..]].concat()).await;
    std::fs::remove_dir_all(&dir).ok();
    drop(lock);
}
