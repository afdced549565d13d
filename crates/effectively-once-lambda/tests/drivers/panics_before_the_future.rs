//! A handler that panics before it returns its future fails its record alone, as one that panics
//! while polled does. `Handler::handle` is a plain `fn ... -> impl Future`, so an implementation
//! may do work before it returns its future (parse the body, look something up) and panic there;
//! caught only around the future (`panics::catch(handler.handle(..))`), that panic would happen
//! outside `catch_unwind` and take the whole batch down, every message's receive count with it.
//! So the drivers hand `catch` the call that makes the future.

use std::future::Future;

use crate::common::{checkpoint, eight_messages, failures, stream_event, PanicsOn};
use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::sqs::SqsMessage;
use effectively_once_lambda::{sqs, streams, Handled, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

/// Panics on one id before it returns a future, as a handler that parses synchronously would;
/// records the ids whose future ran. (`panics.rs` implements the handlers on `PanicsOn` itself,
/// panicking while polled.)
struct PanicsEarly(PanicsOn);

impl PanicsEarly {
    fn make(&self, id: String) -> impl Future<Output = RecordResult> + Send + '_ {
        assert_ne!(id, self.0.panic_on, "cannot parse the body of {id}");
        async move {
            self.0.record(id);
            Ok(Handled::Applied)
        }
    }

    fn applied_sorted(&self) -> Vec<String> {
        let mut applied = self.0.applied();
        applied.sort();
        applied
    }
}

impl effectively_once_lambda::Handler<SqsMessage> for PanicsEarly {
    fn handle(
        &self,
        message: &SqsMessage,
        _context: &effectively_once_lambda::events::Context,
    ) -> impl Future<Output = RecordResult> + Send {
        self.make(message.message_id.clone().unwrap())
    }
}

impl effectively_once_lambda::Handler<EventRecord> for PanicsEarly {
    fn handle(
        &self,
        record: &EventRecord,
        _context: &effectively_once_lambda::events::Context,
    ) -> impl Future<Output = RecordResult> + Send {
        self.make(record.change.sequence_number.clone().unwrap())
    }
}

#[tokio::test]
async fn a_panic_before_the_handlers_future_fails_its_record_alone() {
    let options = sqs::Options { emit_metrics: false, ..sqs::Options::new("t") };
    // Spawned so that a panic escaping the driver shows as a failed task, not as this test's
    // own panic, and so that the batch future is shown to be `Send`.
    let run = tokio::spawn(async move {
        let handler = PanicsEarly(PanicsOn::new("m-3"));
        let event = LambdaEvent::new(eight_messages(), Context::default());
        let response = sqs::process(&handler, event, &options).await;
        (response, handler.applied_sorted())
    });
    let (response, applied) = match run.await {
        Ok(done) => done,
        Err(e) => panic!("the batch itself panicked (every message redelivered): {e}"),
    };
    assert_eq!(failures(&response), ["m-3"]);
    assert_eq!(applied, ["m-0", "m-1", "m-2", "m-4", "m-5", "m-6", "m-7"], "the other records ran");
}

#[tokio::test]
async fn a_panic_before_the_handlers_future_is_the_streams_checkpoint() {
    let options = streams::Options { emit_metrics: false, ..streams::Options::new("t") };
    let run = tokio::spawn(async move {
        let handler = PanicsEarly(PanicsOn::new("111000000000000000000003"));
        let response = streams::process(&handler, LambdaEvent::new(stream_event(), Context::default()), &options).await;
        (response, handler.applied_sorted())
    });
    let (response, applied) = match run.await {
        Ok(done) => done,
        Err(e) => panic!("the batch itself panicked (the whole batch retried): {e}"),
    };
    assert_eq!(checkpoint(&response), [Some("111000000000000000000003".to_owned())]);
    assert_eq!(applied, ["111000000000000000000001"], "the record before it is done");
}
