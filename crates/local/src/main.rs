//! `local up`: the local AWS's resources from `infra/template.json`, and `.local-aws/lambda.env`
//! for `cargo lambda watch`. `local env` prints that environment.

use idempotency_dynamodb::testing::{endpoint, sdk_config};

#[tokio::main]
async fn main() {
    let command = std::env::args().nth(1).unwrap_or_default();
    let result = match command.as_str() {
        "up" => up().await,
        "env" => {
            print!("{}", local::lambda_env(&endpoint()));
            Ok(())
        }
        _ => Err("usage: local up | env".to_owned()),
    };
    if let Err(e) = result {
        eprintln!("local: {e}");
        std::process::exit(1);
    }
}

async fn up() -> Result<(), String> {
    let sdk = sdk_config().await;
    let created = local::up(&aws_sdk_dynamodb::Client::new(&sdk), &aws_sdk_sesv2::Client::new(&sdk)).await?;
    std::fs::create_dir_all(".local-aws").map_err(|e| e.to_string())?;
    std::fs::write(".local-aws/lambda.env", local::lambda_env(&endpoint())).map_err(|e| e.to_string())?;
    println!("local AWS at {}: tables created {created:?}; sender {} verified", endpoint(), local::RECEIPT_FROM);
    println!("function environment written to .local-aws/lambda.env");
    Ok(())
}
