//! Delivers the payment in `events/sqs-payment.json` three times, as an at-least-once broker
//! might, through the idempotency layer on the local AWS, and prints what each delivery cost.
//!
//! `make demo` starts the local AWS and runs this.

use effectively_once::{Config, Idempotency, Key};
use effectively_once_dynamodb::testing::fresh_store;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let event: serde_json::Value = serde_json::from_str(include_str!("../../../events/sqs-payment.json"))?;
    let body: serde_json::Value = serde_json::from_str(event["Records"][0]["body"].as_str().ok_or("no body")?)?;
    let event_id = body["event_id"].as_str().ok_or("no event_id")?;

    let (store, requests) = fresh_store().await;
    println!("idempotency table {} at {}", store.table(), effectively_once_dynamodb::testing::endpoint());
    let idempotency = Idempotency::new(store, Config::default());
    let key = Key::new("payments", event_id)?;
    let mut runs = 0;
    for delivery in 1..=3 {
        requests.reset();
        let outcome = idempotency
            .run(&key, &body, || async {
                runs += 1;
                Ok::<_, std::io::Error>(format!("posted {} cents", body["amount_cents"]))
            })
            .await?;
        let kind = if outcome.is_replay() { "replayed" } else { "fresh" };
        println!(
            "delivery {delivery}: {kind:<8} response {:?}, DynamoDB requests {} {:?}",
            outcome.response(),
            requests.total(),
            requests.by_operation()
        );
    }
    println!("handler ran {runs} time(s) for 3 deliveries");
    Ok(())
}
