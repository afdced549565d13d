//! Lambda entry point: `IDEMPOTENCY_TABLE`, `ORDERS_TABLE` and `PARK_QUEUE_URL` from the
//! environment, clients built once, then the Kafka driver.

use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::{DynamoDbStore, Table};
use effectively_once_lambda::kafka::{self, Options};
use effectively_once_lambda::park::SqsQueue;
use effectively_once_lambda::{Error, Typed};
use kafka_orders::Orders;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let var = |name: &str| std::env::var(name).map_err(|_| format!("environment variable {name} is not set"));
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), var("IDEMPOTENCY_TABLE")?);
    let orders = Orders {
        idempotency: Idempotency::new(store, Config::from_env()),
        orders: Table::new(var("ORDERS_TABLE")?, "id"),
    };
    // A record that fails for good is parked in PARK_QUEUE_URL before its partition passes it.
    let park = SqsQueue::from_env(aws_sdk_sqs::Client::new(&sdk))?;
    kafka::run(Typed(orders), Options::new("kafka-orders").park_in(park)).await
}
