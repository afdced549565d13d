//! Review finding (fixed): the drivers caught a panic only while the handler's future was polled
//! (`panics::catch(handler.handle(..))`). `Handler::handle` is a plain `fn ... -> impl Future`,
//! so an implementation may do work before it returns its future (parse the body, look
//! something up) and panic there: that panic happened while the argument of `catch` was
//! evaluated, outside `catch_unwind`, and took the whole batch down, every message's receive
//! count with it, which is what issue 11 item 2 removes. The drivers now hand `catch` the call
//! that makes the future.

use std::future::Future;
use std::sync::Mutex;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use lambda_runtime::{Context, LambdaEvent};
use triggers::{sqs, streams, Disposition, RecordResult};

/// Panics on one id before it returns a future, as a handler that parses synchronously would;
/// records the ids whose future ran.
struct PanicsBeforeItsFuture {
    panic_on: &'static str,
    applied: Mutex<Vec<String>>,
}

impl PanicsBeforeItsFuture {
    fn new(panic_on: &'static str) -> Self {
        PanicsBeforeItsFuture { panic_on, applied: Mutex::default() }
    }

    fn make(&self, id: String) -> impl Future<Output = RecordResult> + Send + '_ {
        assert_ne!(id, self.panic_on, "cannot parse the body of {id}");
        async move {
            self.applied.lock().unwrap().push(id);
            Ok(Disposition::Applied)
        }
    }

    fn applied(&self) -> Vec<String> {
        let mut applied = self.applied.lock().unwrap().clone();
        applied.sort();
        applied
    }
}

impl sqs::Handler for PanicsBeforeItsFuture {
    fn handle(&self, message: &SqsMessage, _deadline: Option<u64>) -> impl Future<Output = RecordResult> + Send {
        self.make(message.message_id.clone().unwrap())
    }
}

impl streams::Handler for PanicsBeforeItsFuture {
    fn handle(&self, record: &EventRecord, _deadline: Option<u64>) -> impl Future<Output = RecordResult> + Send {
        self.make(record.change.sequence_number.clone().unwrap())
    }
}

fn batch() -> SqsEvent {
    let mut event: SqsEvent = serde_json::from_slice(include_bytes!("../../../events/sqs-payment.json")).unwrap();
    let template = event.records[0].clone();
    event.records = (0..8)
        .map(|i| {
            let mut m = template.clone();
            m.message_id = Some(format!("m-{i}"));
            m
        })
        .collect();
    event
}

#[tokio::test]
async fn a_panic_before_the_handlers_future_fails_its_record_alone() {
    let options = sqs::Options { metrics: false, ..sqs::Options::new("t") };
    // Spawned so that a panic escaping the driver shows as a failed task, not as this test's
    // own panic, and so that the batch future is shown to be `Send`.
    let run = tokio::spawn(async move {
        let handler = PanicsBeforeItsFuture::new("m-3");
        let event = LambdaEvent::new(batch(), Context::default());
        let response = sqs::process(&handler, event, &options).await;
        (response, handler.applied())
    });
    let (response, applied) = match run.await {
        Ok(done) => done,
        Err(e) => panic!("the batch itself panicked (every message redelivered): {e}"),
    };
    let failed: Vec<_> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, ["m-3"]);
    assert_eq!(applied, ["m-0", "m-1", "m-2", "m-4", "m-5", "m-6", "m-7"], "the other records ran");
}

/// The sample outbox stream (an INSERT, a MODIFY) and a second INSERT after them.
fn stream_event() -> Event {
    let mut event: Event =
        serde_json::from_slice(include_bytes!("../../../events/dynamodb-stream-outbox.json")).unwrap();
    let mut second_insert = event.records[0].clone();
    second_insert.change.sequence_number = Some("111000000000000000000003".into());
    event.records.push(second_insert);
    event
}

#[tokio::test]
async fn a_panic_before_the_handlers_future_is_the_streams_checkpoint() {
    let options = streams::Options { metrics: false, ..streams::Options::new("t") };
    let run = tokio::spawn(async move {
        let handler = PanicsBeforeItsFuture::new("111000000000000000000003");
        let response = streams::process(&handler, LambdaEvent::new(stream_event(), Context::default()), &options).await;
        (response, handler.applied())
    });
    let (response, applied) = match run.await {
        Ok(done) => done,
        Err(e) => panic!("the batch itself panicked (the whole batch retried): {e}"),
    };
    let checkpoint: Vec<_> = response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    assert_eq!(checkpoint, [Some("111000000000000000000003".to_owned())]);
    assert_eq!(applied, ["111000000000000000000001"], "the record before it is done");
}
