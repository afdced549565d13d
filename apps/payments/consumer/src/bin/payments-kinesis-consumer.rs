//! Lambda entry point: Kinesis payment events to the ledger, once each. Not in the template: the
//! bench's Kinesis column, and a start for a team whose payments come by Kinesis.

use effectively_once_lambda::kinesis::{self, Options};
use effectively_once_lambda::park::SqsQueue;
use effectively_once_lambda::Error;
use payments_consumer::kinesis::FUNCTION;
use payments_consumer::{Env, Payments};

// As the SQS consumer: mimalloc, a third of glibc's allocation instructions (docs/profile.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// One invocation at a time per sandbox: a single-threaded runtime does the batch's I/O
// concurrency without cross-thread wake-ups.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let env = Env::from_env()?;
    // The switch is honoured by nothing this function runs: say so once, at cold start.
    payments::warn_if_disabled(&env.config);
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    // A record that fails for good is parked in PARK_QUEUE_URL before the shard passes it.
    let options = Options::new(FUNCTION).park_in(SqsQueue::from_env(aws_sdk_sqs::Client::new(&sdk))?);
    let handler = Payments::from_env(aws_sdk_dynamodb::Client::new(&sdk), &env);
    // The ordered path: the batch's payments in one call and one transaction, each partition key
    // kept in order (kinesis::run_batch would call once a round, kinesis::run once a record).
    kinesis::run_ordered(handler, options).await
}
