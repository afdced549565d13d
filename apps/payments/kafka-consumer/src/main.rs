//! Lambda entry point: Kafka payment events to the ledger, once each.

use effectively_once_lambda::kafka::{self, Options};
use effectively_once_lambda::park::SqsQueue;
use effectively_once_lambda::Error;
use kafka_consumer::{Payments, FUNCTION};
use payments::LedgerEnv;

// One invocation at a time per sandbox: a single-threaded runtime does the batch's I/O
// concurrency without cross-thread wake-ups.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let env = LedgerEnv::from_env()?;
    // The switch is honoured by nothing this function runs: say so once, at cold start.
    payments::warn_if_disabled(&env.config);
    // Namespace, `Function` dimension and service read from the environment once, here.
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    // A record that fails for good is parked in PARK_QUEUE_URL before the partition passes it.
    let options = Options::new(FUNCTION).park_in(SqsQueue::from_env(aws_sdk_sqs::Client::new(&sdk))?);
    let handler = Payments::from_env(aws_sdk_dynamodb::Client::new(&sdk), &env);
    // The ordered path: the batch's payments in one call and one transaction, each partition
    // kept in order (kafka::run_batch would call once a round, kafka::run once a record).
    kafka::run_ordered(handler, options).await
}
