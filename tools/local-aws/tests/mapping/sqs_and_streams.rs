//! The event source mapping emulator against Lambda's documented behaviour, with functions that
//! give the odd answers real ones give: bad item identifiers, errors, malformed payloads, a FIFO
//! group acknowledged out of order, stream batches that keep failing, records too old. Each test
//! reads the effect where Lambda leaves it: messages back on the queue with their receive
//! counts, in the DLQ, invocation records in the on-failure queue, and the stream checkpoint as
//! the next batch the function is handed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_lambda::{Handled, RecordError, RecordResult};
use local::esm::{self, SqsMapping, StreamMapping};
use local::invoke::{Http, InProcess, SqsFunction, StreamFunction};
use local::resources::Clients;

use crate::support::{self, Resources};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---------------------------------------------------------------------------------------------
// SQS

/// A plain queue of its own, holding `bodies`.
async fn queue_with(clients: &Clients, bodies: &[&str]) -> String {
    let url = clients
        .sqs
        .create_queue()
        .queue_name(unique_name("esm-sqs"))
        .send()
        .await
        .expect("create queue")
        .queue_url()
        .unwrap()
        .to_owned();
    for body in bodies {
        clients.sqs.send_message().queue_url(&url).message_body(*body).send().await.expect("send");
    }
    url
}

/// The mapping, with failed messages visible again at once (no waiting for a timeout).
fn mapping(queue_url: &str) -> SqsMapping {
    let mut mapping = SqsMapping::new(queue_url);
    mapping.visibility_timeout = 0;
    mapping
}

/// Every message left on a queue, as (body, receive count including this look), sorted.
async fn remaining(clients: &Clients, url: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    loop {
        let got = clients
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .expect("receive");
        if got.messages().is_empty() {
            break;
        }
        for m in got.messages() {
            let count = m
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            out.push((m.body().unwrap_or_default().to_owned(), count));
        }
    }
    out.sort();
    out
}

type SqsAnswer = fn(&SqsEvent) -> local::Result<SqsBatchResponse>;

/// A function that answers every batch with `answer`, and counts what it was handed.
struct SqsScript {
    answer: SqsAnswer,
    seen: Mutex<Vec<String>>,
}

impl SqsScript {
    fn new(answer: SqsAnswer) -> Self {
        SqsScript { answer, seen: Mutex::default() }
    }

    fn seen(&self, body: &str) -> usize {
        self.seen.lock().unwrap().iter().filter(|b| *b == body).count()
    }
}

impl SqsFunction for SqsScript {
    async fn invoke(&self, event: SqsEvent) -> local::Result<SqsBatchResponse> {
        self.seen.lock().unwrap().extend(event.records.iter().map(|m| m.body.clone().unwrap_or_default()));
        (self.answer)(&event)
    }
}

fn failing(ids: &[&str]) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for id in ids {
        let mut f = BatchItemFailure::default();
        f.item_identifier = (*id).to_owned();
        response.batch_item_failures.push(f);
    }
    response
}

fn back(bodies: &[&str], count: u32) -> Vec<(String, u32)> {
    let mut v: Vec<_> = bodies.iter().map(|b| (b.to_string(), count)).collect();
    v.sort();
    v
}

/// One poll with `function`; then what is back on the queue, with its receive counts.
async fn one_poll<F: SqsFunction>(function: &F) -> (esm::SqsPoll, Vec<(String, u32)>) {
    let clients = Clients::local().await;
    let url = queue_with(&clients, &["m1", "m2", "m3"]).await;
    let poll = esm::poll_sqs(&clients, &mapping(&url), function).await.expect("poll");
    assert_eq!(poll.received, 3, "one batch of three");
    (poll, remaining(&clients, &url).await)
}

#[tokio::test]
async fn an_unknown_item_identifier_fails_the_whole_batch() {
    let (poll, left) = one_poll(&SqsScript::new(|_| Ok(failing(&["not-a-message-of-this-batch"])))).await;
    assert_eq!((poll.failed, poll.failed_batches), (3, 1));
    assert_eq!(left, back(&["m1", "m2", "m3"], 2), "nothing deleted: every message returns, received once more");
}

#[tokio::test]
async fn an_empty_item_identifier_fails_the_whole_batch() {
    // One real failure beside the empty one: the empty one still fails everything.
    let (poll, left) =
        one_poll(&SqsScript::new(|event| Ok(failing(&[event.records[0].message_id.as_deref().unwrap(), ""])))).await;
    assert_eq!((poll.failed, poll.failed_batches), (3, 1));
    assert_eq!(left, back(&["m1", "m2", "m3"], 2));
}

#[tokio::test]
async fn an_invocation_error_fails_the_whole_batch() {
    let (poll, left) = one_poll(&SqsScript::new(|_| Err("Unhandled: the function threw".into()))).await;
    assert_eq!((poll.failed, poll.failed_batches), (3, 1));
    assert_eq!(left, back(&["m1", "m2", "m3"], 2));
}

#[tokio::test]
async fn an_empty_failure_list_is_success() {
    let (poll, left) = one_poll(&SqsScript::new(|_| Ok(SqsBatchResponse::default()))).await;
    assert_eq!((poll.failed, poll.failed_batches), (0, 0));
    assert_eq!(left, vec![], "all deleted");
}

#[tokio::test]
async fn only_the_named_messages_return() {
    let (poll, left) = one_poll(&SqsScript::new(|event| {
        let m2 = event.records.iter().find(|m| m.body.as_deref() == Some("m2")).unwrap();
        Ok(failing(&[m2.message_id.as_deref().unwrap()]))
    }))
    .await;
    assert_eq!((poll.failed, poll.failed_batches), (1, 0));
    assert_eq!(left, back(&["m2"], 2));
}

#[tokio::test]
async fn without_report_batch_item_failures_the_answer_is_not_read() {
    // The default turns ReportBatchItemFailures on; a mapping without it deletes the whole batch
    // on any answer that is not an error, failures named or not.
    let clients = Clients::local().await;
    let url = queue_with(&clients, &["m1", "m2", "m3"]).await;
    let mut sqs = mapping(&url);
    assert!(sqs.report_batch_item_failures, "the default FunctionResponseTypes");
    sqs.report_batch_item_failures = false;
    let function = SqsScript::new(|event| Ok(failing(&[event.records[0].message_id.as_deref().unwrap()])));
    let poll = esm::poll_sqs(&clients, &sqs, &function).await.unwrap();
    assert_eq!((poll.received, poll.failed), (3, 0));
    assert_eq!(remaining(&clients, &url).await, vec![]);
}

#[tokio::test]
async fn a_bad_answer_every_time_sends_the_whole_batch_to_the_dlq() {
    let clients = Clients::local().await;
    let r = support::up(&clients, &unique_name("esm-dlq")).await;
    for body in ["d1", "d2", "d3"] {
        clients.sqs.send_message().queue_url(&r.queue_url).message_body(body).send().await.unwrap();
    }
    let function = SqsScript::new(|_| Ok(failing(&[""])));
    let sqs = mapping(&r.queue_url);
    for _ in 0..=r.max_receive_count {
        esm::poll_sqs(&clients, &sqs, &function).await.unwrap();
    }
    for body in ["d1", "d2", "d3"] {
        assert_eq!(function.seen(body), r.max_receive_count as usize, "{body}: delivered maxReceiveCount times");
    }
    assert_eq!(remaining(&clients, &r.queue_url).await, vec![]);
    let dlq: Vec<String> = remaining(&clients, &r.dlq_url).await.into_iter().map(|(b, _)| b).collect();
    assert_eq!(dlq, vec!["d1", "d2", "d3"], "innocent messages too: the answer failed them all");
}

/// A function behind a local invoke endpoint (as `cargo lambda watch` serves one) that answers
/// each invocation with the raw payload `answer` makes of the batch's message ids.
async fn endpoint(answer: fn(&[String]) -> String) -> Http {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            let body = loop {
                let n = socket.read(&mut chunk).await.unwrap_or(0);
                request.extend_from_slice(&chunk[..n]);
                let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if request.len() >= end + 4 + length || n == 0 {
                    break request[end + 4..].to_vec();
                }
            };
            let event: Value = serde_json::from_slice(&body).unwrap_or_default();
            let ids: Vec<String> = event["Records"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["messageId"].as_str().map(str::to_owned))
                .collect();
            let out = answer(&ids);
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
                out.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    Http { url, function: "payments".into() }
}

#[tokio::test]
async fn null_and_empty_answers_are_success() {
    let answers: [fn(&[String]) -> String; 4] = [
        |_| "null".into(),
        |_| "{}".into(),
        |_| r#"{"batchItemFailures": null}"#.into(),
        |_| r#"{"batchItemFailures": []}"#.into(),
    ];
    for answer in answers {
        let function = endpoint(answer).await;
        let (poll, left) = one_poll(&function).await;
        assert_eq!((poll.failed, poll.failed_batches), (0, 0), "{}", answer(&[]));
        assert_eq!(left, vec![], "{}: all deleted", answer(&[]));
    }
}

#[tokio::test]
async fn a_malformed_answer_fails_the_whole_batch() {
    let answers: [fn(&[String]) -> String; 5] = [
        |_| "not json".into(),
        |_| r#""done""#.into(),
        |_| r#"{"batchItemFailures": "m1"}"#.into(),
        |_| r#"{"batchItemFailures": [{"itemIdentifier": null}]}"#.into(),
        // The right id under a misspelt key: Lambda does not guess.
        |ids| format!(r#"{{"batchItemFailures": [{{"itemIdentifer": "{}"}}]}}"#, ids[0]),
    ];
    for answer in answers {
        let function = endpoint(answer).await;
        let (poll, left) = one_poll(&function).await;
        let shown = answer(&["<id>".into()]);
        assert_eq!((poll.failed, poll.failed_batches), (3, 1), "{shown}");
        assert_eq!(left, back(&["m1", "m2", "m3"], 2), "{shown}: every message returns");
    }
}

// ---------------------------------------------------------------------------------------------
// SQS FIFO

async fn fifo_with(clients: &Clients, messages: &[(&str, &str)]) -> String {
    let url = clients
        .sqs
        .create_queue()
        .queue_name(format!("{}.fifo", unique_name("esm-fifo")))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::ContentBasedDeduplication, "true")
        .send()
        .await
        .expect("create FIFO queue")
        .queue_url()
        .unwrap()
        .to_owned();
    for (group, body) in messages {
        clients.sqs.send_message().queue_url(&url).message_group_id(*group).message_body(*body).send().await.unwrap();
    }
    url
}

/// A handler that fails `A1`, and notes each body it handles.
#[derive(Default)]
struct Ordered {
    handled: Mutex<Vec<String>>,
}

impl effectively_once_lambda::Handler<SqsMessage> for Ordered {
    async fn handle(&self, message: &SqsMessage, _context: &effectively_once_lambda::events::Context) -> RecordResult {
        let body = message.body.clone().unwrap_or_default();
        self.handled.lock().unwrap().push(body.clone());
        if body == "A1" {
            return Err(RecordError::retryable("injected"));
        }
        Ok(Handled::Applied)
    }
}

#[tokio::test]
async fn fifo_a_group_stops_at_its_first_failure() {
    let clients = Clients::local().await;
    let url = fifo_with(&clients, &[("A", "A1"), ("A", "A2"), ("B", "B1")]).await;
    let function = InProcess::new(Ordered::default(), "t");
    let poll = esm::poll_sqs(&clients, &mapping(&url), &function).await.unwrap();
    assert_eq!((poll.received, poll.failed), (3, 2));
    let mut handled = function.handler().handled.lock().unwrap().clone();
    handled.sort();
    assert_eq!(handled, vec!["A1", "B1"], "A2 never ran: A1 before it in its group failed");
    // Both stay on the queue for a later delivery; B1, of another group, was acknowledged.
    // They are counted, not received: moto 5.2 redelivers a FIFO group out of order (A2 comes
    // back, A1 does not until its visibility is changed), so what comes next is not asserted.
    assert_eq!(esm::queue_depth(&clients, &url).await.unwrap(), 2);
}

#[tokio::test]
async fn fifo_the_mapping_deletes_what_the_answer_does_not_name() {
    // A function that reports A1 failed but not A2 behind it: Lambda does not repair the answer,
    // it deletes A2, and the group's order is lost. The emulator must not hide that bug.
    let clients = Clients::local().await;
    let url = fifo_with(&clients, &[("A", "A1"), ("A", "A2")]).await;
    let function = SqsScript::new(|event| {
        let a1 = event.records.iter().find(|m| m.body.as_deref() == Some("A1")).unwrap();
        Ok(failing(&[a1.message_id.as_deref().unwrap()]))
    });
    let poll = esm::poll_sqs(&clients, &mapping(&url), &function).await.unwrap();
    assert_eq!((poll.received, poll.failed), (2, 1));
    assert_eq!(remaining(&clients, &url).await, back(&["A1"], 2), "A2 was deleted");
}

// ---------------------------------------------------------------------------------------------
// DynamoDB Streams

async fn stream_setup() -> (Clients, Resources) {
    let clients = Clients::local().await;
    let r = support::up(&clients, &unique_name("esm-st")).await;
    (clients, r)
}

/// Inserts items `keys` into the table, one stream record each, in order.
async fn insert(clients: &Clients, r: &Resources, keys: &[&str]) {
    for key in keys {
        clients
            .dynamodb
            .put_item()
            .table_name(&r.table)
            .item("pk", AttributeValue::S((*key).to_owned()))
            .send()
            .await
            .expect("put");
    }
}

/// A stream function answering call `n` (from 0) on a batch of (key, sequence number) pairs.
type StreamScript = support::Script<DynamoDbEventResponse>;

impl StreamFunction for StreamScript {
    async fn invoke(&self, event: Event) -> local::Result<DynamoDbEventResponse> {
        let batch: Vec<(String, String)> = event
            .records
            .iter()
            .map(|r| {
                let keys = serde_json::to_value(&r.change.keys).unwrap();
                let key = keys["pk"]["S"].as_str().unwrap_or_default().to_owned();
                (key, r.change.sequence_number.clone().unwrap_or_default())
            })
            .collect();
        self.call(batch)
    }
}

fn stream_failing(ids: &[Option<&str>]) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    for id in ids {
        let mut f = DynamoDbBatchItemFailure::default();
        f.item_identifier = id.map(str::to_owned);
        response.batch_item_failures.push(f);
    }
    response
}

fn seq_of<'a>(batch: &'a [(String, String)], key: &str) -> &'a str {
    &batch.iter().find(|(k, _)| k == key).expect("key in batch").1
}

/// Polls until a poll delivers nothing.
async fn drain<F: StreamFunction>(clients: &Clients, stream: &mut StreamMapping, function: &F) {
    for _ in 0..50 {
        if esm::poll_stream(clients, stream, function).await.unwrap().delivered == 0 {
            return;
        }
    }
    panic!("the stream never settled");
}

fn keys(lists: &[&[&str]]) -> Vec<Vec<String>> {
    lists.iter().map(|l| l.iter().map(|k| k.to_string()).collect()).collect()
}

/// The invocation records in the on-failure queue.
async fn failure_records(clients: &Clients, r: &Resources) -> Vec<Value> {
    esm::peek_bodies(clients, &r.failures_url)
        .await
        .unwrap()
        .iter()
        .map(|b| serde_json::from_str(b).expect("invocation record is JSON"))
        .collect()
}

#[tokio::test]
async fn stream_retries_stop_at_the_maximum_and_the_rest_of_the_batch_goes_to_the_failure_queue() {
    let (clients, r) = stream_setup().await;
    insert(&clients, &r, &["r1", "r2", "r3"]).await;
    let seqs = Mutex::new(HashMap::new());
    let function = StreamScript::new(move |_, batch| {
        let mut seqs = seqs.lock().unwrap();
        seqs.extend(batch.iter().cloned());
        // r2 fails every time; r1 succeeds.
        Ok(stream_failing(&[Some(seqs.get("r2").unwrap().as_str())]))
    });
    let mut stream = StreamMapping::new(&r.table, Some(r.failures_url.clone()));
    // The default retries until the record age limit (-1); a finite MaximumRetryAttempts, as
    // another mapping may set, is what this test is about.
    stream.max_retries = 5;
    drain(&clients, &mut stream, &function).await;
    let calls = function.calls();
    // The first invocation, then five retries of what remains from the checkpoint at r2.
    let mut expected = keys(&[&["r1", "r2", "r3"]]);
    expected.extend(std::iter::repeat_n(vec!["r2".to_string(), "r3".to_string()], 5));
    assert_eq!(calls, expected);
    let records = failure_records(&clients, &r).await;
    assert_eq!(records.len(), 1, "one record for the discarded batch");
    let record = &records[0];
    assert_eq!(record["requestContext"]["condition"], "RetryAttemptsExhausted");
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 6);
    assert_eq!(record["version"], "1.0");
    let info = &record["DDBStreamBatchInfo"];
    assert_eq!(info["batchSize"], 2, "r2 and r3 behind it: r1 was checkpointed");
    assert!(info["shardId"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(info["streamArn"].as_str().is_some_and(|s| s.contains(&r.table)));
    assert!(info["approximateArrivalOfFirstRecord"].as_str().is_some_and(|s| s.ends_with('Z')));
    // The checkpoint is past the discarded batch: a new record is delivered alone.
    insert(&clients, &r, &["r4"]).await;
    drain(&clients, &mut stream, &function).await;
    assert_eq!(function.calls().last().unwrap(), &vec!["r4".to_string()]);
    let (start, end) = (info["startSequenceNumber"].as_str().unwrap(), info["endSequenceNumber"].as_str().unwrap());
    assert!(start < end || start.len() < end.len(), "r2 to r3");
}

#[tokio::test]
async fn stream_records_older_than_the_maximum_age_are_discarded_unseen() {
    let (clients, r) = stream_setup().await;
    insert(&clients, &r, &["old1", "old2"]).await;
    let function = StreamScript::new(|_, _| Ok(DynamoDbEventResponse::default()));
    let mut stream = StreamMapping::new(&r.table, Some(r.failures_url.clone()));
    assert_eq!(stream.max_record_age_seconds, Some(21_600), "the default MaximumRecordAgeInSeconds");
    // Six hours and a little later, by the mapping's clock: past the age limit, inside the
    // stream's 24 h retention.
    stream.clock = || SystemTime::now() + Duration::from_secs(21_600 + 60);
    let poll = esm::poll_stream(&clients, &mut stream, &function).await.unwrap();
    assert_eq!((poll.delivered, poll.given_up), (0, 2));
    assert!(function.calls().is_empty(), "never handed to the function");
    let records = failure_records(&clients, &r).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["requestContext"]["condition"], "RecordAgeExceeded");
    assert_eq!(records[0]["requestContext"]["approximateInvokeCount"], 0);
    assert_eq!(records[0]["DDBStreamBatchInfo"]["batchSize"], 2);
    // Back to the present: the checkpoint is past them, and a fresh record goes through.
    stream.clock = SystemTime::now;
    insert(&clients, &r, &["new"]).await;
    drain(&clients, &mut stream, &function).await;
    assert_eq!(function.calls(), keys(&[&["new"]]));
}

/// DynamoDB Streams keeps a record 24 h. Past that, by the emulator's clock, it is trimmed:
/// unreadable by the mapping (nothing is delivered, and nothing is left to discard) and by a
/// replay of the on-failure destination, whose invocation record then names sequence numbers no
/// read reaches and stays in the destination. The default record age (6 h) discards a batch
/// while it can still be replayed.
#[tokio::test]
async fn stream_records_past_the_retention_are_trimmed_for_the_mapping_and_for_a_replay() {
    let (clients, r) = stream_setup().await;
    insert(&clients, &r, &["r1", "r2"]).await;
    let function = StreamScript::new(|_, _| Ok(DynamoDbEventResponse::default()));
    let mut stream = StreamMapping::new(&r.table, Some(r.failures_url.clone()));
    stream.clock = || SystemTime::now() + Duration::from_secs(21_600 + 60);
    let poll = esm::poll_stream(&clients, &mut stream, &function).await.unwrap();
    assert_eq!((poll.delivered, poll.given_up), (0, 2), "past the age limit: discarded, not yet trimmed");
    // A day and a little later: the discarded records are trimmed, as is everything a new
    // mapping would read from the start of the stream.
    stream.clock = || SystemTime::now() + Duration::from_secs(86_400 + 60);
    let replayed = esm::replay_stream_failures(&clients, &stream, &function).await.unwrap();
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (0, 0, 1), "nothing left to replay");
    let mut fresh = StreamMapping::new(&r.table, None);
    fresh.clock = stream.clock;
    fresh.max_record_age_seconds = None;
    let poll = esm::poll_stream(&clients, &mut fresh, &function).await.unwrap();
    assert_eq!((poll.delivered, poll.given_up), (0, 0), "trimmed records are neither read nor discarded");
    assert!(function.calls().is_empty());
    // The same records, by a clock inside the retention, replay.
    stream.clock = SystemTime::now;
    let replayed = esm::replay_stream_failures(&clients, &stream, &function).await.unwrap();
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (1, 2, 0));
}

/// The default `MaximumRetryAttempts` is -1, as Lambda's: "The default value is -1, which sets the maximum
/// number of retries to infinite. When MaximumRetryAttempts is infinite, Lambda retries failed
/// records until the record expires in the event source"
/// (<https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html>). A record that keeps
/// failing (SES paused) holds the shard past any count and is delivered once the fault clears;
/// one that never clears is discarded when older than `MaximumRecordAgeInSeconds`, not before.
#[tokio::test]
async fn stream_retries_without_limit_hold_the_shard_until_the_fault_clears_or_the_record_ages_out() {
    let (clients, r) = stream_setup().await;
    insert(&clients, &r, &["r1", "r2"]).await;
    let held = std::sync::Arc::new(Mutex::new(vec!["r1".to_string()]));
    let failing = held.clone();
    // Each batch fails at its first held record, as the relay does while SES is paused.
    let function = StreamScript::new(move |_, batch| {
        let held = failing.lock().unwrap();
        Ok(match batch.iter().find(|(k, _)| held.contains(k)) {
            Some((_, seq)) => stream_failing(&[Some(seq.as_str())]),
            None => DynamoDbEventResponse::default(),
        })
    });
    let mut stream = StreamMapping::new(&r.table, Some(r.failures_url.clone()));
    assert_eq!(stream.max_retries, u32::MAX, "the default -1");
    for _ in 0..20 {
        esm::poll_stream(&clients, &mut stream, &function).await.unwrap();
    }
    assert_eq!(function.calls(), vec![vec!["r1".to_string(), "r2".to_string()]; 20], "held at r1, 20 times");
    assert!(failure_records(&clients, &r).await.is_empty(), "nothing given up while the records are young");
    // The fault clears: both are delivered, nothing was lost.
    held.lock().unwrap().clear();
    drain(&clients, &mut stream, &function).await;
    assert_eq!(function.calls()[20], vec!["r1".to_string(), "r2".to_string()]);
    assert!(failure_records(&clients, &r).await.is_empty());
    // A fault that never clears: held until the record is older than the limit, then discarded.
    held.lock().unwrap().push("r3".into());
    insert(&clients, &r, &["r3"]).await;
    for _ in 0..10 {
        esm::poll_stream(&clients, &mut stream, &function).await.unwrap();
    }
    assert!(failure_records(&clients, &r).await.is_empty());
    stream.clock = || SystemTime::now() + Duration::from_secs(21_600 + 60);
    let poll = esm::poll_stream(&clients, &mut stream, &function).await.unwrap();
    assert_eq!((poll.delivered, poll.given_up), (0, 1));
    let records = failure_records(&clients, &r).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["requestContext"]["condition"], "RecordAgeExceeded");
    assert_eq!(records[0]["requestContext"]["approximateInvokeCount"], 10);
    assert_eq!(records[0]["DDBStreamBatchInfo"]["batchSize"], 1);
}

#[tokio::test]
async fn stream_bisection_isolates_the_failing_record_without_spending_retries() {
    let (clients, r) = stream_setup().await;
    insert(&clients, &r, &["r1", "r2", "r3", "r4"]).await;
    // A function error (it throws) whenever r3 is in the batch.
    let function = StreamScript::new(|_, batch| {
        if batch.iter().any(|(k, _)| k == "r3") {
            Err("Unhandled".into())
        } else {
            Ok(DynamoDbEventResponse::default())
        }
    });
    let mut stream = StreamMapping::new(&r.table, Some(r.failures_url.clone()));
    assert!(stream.bisect_on_error, "the default BisectBatchOnFunctionError");
    stream.max_retries = 5; // finite, so that the retries are seen to be spared
    drain(&clients, &mut stream, &function).await;
    let mut expected = keys(&[&["r1", "r2", "r3", "r4"], &["r1", "r2"], &["r3", "r4"]]);
    // Alone, r3 still has its first attempt and all five retries: the splits cost none.
    expected.extend(std::iter::repeat_n(vec!["r3".to_string()], 6));
    expected.push(vec!["r4".to_string()]);
    assert_eq!(function.calls(), expected);
    let records = failure_records(&clients, &r).await;
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record["requestContext"]["condition"], "RetryAttemptsExhausted");
    assert_eq!(record["responseContext"]["functionError"], "Unhandled");
    assert_eq!(record["DDBStreamBatchInfo"]["batchSize"], 1, "r3 alone");
    assert_eq!(record["DDBStreamBatchInfo"]["startSequenceNumber"], record["DDBStreamBatchInfo"]["endSequenceNumber"]);
}

#[tokio::test]
async fn stream_checkpoint_is_the_lowest_failed_sequence_number() {
    let (clients, r) = stream_setup().await;
    insert(&clients, &r, &["r1", "r2", "r3", "r4"]).await;
    // The first answer names r4, then r2 (not in order); later ones succeed.
    let function = StreamScript::new(|n, batch| match n {
        0 => Ok(stream_failing(&[Some(seq_of(batch, "r4")), Some(seq_of(batch, "r2"))])),
        _ => Ok(DynamoDbEventResponse::default()),
    });
    let mut stream = StreamMapping::new(&r.table, Some(r.failures_url.clone()));
    drain(&clients, &mut stream, &function).await;
    assert_eq!(function.calls(), keys(&[&["r1", "r2", "r3", "r4"], &["r2", "r3", "r4"]]), "resumed at r2");
    assert!(failure_records(&clients, &r).await.is_empty());
}

#[tokio::test]
async fn stream_unknown_or_empty_item_identifiers_fail_the_whole_batch() {
    let (clients, r) = stream_setup().await;
    insert(&clients, &r, &["r1", "r2"]).await;
    let function = StreamScript::new(|n, _| match n {
        // A sequence number from no batch: the whole batch failed, so it is bisected.
        0 => Ok(stream_failing(&[Some("4242")])),
        // An empty, then a null identifier: r1 alone fails again, twice.
        1 => Ok(stream_failing(&[Some("")])),
        2 => Ok(stream_failing(&[None])),
        _ => Ok(DynamoDbEventResponse::default()),
    });
    let mut stream = StreamMapping::new(&r.table, Some(r.failures_url.clone()));
    drain(&clients, &mut stream, &function).await;
    assert_eq!(function.calls(), keys(&[&["r1", "r2"], &["r1"], &["r1"], &["r1"], &["r2"]]));
    assert!(failure_records(&clients, &r).await.is_empty(), "within the retries: nothing discarded");
}

#[tokio::test]
async fn stream_without_bisection_a_failed_batch_is_retried_whole() {
    let (clients, r) = stream_setup().await;
    insert(&clients, &r, &["r1", "r2"]).await;
    let function =
        StreamScript::new(|n, _| if n == 0 { Ok(stream_failing(&[Some("")])) } else { Ok(Default::default()) });
    let mut stream = StreamMapping::new(&r.table, Some(r.failures_url.clone()));
    stream.bisect_on_error = false;
    drain(&clients, &mut stream, &function).await;
    assert_eq!(function.calls(), keys(&[&["r1", "r2"], &["r1", "r2"]]));
}

#[tokio::test]
async fn stream_replaying_the_failure_queue_delivers_the_discarded_records_and_empties_it() {
    let (clients, r) = stream_setup().await;
    insert(&clients, &r, &["r1", "r2", "r3"]).await;
    // r2 fails until the fix; the mapping gives up on it (and r3 behind it) after one retry.
    let broken = StreamScript::new(|_, batch| {
        Ok(match batch.iter().find(|(k, _)| k == "r2") {
            Some((_, seq)) => stream_failing(&[Some(seq.as_str())]),
            None => DynamoDbEventResponse::default(),
        })
    });
    let mut stream = StreamMapping::new(&r.table, Some(r.failures_url.clone()));
    stream.max_retries = 1;
    drain(&clients, &mut stream, &broken).await;
    assert_eq!(failure_records(&clients, &r).await.len(), 1);
    let still_broken = esm::replay_stream_failures(&clients, &stream, &broken).await.unwrap();
    assert_eq!((still_broken.batches, still_broken.kept), (0, 1), "kept while r2 still fails");
    let fixed = StreamScript::new(|_, _| Ok(DynamoDbEventResponse::default()));
    let replayed = esm::replay_stream_failures(&clients, &stream, &fixed).await.unwrap();
    assert_eq!((replayed.batches, replayed.records, replayed.kept), (1, 2, 0));
    assert_eq!(fixed.calls(), keys(&[&["r2", "r3"]]), "the discarded records, fetched by sequence number");
    assert!(failure_records(&clients, &r).await.is_empty(), "the destination is empty");
}
