//! Lambda entry point: `POST /payments` behind a Function URL or an HTTP API, enqueued once per
//! `Idempotency-Key`.

use lambda_http::{service_fn, Error, Request};
use payments_api::{DeployedApi, Env};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let env = Env::from_env()?;
    let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
    let api = DeployedApi::from_env(&sdk, &env);
    let api = &api;
    lambda_http::run(service_fn(move |request: Request| async move { Ok::<_, Error>(api.handle(request).await) })).await
}
