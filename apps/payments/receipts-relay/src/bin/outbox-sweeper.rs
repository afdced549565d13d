//! Lambda entry point, on a schedule: receipts still `PENDING` past `SWEEP_AFTER_SECONDS` sent
//! through the relay's keyed path, once each ([`receipts_relay::sweep`]).

use effectively_once_lambda::events::LambdaEvent;
use effectively_once_lambda::metrics::Emf;
use effectively_once_lambda::Error;
use receipts_relay::sweep::SWEEPER;
use receipts_relay::{Alerts, Env, Receipts, Sweep, Sweeper};

// One invocation at a time (its reserved concurrency is 1): a single-threaded runtime.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // The relay's environment (tables, sender, rules): the sweep sends as the relay does.
    let env = Env::from_env()?;
    let sweep = Sweep::from_env()?;
    payments::warn_if_disabled(&env.config);
    // Namespace and `Function` dimension read from the environment once: the counts and the
    // alerts go under the sweeper's own name.
    let emf = Emf::from_env(SWEEPER);
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    let receipts = Receipts::from_env(aws_sdk_dynamodb::Client::new(&sdk), aws_sdk_sesv2::Client::new(&sdk), &env)
        .with_alerts(Alerts::new(emf.clone()));
    let sweeper = Sweeper::new(receipts, sweep).with_metrics(emf);
    let sweeper = &sweeper;
    lambda_runtime::run(lambda_runtime::service_fn(|event: LambdaEvent<serde_json::Value>| async move {
        sweeper.handle(&event.context).await
    }))
    .await
}
