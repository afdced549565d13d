//! Lambda entry point: `IDEMPOTENCY_TABLE`, `ORDERS_TABLE` and `CONFIRMATION_FROM` from the
//! environment, clients built once, then the SQS driver.

use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::{DynamoDbStore, Table};
use effectively_once_effects::SesSender;
use effectively_once_lambda::sqs::{self, Options};
use effectively_once_lambda::Error;
use orders_consumer::Orders;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let var = |name: &str| std::env::var(name).map_err(|_| format!("environment variable {name} is not set"));
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), var("IDEMPOTENCY_TABLE")?);
    let handler = Orders {
        idempotency: Idempotency::new(store, Config::from_env()),
        orders: Table::new(var("ORDERS_TABLE")?, "pk"),
        sender: SesSender::new(aws_sdk_sesv2::Client::new(&sdk), var("CONFIRMATION_FROM")?),
    };
    sqs::run(handler, Options::new("orders-consumer")).await
}
