//! Lambda entry point: the orders router behind a Function URL or an HTTP API, its keys'
//! records in `IDEMPOTENCY_TABLE`.

use std::sync::Arc;

use effectively_once::Config;
use effectively_once_dynamodb::DynamoDbStore;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    let table = std::env::var("IDEMPOTENCY_TABLE").map_err(|_| "IDEMPOTENCY_TABLE is not set")?;
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), &table);
    lambda_http::run(http_axum_lambda::app(store, Config::default(), Arc::default())).await
}
