//! Lambda entry point: SQS payment events to the ledger, once each.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use effectively_once_lambda::sqs::{process, Options};
use lambda_runtime::{service_fn, Error, LambdaEvent};
use payments_consumer::{Env, Payments, FUNCTION};

// One invocation at a time per sandbox: a single-threaded runtime does the batch's I/O
// concurrency without cross-thread wake-ups.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let env = Env::from_env()?;
    // The switch is honoured by nothing this function runs: say so once, at cold start.
    effectively_once_effects::warn_if_disabled(&env.config);
    // Namespace, `Function` dimension and service read from the environment once, here.
    let options = Options::new(FUNCTION);
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let handler = Payments::from_env(aws_sdk_dynamodb::Client::new(&sdk), &env);
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| async {
        Ok::<SqsBatchResponse, Error>(process(&handler, event, &options).await)
    }))
    .await
}
