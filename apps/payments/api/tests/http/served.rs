//! The payments API over real HTTP: the handler served in process on `127.0.0.1:0`
//! (`local::api`, which hands it the Function URL event Lambda would), against the local AWS's
//! idempotency table and payments queue, and the payments consumer draining that queue.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::DynamoDbStore;
use local::api::{post, Reply, Server};
use local::esm::queue_depth;
use local::proxy::{Fault, Proxy, ScriptedFaults};
use payments::PaymentEvent;
use payments_api::{Api, EnqueueError, Queue, SqsQueue};
use payments_local::{Clients, Pipeline};
use tokio::sync::Notify;

const TIMEOUT: Duration = Duration::from_secs(30);

fn body(account: &str, cents: i64) -> String {
    format!(r#"{{"account_id": "{account}", "amount_cents": {cents}, "currency": "USD"}}"#)
}

/// A pipeline of its own (tables and queues named for this test).
async fn pipeline() -> Pipeline {
    Pipeline::up(Clients::local().await, &unique_name("api")).await.unwrap()
}

/// The API on the pipeline's idempotency table, sending to `queue`, served over HTTP.
async fn serve<Q: Queue + 'static>(pipeline: &Pipeline, queue: Q) -> Server {
    let store = DynamoDbStore::new(pipeline.clients.dynamodb.clone(), &pipeline.resources.idempotency_table);
    // A 2 s lease: a send whose outcome is unknown holds its key that long (on Lambda, until
    // the invocation's deadline), so the tests' retries after it wait seconds, not minutes.
    let config = Config::default().with_lease(std::time::Duration::from_secs(2));
    let api = Arc::new(Api::new(Idempotency::new(store, config), queue));
    local::api::serve(move |request| {
        let api = api.clone();
        async move { api.handle(request).await }
    })
    .await
    .unwrap()
}

fn sqs(pipeline: &Pipeline) -> SqsQueue {
    SqsQueue::new(pipeline.clients.sqs.clone(), &pipeline.resources.queue_url, false)
}

async fn pay(server: &Server, key: Option<&str>, body: &str) -> Reply {
    post(&server.addr().to_string(), "/payments", key, body, TIMEOUT).await.unwrap()
}

async fn depth(pipeline: &Pipeline) -> u64 {
    queue_depth(&pipeline.clients, &pipeline.resources.queue_url).await.unwrap()
}

/// The payments consumer drains the queue; then the ledger's entries for `account`.
async fn drain_and_count_entries(pipeline: &Pipeline, account: &str) -> usize {
    let mut esm = pipeline.emulator(pipeline.payments(), pipeline.relay());
    esm.run_until_drained(&pipeline.clients, |_| {}).await.unwrap();
    let out = pipeline
        .clients
        .dynamodb
        .query()
        .table_name(&pipeline.resources.ledger_table)
        .key_condition_expression("pk = :pk AND begins_with(sk, :entry)")
        .expression_attribute_values(":pk", AttributeValue::S(format!("account#{account}")))
        .expression_attribute_values(":entry", AttributeValue::S("entry#".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.items().len()
}

fn assert_error(reply: &Reply, status: u16, code: &str) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(reply.body["error"], code, "{reply:?}");
    assert!(reply.body["message"].is_string(), "{reply:?}");
    assert_eq!(reply.body.as_object().unwrap().len(), 2, "exactly error and message: {reply:?}");
}

#[tokio::test]
async fn first_request_replay_key_reuse_and_refusals() {
    let pipeline = pipeline().await;
    let server = serve(&pipeline, sqs(&pipeline)).await;
    let key = unique_name("pay");
    let first = pay(&server, Some(&key), &body("acct_http", 1250)).await;
    assert_eq!(first.status, 202, "{first:?}");
    assert_eq!(first.body, serde_json::json!({ "event_id": key }));
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(depth(&pipeline).await, 1, "enqueued before the answer");

    // Same key, same body (re-serialised: other key order, 1250.0): the stored answer again.
    let resent = r#"{"currency": "USD", "amount_cents": 1250.0, "account_id": "acct_http"}"#;
    let replay = pay(&server, Some(&key), resent).await;
    assert_eq!((replay.status, &replay.body), (202, &first.body));
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));

    assert_error(&pay(&server, Some(&key), &body("acct_http", 9999)).await, 422, "idempotency_key_reused");

    let missing = pay(&server, None, &body("acct_http", 1250)).await;
    assert_error(&missing, 400, "invalid_idempotency_key");
    assert!(missing.body["message"].as_str().unwrap().starts_with("Idempotency-Key:"));
    let bad_key = pay(&server, Some("pay 1"), &body("acct_http", 1250)).await;
    assert_error(&bad_key, 400, "invalid_idempotency_key");
    let zero = pay(&server, Some(&unique_name("pay")), &body("acct_http", 0)).await;
    assert_error(&zero, 400, "invalid_body");
    assert_eq!(zero.body["message"], "amount_cents: must not be zero");
    let no_currency = pay(&server, Some(&unique_name("pay")), r#"{"account_id": "a", "amount_cents": 5}"#).await;
    assert!(no_currency.body["message"].as_str().unwrap().starts_with("currency:"), "{no_currency:?}");
    assert_error(&pay(&server, Some(&unique_name("pay")), "not json").await, 400, "invalid_body");

    assert_eq!(depth(&pipeline).await, 1, "nothing but the first request was enqueued");
    assert_eq!(drain_and_count_entries(&pipeline, "acct_http").await, 1);
    pipeline.down().await.unwrap();
}

/// A queue that waits, once sent to, until the test lets it go on.
struct Gated {
    inner: SqsQueue,
    entered: Notify,
    release: Notify,
}

impl Queue for Gated {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        self.entered.notify_one();
        self.release.notified().await;
        self.inner.send(event).await
    }
}

#[tokio::test]
async fn a_retry_while_the_first_is_in_flight_is_409_with_retry_after() {
    let pipeline = pipeline().await;
    let gate = Arc::new(Gated { inner: sqs(&pipeline), entered: Notify::new(), release: Notify::new() });
    let server = Arc::new(serve(&pipeline, gate.clone()).await);
    let key = unique_name("pay");
    let first = tokio::spawn({
        let (server, key) = (server.clone(), key.clone());
        async move { pay(&server, Some(&key), &body("acct_busy", 700)).await }
    });
    gate.entered.notified().await;
    let busy = pay(&server, Some(&key), &body("acct_busy", 700)).await;
    assert_error(&busy, 409, "request_in_progress");
    let retry_after: u64 = busy.header("retry-after").unwrap().parse().unwrap();
    // The lease: the default 15 minutes, as no invocation deadline bounds it here.
    assert!((1..=900).contains(&retry_after), "{retry_after}");
    assert_eq!(depth(&pipeline).await, 0, "the first is still sending");

    gate.release.notify_one();
    let first = first.await.unwrap();
    assert_eq!(first.status, 202, "{first:?}");
    let again = pay(&server, Some(&key), &body("acct_busy", 700)).await;
    assert_eq!((again.status, again.header("idempotent-replayed")), (202, Some("true")));
    assert_eq!(depth(&pipeline).await, 1);
    pipeline.down().await.unwrap();
}

#[tokio::test]
async fn concurrent_retries_of_one_key_enqueue_once_and_post_once() {
    let pipeline = pipeline().await;
    let server = Arc::new(serve(&pipeline, sqs(&pipeline)).await);
    let key = unique_name("pay");
    let clients = (0..8).map(|_| {
        let (server, key) = (server.clone(), key.clone());
        tokio::spawn(async move { pay(&server, Some(&key), &body("acct_race", 300)).await })
    });
    let replies: Vec<Reply> = futures_util::future::join_all(clients).await.into_iter().map(Result::unwrap).collect();
    let fresh = replies.iter().filter(|r| r.status == 202 && r.header("idempotent-replayed").is_none()).count();
    assert_eq!(fresh, 1, "one request enqueued: {replies:?}");
    for reply in &replies {
        match reply.status {
            202 => assert_eq!(reply.body["event_id"], key.as_str()),
            409 => assert!(reply.header("retry-after").is_some()),
            _ => panic!("unexpected answer {reply:?}"),
        }
    }
    assert_eq!(depth(&pipeline).await, 1, "one message on the queue");
    assert_eq!(drain_and_count_entries(&pipeline, "acct_race").await, 1, "one ledger entry");
    pipeline.down().await.unwrap();
}

/// SendMessage lands but its answer is lost (the fault proxy drops it; the SDK does not
/// retry): the client gets a 503, its retry sends again, two messages of one event are on the
/// queue, and the consumer posts it once.
#[tokio::test]
async fn a_lost_enqueue_answer_is_sent_again_and_posted_once() {
    let pipeline = pipeline().await;
    let rules = ScriptedFaults::new().then("amazonsqs:SendMessage", Fault::DropResponse);
    let proxy = Proxy::to_local_aws(Arc::new(rules)).await.unwrap();
    let sdk = proxy.sdk_config(aws_config::retry::RetryConfig::disabled()).await;
    let queue = SqsQueue::new(aws_sdk_sqs::Client::new(&sdk), &pipeline.resources.queue_url, false);
    let server = serve(&pipeline, queue).await;
    let key = unique_name("pay");

    let lost = pay(&server, Some(&key), &body("acct_lost", 4200)).await;
    assert_error(&lost, 503, "unavailable");
    let wait: u64 = lost.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&wait), "the key is held until the lease ends: {lost:?}");
    assert_eq!(proxy.injected().values().sum::<u64>(), 1, "{:?}", proxy.injected());
    assert_eq!(depth(&pipeline).await, 1, "the send landed");
    let held = pay(&server, Some(&key), &body("acct_lost", 4200)).await;
    assert_error(&held, 409, "request_in_progress");
    // Another body while the first is in flight: 409 (the record in progress may be a refusal
    // not stored yet, over the very body that is on the queue); after the lease, 422.
    let other = pay(&server, Some(&key), &body("acct_lost", 9999)).await;
    assert_error(&other, 409, "request_in_progress");

    // After the lease (the client honours Retry-After), the same body takes the key over.
    tokio::time::sleep(std::time::Duration::from_millis(wait * 1000 + 200)).await;
    let retry = pay(&server, Some(&key), &body("acct_lost", 4200)).await;
    assert_eq!((retry.status, retry.header("idempotent-replayed")), (202, None), "{retry:?}");
    assert_eq!(depth(&pipeline).await, 2, "sent again");
    let replay = pay(&server, Some(&key), &body("acct_lost", 4200)).await;
    assert_eq!((replay.status, replay.header("idempotent-replayed")), (202, Some("true")), "its 202 is stored");
    assert_eq!(depth(&pipeline).await, 2, "a replay sends nothing");
    let other = pay(&server, Some(&key), &body("acct_lost", 9999)).await;
    assert_error(&other, 422, "idempotency_key_reused");
    assert_eq!(drain_and_count_entries(&pipeline, "acct_lost").await, 1, "the consumer posts the event once");
    pipeline.down().await.unwrap();
}

/// On a FIFO queue the message carries the account as its group and the event id as its
/// deduplication id; a send whose answer was lost and is sent again is dropped by SQS itself.
#[tokio::test]
async fn a_fifo_queue_gets_the_account_as_group_and_the_event_id_as_deduplication_id() {
    use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};

    let pipeline = pipeline().await;
    let sqs_client = pipeline.clients.sqs.clone();
    let fifo = sqs_client
        .create_queue()
        .queue_name(format!("{}.fifo", unique_name("api")))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let rules = ScriptedFaults::new().then("amazonsqs:SendMessage", Fault::DropResponse);
    let proxy = Proxy::to_local_aws(Arc::new(rules)).await.unwrap();
    let sdk = proxy.sdk_config(aws_config::retry::RetryConfig::disabled()).await;
    let server = serve(&pipeline, SqsQueue::new(aws_sdk_sqs::Client::new(&sdk), &fifo, true)).await;
    let key = unique_name("pay");

    let lost = pay(&server, Some(&key), &body("acct_fifo", 800)).await;
    assert_error(&lost, 503, "unavailable");
    let wait: u64 = lost.header("retry-after").unwrap().parse().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(wait * 1000 + 200)).await;
    let retry = pay(&server, Some(&key), &body("acct_fifo", 800)).await;
    assert_eq!(retry.status, 202, "{retry:?}");

    let received = sqs_client
        .receive_message()
        .queue_url(&fifo)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let messages = received.messages();
    assert_eq!(messages.len(), 1, "SQS dropped the resend by its deduplication id: {messages:?}");
    let attributes = messages[0].attributes().unwrap();
    assert_eq!(attributes[&MessageSystemAttributeName::MessageGroupId], "acct_fifo");
    assert_eq!(attributes[&MessageSystemAttributeName::MessageDeduplicationId], key);
    let event = PaymentEvent::parse(messages[0].body().unwrap()).unwrap();
    assert_eq!((event.event_id.as_str(), event.amount_cents), (key.as_str(), 800));
    sqs_client.delete_queue().queue_url(&fifo).send().await.unwrap();
    pipeline.down().await.unwrap();
}
