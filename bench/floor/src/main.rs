//! `payments-floor`: the bench's floor as a Lambda function on the payments queue (see the
//! library). Reads `LEDGER_TABLE`.

use lambda_runtime::{service_fn, Error, LambdaEvent};

// The allocator ours uses: the floor is the same work at its best, not a slower malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let table = std::env::var("LEDGER_TABLE").map_err(|_| "LEDGER_TABLE is not set")?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let (client, table) = (&client, table.as_str());
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| payments_floor::handle(client, table, event.payload)))
        .await
}
