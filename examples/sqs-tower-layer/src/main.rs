//! Lambda entry point: `IDEMPOTENCY_TABLE` and `COUNTERS_TABLE` from the environment, the
//! counter service wrapped in the idempotency layer, then the SQS driver.

use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::sqs::{self, Options};
use effectively_once_lambda::Error;
use lambda_runtime::tower::Layer;
use sqs_tower_layer::{counter_service, layer, Consumer};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let var = |name: &str| std::env::var(name).map_err(|_| format!("environment variable {name} is not set"));
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let store = DynamoDbStore::new(client.clone(), var("IDEMPOTENCY_TABLE")?);
    let service =
        layer(Idempotency::new(store, Config::from_env())).layer(counter_service(client, var("COUNTERS_TABLE")?));
    sqs::run(Consumer { service }, Options::new("sqs-tower-layer")).await
}
