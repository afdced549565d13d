//! Lambda entry point: `IDEMPOTENCY_TABLE` and `PROJECTIONS_TABLE` from the environment, the
//! client built once, then the Streams driver (INSERT records only, its default).

use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::{DynamoDbStore, Table};
use effectively_once_lambda::park::SqsQueue;
use effectively_once_lambda::streams::{self, Options};
use effectively_once_lambda::Error;
use streams_consumer::Projector;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let var = |name: &str| std::env::var(name).map_err(|_| format!("environment variable {name} is not set"));
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), var("IDEMPOTENCY_TABLE")?);
    let handler = Projector {
        idempotency: Idempotency::new(store, Config::from_env()),
        projections: Table::new(var("PROJECTIONS_TABLE")?, "pk"),
    };
    // A record that fails for good is parked in PARK_QUEUE_URL before the stream passes it.
    let park = SqsQueue::from_env(aws_sdk_sqs::Client::new(&sdk))?;
    // The ordered path: the batch in one call and one commit_batch, each item's changes in order
    // (streams::run_batch would call once a round, streams::run once a record).
    streams::run_ordered(handler, Options::new("streams-consumer").park_in(park)).await
}
