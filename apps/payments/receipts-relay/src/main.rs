//! Lambda entry point: outbox stream inserts to receipt emails, once each.

use effectively_once_lambda::park::SqsQueue;
use effectively_once_lambda::streams::{self, Options};
use effectively_once_lambda::Error;
use receipts_relay::{Alerts, Env, Receipts, FUNCTION};

// One invocation at a time per sandbox: a single-threaded runtime does the batch's I/O
// concurrency without cross-thread wake-ups.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let env = Env::from_env()?;
    // The switch is honoured by nothing this function runs: say so once, at cold start.
    payments::warn_if_disabled(&env.config);
    // Namespace, `Function` dimension and service read from the environment once, here; the
    // alerts go where the batch metrics go.
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    // A receipt that fails for good is parked in PARK_QUEUE_URL before the stream passes it.
    let options = Options::new(FUNCTION).park_in(SqsQueue::from_env(aws_sdk_sqs::Client::new(&sdk))?);
    let handler = Receipts::from_env(aws_sdk_dynamodb::Client::new(&sdk), aws_sdk_sesv2::Client::new(&sdk), &env)
        .with_alerts(Alerts::new(options.metrics.emf().clone()));
    streams::run(handler, options).await
}
