//! Lambda entry point: `IDEMPOTENCY_TABLE` and `PROVIDER_ADDR` (`host:port`) from the
//! environment, the client built once, then the SQS driver.

use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::sqs::{self, Options};
use effectively_once_lambda::Error;
use outbound_idempotency_key::{Charges, Provider};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let var = |name: &str| std::env::var(name).map_err(|_| format!("environment variable {name} is not set"));
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), var("IDEMPOTENCY_TABLE")?);
    let handler = Charges {
        idempotency: Idempotency::new(store, Config::from_env()),
        provider: Provider { addr: var("PROVIDER_ADDR")? },
    };
    sqs::run(handler, Options::new("outbound-idempotency-key")).await
}
