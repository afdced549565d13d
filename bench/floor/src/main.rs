//! `payments-floor`: the bench's floor as a Lambda function on the payments queue (see the
//! library). Reads `LEDGER_TABLE`, and with `FLOOR_RECORD=1` writes each event's record too, into
//! `IDEMPOTENCY_TABLE`.

use lambda_runtime::{service_fn, Error, LambdaEvent};

// The allocator ours uses: the floor is the same work at its best, not a slower malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let table = std::env::var("LEDGER_TABLE").map_err(|_| "LEDGER_TABLE is not set")?;
    let records = match std::env::var("FLOOR_RECORD").as_deref() {
        Ok("1") => Some(std::env::var("IDEMPOTENCY_TABLE").map_err(|_| "FLOOR_RECORD=1 needs IDEMPOTENCY_TABLE")?),
        _ => None,
    };
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let (client, table, records) = (&client, table.as_str(), records.as_deref());
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| {
        payments_floor::handle(client, table, records, event.payload)
    }))
    .await
}
