//! The SQS driver's batch path (`sqs::process_batch`) with a scripted batch handler: one call per
//! standard batch, rounds per FIFO group position, hold-back, panics and a wrong result count.

use std::sync::Mutex;

use crate::common::failures;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use effectively_once_lambda::{sqs, Handled, RecordError, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

/// Answers by the body: `ok`, `retry`, `permanent`; `panic` panics the batch call (not the
/// single path); `short` makes the batch call return one result too few.
#[derive(Default)]
struct Scripted {
    calls: Mutex<Vec<Vec<String>>>,
    alone: Mutex<Vec<String>>,
}

fn answer(message: &SqsMessage) -> RecordResult {
    match message.body.as_deref().unwrap_or("") {
        "retry" => Err(RecordError::retryable("throttled")),
        "permanent" => Err(RecordError::permanent("malformed")),
        _ => Ok(Handled::Applied),
    }
}

impl effectively_once_lambda::Handler<SqsMessage> for Scripted {
    async fn handle(&self, message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        self.alone.lock().unwrap().push(message.message_id.clone().unwrap());
        answer(message)
    }
}

impl effectively_once_lambda::BatchHandler<SqsMessage> for Scripted {
    async fn handle_batch(
        &self,
        messages: &[&SqsMessage],
        _context: &effectively_once_lambda::events::Context,
    ) -> Vec<RecordResult> {
        self.calls.lock().unwrap().push(messages.iter().map(|m| m.message_id.clone().unwrap()).collect());
        if messages.iter().any(|m| m.body.as_deref() == Some("panic")) {
            panic!("the batch call panics");
        }
        let mut results: Vec<RecordResult> = messages.iter().map(|m| answer(m)).collect();
        if messages.iter().any(|m| m.body.as_deref() == Some("short")) {
            results.pop();
        }
        results
    }
}

/// Messages `(id, body, group)`; a group makes the batch FIFO.
fn event(messages: &[(&str, &str, Option<&str>)]) -> LambdaEvent<SqsEvent> {
    let mut event = SqsEvent::default();
    for (id, body, group) in messages {
        let mut message = SqsMessage::default();
        message.message_id = Some((*id).to_owned());
        message.body = Some((*body).to_owned());
        if let Some(group) = group {
            message.attributes.insert("MessageGroupId".into(), (*group).to_owned());
        }
        event.records.push(message);
    }
    LambdaEvent::new(event, Context::default())
}

fn quiet() -> sqs::Options {
    sqs::Options { emit_metrics: false, ..sqs::Options::new("t") }
}

#[tokio::test]
async fn a_standard_batch_is_one_call_and_failures_are_per_message() {
    let handler = Scripted::default();
    let batch = event(&[("m-1", "ok", None), ("m-2", "retry", None), ("m-3", "permanent", None), ("m-4", "ok", None)]);
    let response = sqs::process_batch(&handler, batch, &quiet()).await;
    assert_eq!(failures(&response), ["m-2", "m-3"]);
    assert_eq!(*handler.calls.lock().unwrap(), [vec!["m-1", "m-2", "m-3", "m-4"]]);
    assert!(handler.alone.lock().unwrap().is_empty());
}

/// Round by round, the next message of each group; a retryable failure holds back the rest of
/// its group (never started), a permanent one does not.
#[tokio::test]
async fn fifo_groups_go_in_rounds_and_a_retryable_failure_holds_its_group_back() {
    let handler = Scripted::default();
    let batch = event(&[
        ("a-1", "retry", Some("A")),
        ("b-1", "permanent", Some("B")),
        ("a-2", "ok", Some("A")),
        ("b-2", "ok", Some("B")),
        ("c-1", "ok", Some("C")),
        ("a-3", "ok", Some("A")),
        ("b-3", "ok", Some("B")),
    ]);
    let response = sqs::process_batch(&handler, batch, &quiet()).await;
    assert_eq!(failures(&response), ["a-1", "b-1", "a-2", "a-3"]);
    assert_eq!(*handler.calls.lock().unwrap(), [vec!["a-1", "b-1", "c-1"], vec!["b-2"], vec!["b-3"]]);
}

/// A panicking call is trusted with none of its messages: each is handled again alone.
#[tokio::test]
async fn a_panicking_call_falls_back_to_one_message_at_a_time() {
    let handler = Scripted::default();
    let batch = event(&[("m-1", "ok", None), ("m-2", "panic", None), ("m-3", "retry", None)]);
    let response = sqs::process_batch(&handler, batch, &quiet()).await;
    assert_eq!(failures(&response), ["m-3"]);
    assert_eq!(*handler.alone.lock().unwrap(), ["m-1", "m-2", "m-3"]);
}

/// A call that returns a result count unlike its messages' is not trusted either.
#[tokio::test]
async fn a_wrong_result_count_falls_back_to_one_message_at_a_time() {
    let handler = Scripted::default();
    let batch = event(&[("m-1", "short", None), ("m-2", "ok", None)]);
    let response = sqs::process_batch(&handler, batch, &quiet()).await;
    assert!(failures(&response).is_empty());
    assert_eq!(*handler.alone.lock().unwrap(), ["m-1", "m-2"]);
}

/// Within the deadline margin no round starts: every message is reported failed, retryable.
#[tokio::test]
async fn near_the_deadline_nothing_starts() {
    let handler = Scripted::default();
    let mut batch = event(&[("m-1", "ok", None), ("m-2", "ok", None)]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    batch.context.deadline = now + 200;
    let response = sqs::process_batch(&handler, batch, &quiet()).await;
    assert_eq!(failures(&response), ["m-1", "m-2"]);
    assert!(handler.calls.lock().unwrap().is_empty());
}
