//! A batch whose handler panics on one record, run in whatever profile this is built with:
//! `cargo run --release -p effectively-once-lambda --example panic_isolation` checks that the release profile
//! unwinds, so the driver reports that record alone failed and the process lives on. Exits 0
//! when the batch response names exactly the panicking record.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use effectively_once_lambda::{sqs, Handled, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

struct PanicsOnThird;

impl effectively_once_lambda::Handler<SqsMessage> for PanicsOnThird {
    async fn handle(&self, message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        tokio::task::yield_now().await;
        if message.message_id.as_deref() == Some("m-3") {
            panic!("cannot post {}", message.body.as_deref().unwrap_or_default());
        }
        Ok(Handled::Applied)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut event = SqsEvent::default();
    event.records = (1..=5)
        .map(|i| {
            let mut m = SqsMessage::default();
            m.message_id = Some(format!("m-{i}"));
            m.body = Some(format!(r#"{{"event_id": "pay_{i}", "receipt_email": "alice@example.com"}}"#));
            m
        })
        .collect();
    let options = sqs::Options::new("panic_isolation");
    let response = sqs::process(&PanicsOnThird, LambdaEvent::new(event, Context::default()), &options).await;
    let failed: Vec<_> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    println!("panic strategy unwind: {}; batch item failures: {failed:?}", cfg!(panic = "unwind"));
    std::process::exit(if failed == ["m-3"] { 0 } else { 1 });
}
