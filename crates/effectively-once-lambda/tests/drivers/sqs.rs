//! The SQS driver on the sample events in `events/` with fake handlers: a record's failure is
//! its own, FIFO groups keep their order and hold back only after a failure a retry may undo,
//! concurrency is bounded, records not started by the deadline are reported, and records that
//! share a key run one after the other.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::common::failures;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use effectively_once_lambda::{sqs, Handled, RecordError, RecordResult};
use lambda_runtime::{Context, LambdaEvent};

fn sqs_event(json: &[u8]) -> SqsEvent {
    serde_json::from_slice(json).unwrap()
}

fn quiet(function: &str) -> sqs::Options {
    sqs::Options { emit_metrics: false, ..sqs::Options::new(function) }
}

/// Accepts JSON objects with a string `event_id` and an integer `amount_cents`; records the
/// order it saw them in.
#[derive(Default)]
struct NeedsEventId {
    seen: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    delay: Option<Duration>,
}

impl effectively_once_lambda::Handler<SqsMessage> for NeedsEventId {
    async fn handle(&self, message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.seen.lock().unwrap().push(message.message_id.clone().unwrap());
        let body: serde_json::Value = serde_json::from_str(message.body.as_deref().unwrap_or(""))
            .map_err(|e| RecordError::permanent(e.to_string()))?;
        body["event_id"].as_str().ok_or_else(|| RecordError::permanent("event_id: is required"))?;
        body["amount_cents"].as_i64().ok_or_else(|| RecordError::permanent("amount_cents: must be an integer"))?;
        Ok(Handled::Applied)
    }
}

#[tokio::test]
async fn one_bad_body_fails_only_itself() {
    let handler = NeedsEventId::default();
    let event = sqs_event(include_bytes!("../../../../events/sqs-bad-input.json"));
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &quiet("t")).await;
    assert_eq!(failures(&response), ["bad-malformed-json", "bad-missing-event-id"]);
    assert_eq!(handler.seen.lock().unwrap().len(), 6, "every record handled");
}

/// A message without a message id cannot be named in the answer nor handled: it is refused
/// permanently before the handler sees it, on both paths, and the rest of the batch is handled.
#[tokio::test]
async fn a_message_without_an_id_is_refused_before_the_handler() {
    let handler = NeedsEventId::default();
    let mut event = sqs_event(include_bytes!("../../../../events/sqs-payment.json"));
    let mut anonymous = event.records[0].clone();
    anonymous.message_id = None;
    event.records.push(anonymous);
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &quiet("t")).await;
    assert_eq!(failures(&response), [""], "the one without an id is reported, permanently");
    assert_eq!(handler.seen.lock().unwrap().len(), 1, "the handler never saw it");
}

/// With a real deadline beyond the margin, records run (within it none does: see
/// `records_not_started_before_the_deadline_are_reported_failed`).
#[tokio::test]
async fn records_start_while_the_deadline_is_beyond_the_margin() {
    let handler = NeedsEventId::default();
    let event = sqs_event(include_bytes!("../../../../events/sqs-payment.json"));
    let mut context = Context::default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    context.deadline = now + 30_000;
    let response = sqs::process(&handler, LambdaEvent::new(event, context), &quiet("t")).await;
    assert!(failures(&response).is_empty());
    assert_eq!(handler.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn fifo_keeps_group_order_and_goes_on_past_a_permanent_failure() {
    let handler = NeedsEventId::default();
    let event = sqs_event(include_bytes!("../../../../events/sqs-fifo.json"));
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &quiet("t")).await;
    // b-2's amount is not a number: it never takes effect, so b-3 cannot depend on it and runs.
    assert_eq!(failures(&response), ["fifo-b-2"], "the malformed record alone is reported failed");
    let seen = handler.seen.lock().unwrap().clone();
    let group_a: Vec<_> = seen.iter().filter(|m| m.starts_with("fifo-a")).collect();
    let group_b: Vec<_> = seen.iter().filter(|m| m.starts_with("fifo-b")).collect();
    assert_eq!(group_a, ["fifo-a-1", "fifo-a-2", "fifo-a-3"]);
    assert_eq!(group_b, ["fifo-b-1", "fifo-b-2", "fifo-b-3"], "in order, past the malformed record");
}

/// Fails the given message with the given kind of failure, applies the others; records the order.
struct FailsOne {
    message_id: &'static str,
    error: RecordError,
    applied: Mutex<Vec<String>>,
}

impl effectively_once_lambda::Handler<SqsMessage> for FailsOne {
    async fn handle(&self, message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let id = message.message_id.clone().unwrap();
        if id == self.message_id {
            return Err(self.error.clone());
        }
        self.applied.lock().unwrap().push(id);
        Ok(Handled::Applied)
    }
}

#[tokio::test]
async fn fifo_holds_back_the_rest_of_a_group_only_after_a_failure_a_retry_may_undo() {
    let retry_may_undo =
        [RecordError::retryable("ledger throttled"), RecordError::in_progress_elsewhere("pay_3002 in progress")];
    for error in retry_may_undo {
        let handler = FailsOne { message_id: "fifo-a-2", error: error.clone(), applied: Mutex::default() };
        let event = sqs_event(include_bytes!("../../../../events/sqs-fifo.json"));
        let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &quiet("t")).await;
        // a-2 may still take effect, so a-3 must wait for it: not started, redelivered after it.
        assert_eq!(failures(&response), ["fifo-a-2", "fifo-a-3"], "{error}");
        let applied = handler.applied.lock().unwrap().clone();
        let group_a: Vec<_> = applied.iter().filter(|m| m.starts_with("fifo-a")).collect();
        let group_b: Vec<_> = applied.iter().filter(|m| m.starts_with("fifo-b")).collect();
        assert_eq!(group_a, ["fifo-a-1"], "{error}: a-3 not started");
        assert_eq!(group_b, ["fifo-b-1", "fifo-b-2", "fifo-b-3"], "{error}: the other group goes on");
    }

    let handler =
        FailsOne { message_id: "fifo-a-2", error: RecordError::permanent("key reused"), applied: Mutex::default() };
    let event = sqs_event(include_bytes!("../../../../events/sqs-fifo.json"));
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &quiet("t")).await;
    assert_eq!(failures(&response), ["fifo-a-2"]);
    let applied = handler.applied.lock().unwrap().clone();
    let group_a: Vec<_> = applied.iter().filter(|m| m.starts_with("fifo-a")).collect();
    assert_eq!(group_a, ["fifo-a-1", "fifo-a-3"], "a permanent failure holds nothing back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_is_bounded() {
    let handler = NeedsEventId { delay: Some(Duration::from_millis(20)), ..Default::default() };
    let mut event = sqs_event(include_bytes!("../../../../events/sqs-payment.json"));
    let template = event.records[0].clone();
    event.records = (0..25)
        .map(|i| {
            let mut m = template.clone();
            m.message_id = Some(format!("m-{i}"));
            m
        })
        .collect();
    let options = sqs::Options { concurrency: 4, ..quiet("t") };
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty());
    let max = handler.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=4).contains(&max), "max in flight {max}");
}

#[tokio::test]
async fn records_not_started_before_the_deadline_are_reported_failed() {
    let handler = NeedsEventId::default();
    let event = sqs_event(include_bytes!("../../../../events/sqs-batch-duplicates.json"));
    let mut context = Context::default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    context.deadline = now + 500; // less than the 1 s margin
    let response = sqs::process(&handler, LambdaEvent::new(event, context), &quiet("t")).await;
    assert_eq!(failures(&response), ["dup-msg-1", "dup-msg-2", "dup-msg-3", "dup-msg-4"]);
    assert!(handler.seen.lock().unwrap().is_empty(), "nothing started, nothing lost");
}

/// Keys each message by its body (`-` for none); tracks, per key, the records in flight, and
/// fails the given message ids retryably.
#[derive(Default)]
struct Keyed {
    in_flight: Mutex<std::collections::HashMap<String, usize>>,
    same_key_overlap: AtomicUsize,
    all_in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    fail: Vec<&'static str>,
    handled: Mutex<Vec<String>>,
}

impl effectively_once_lambda::Handler<SqsMessage> for Keyed {
    async fn handle(&self, message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let key = message.body.clone().unwrap();
        let id = message.message_id.clone().unwrap();
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            let same = in_flight.entry(key.clone()).or_default();
            if *same > 0 && key != "-" {
                self.same_key_overlap.fetch_add(1, Ordering::SeqCst);
            }
            *same += 1;
        }
        let now = self.all_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.all_in_flight.fetch_sub(1, Ordering::SeqCst);
        *self.in_flight.lock().unwrap().get_mut(&key).unwrap() -= 1;
        self.handled.lock().unwrap().push(id.clone());
        if self.fail.contains(&id.as_str()) {
            return Err(RecordError::retryable("ledger throttled"));
        }
        Ok(Handled::Applied)
    }

    fn key(&self, message: &SqsMessage) -> Option<String> {
        message.body.clone().filter(|body| body != "-")
    }
}

/// Standard-queue messages `m-0` .. with the given bodies (the keys of [`Keyed`]).
fn keyed_event(bodies: &[&str]) -> SqsEvent {
    let mut event = sqs_event(include_bytes!("../../../../events/sqs-payment.json"));
    let template = event.records[0].clone();
    event.records = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let mut m = template.clone();
            m.message_id = Some(format!("m-{i}"));
            m.body = Some((*body).to_owned());
            m
        })
        .collect();
    event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_key_records_of_a_standard_batch_run_one_after_the_other() {
    let handler = Keyed::default();
    let event = keyed_event(&["dup", "a", "-", "b", "dup", "c", "-", "d", "dup", "e"]);
    let options = sqs::Options { concurrency: 10, ..quiet("t") };
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty(), "all succeed");
    assert_eq!(handler.same_key_overlap.load(Ordering::SeqCst), 0, "equal keys never overlap");
    let max = handler.max_in_flight.load(Ordering::SeqCst);
    assert!(max > 1, "different keys still overlap: max in flight {max}");
    let handled = handler.handled.lock().unwrap().clone();
    assert_eq!(handled.len(), 10);
    let dups: Vec<_> = handled.iter().filter(|m| ["m-0", "m-4", "m-8"].contains(&m.as_str())).collect();
    assert_eq!(dups, ["m-0", "m-4", "m-8"], "in batch order");
}

/// Keys like [`Keyed`], but `key` panics on the body `boom` (the user's code).
struct PanickingKey(Keyed);

impl effectively_once_lambda::Handler<SqsMessage> for PanickingKey {
    async fn handle(&self, message: &SqsMessage, context: &effectively_once_lambda::events::Context) -> RecordResult {
        self.0.handle(message, context).await
    }

    fn key(&self, message: &SqsMessage) -> Option<String> {
        assert_ne!(message.body.as_deref(), Some("boom"), "key panicked");
        self.0.key(message)
    }
}

#[tokio::test]
async fn a_panicking_key_leaves_its_record_alone_and_the_batch_goes_on() {
    let handler = PanickingKey(Keyed::default());
    let event = keyed_event(&["dup", "boom", "dup", "a"]);
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &quiet("t")).await;
    assert!(response.batch_item_failures.is_empty(), "every record handled: {:?}", failures(&response));
    assert_eq!(handler.0.handled.lock().unwrap().len(), 4);
    assert_eq!(handler.0.same_key_overlap.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_same_key_failure_holds_nothing_back_on_a_standard_queue() {
    let handler = Keyed { fail: vec!["m-0"], ..Default::default() };
    let event = keyed_event(&["dup", "a", "dup"]);
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &quiet("t")).await;
    assert_eq!(failures(&response), ["m-0"], "each reported per its own result");
    let handled = handler.handled.lock().unwrap().clone();
    let dups: Vec<_> = handled.iter().filter(|m| *m != "m-1").collect();
    assert_eq!(dups, ["m-0", "m-2"], "the second copy is still attempted, after the first");

    // The second copy failing too is reported too.
    let handler = Keyed { fail: vec!["m-0", "m-2"], ..Default::default() };
    let event = keyed_event(&["dup", "a", "dup"]);
    let response = sqs::process(&handler, LambdaEvent::new(event, Context::default()), &quiet("t")).await;
    assert_eq!(failures(&response), ["m-0", "m-2"]);
}
