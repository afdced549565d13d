//! The local harness forwards `effectively_once_lambda::Handler<SqsMessage>::key` through its
//! wrappers (`Counting`, `Panicking`), so same-key records of a standard batch run one after the
//! other locally, as deployed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use effectively_once_lambda::{Handled, RecordResult};
use local::invoke::{InProcess, SqsFunction};

#[derive(Default)]
struct Keyed {
    in_flight: AtomicUsize,
    overlap: AtomicUsize,
}

impl effectively_once_lambda::Handler<SqsMessage> for Keyed {
    async fn handle(&self, _message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) > 0 {
            self.overlap.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(Handled::Applied)
    }

    fn key(&self, _message: &SqsMessage) -> Option<String> {
        Some("same".into())
    }
}

#[tokio::test]
async fn in_process_keeps_the_handlers_key() {
    let mut event: SqsEvent = serde_json::from_slice(include_bytes!("../../../../events/sqs-payment.json")).unwrap();
    let template = event.records[0].clone();
    event.records = (0..4)
        .map(|i| {
            let mut m = template.clone();
            m.message_id = Some(format!("m-{i}"));
            m
        })
        .collect();
    let function = InProcess::new(Keyed::default(), "t");
    let response = function.invoke(event).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(function.handler().overlap.load(Ordering::SeqCst), 0, "same-key records overlapped");
}
