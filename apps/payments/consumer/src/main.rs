//! Lambda entry point: SQS payment events to the ledger, once each.

use effectively_once_lambda::sqs::{self, Options};
use effectively_once_lambda::Error;
use payments_consumer::{Env, Payments, FUNCTION};

// A batch's SDK items and request JSON are thousands of small blocks: glibc's malloc and free
// were a quarter of the instructions a message, mimalloc takes a third of that (docs/profile.md).
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
    // Namespace, `Function` dimension and service read from the environment once, here.
    let options = Options::new(FUNCTION);
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    let handler = Payments::from_env(aws_sdk_dynamodb::Client::new(&sdk), &env);
    // The ordered path: a batch's payments in one call and one transaction, each FIFO message
    // group kept in order (sqs::run_batch would call once a round, sqs::run once a message).
    sqs::run_ordered(handler, options).await
}
