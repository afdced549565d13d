//! Every DynamoDB request the functions send, recorded on its way to the local AWS through each
//! of their paths, is allowed by the function's own role: the consumer's, the relay's, the Kafka
//! consumer's, the sweeper's and the API's.

use base64::Engine;
use payments::outbox;
use serde_json::Value;

use crate::iam::{allows, Request};
use crate::{list, template, API, CONSUMER, KAFKA, RELAY, SWEEPER};

/// Every DynamoDB item request a client sends, as IAM authorises it: `(action, table name,
/// partition key)`, a transaction split into its items (each is authorised as its own action).
#[derive(Debug, Clone, Default)]
struct Recorder {
    requests: std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>,
}

impl Recorder {
    fn take(&self) -> Vec<(String, String, String)> {
        std::mem::take(&mut *self.requests.lock().unwrap())
    }
}

/// The partition key attribute of each table the functions touch.
const PARTITION_KEYS: [&str; 2] = ["id", "pk"];

fn partition_key(item: &Value) -> String {
    PARTITION_KEYS.iter().find_map(|k| item[*k]["S"].as_str()).unwrap_or_default().to_owned()
}

impl aws_sdk_dynamodb::config::Intercept for Recorder {
    fn name(&self) -> &'static str {
        "Recorder"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let request = context.request();
        let operation = request.headers().get("x-amz-target").and_then(|t| t.rsplit('.').next()).unwrap_or("?");
        let body: Value = serde_json::from_slice(request.body().bytes().unwrap_or(b"{}")).unwrap_or_default();
        let mut out = self.requests.lock().unwrap();
        let mut push = |action: &str, part: &Value, item: &Value| {
            let table = part["TableName"].as_str().unwrap_or_default().to_owned();
            out.push((format!("dynamodb:{action}"), table, partition_key(item)));
        };
        match operation {
            "PutItem" => push("PutItem", &body, &body["Item"]),
            "TransactWriteItems" => {
                for item in list(&body["TransactItems"]) {
                    for (kind, action, key) in [
                        ("Put", "PutItem", "Item"),
                        ("Update", "UpdateItem", "Key"),
                        ("Delete", "DeleteItem", "Key"),
                        ("ConditionCheck", "ConditionCheckItem", "Key"),
                    ] {
                        if !item[kind].is_null() {
                            push(action, &item[kind], &item[kind][key]);
                        }
                    }
                }
            }
            // Each key a batch read asks for, under its table.
            "BatchGetItem" => {
                for (table, reads) in body["RequestItems"].as_object().into_iter().flatten() {
                    for key in list(&reads["Keys"]) {
                        push("BatchGetItem", &serde_json::json!({ "TableName": table }), &key);
                    }
                }
            }
            // A query reads no item by key: recorded under what it reads, `index/NAME` (or
            // `table`), for the test to hold against the grant's resource.
            "Query" => {
                let table = body["TableName"].as_str().unwrap_or_default().to_owned();
                let index = body["IndexName"].as_str().map_or_else(|| "table".to_owned(), |i| format!("index/{i}"));
                out.push(("dynamodb:Query".to_owned(), table, index));
            }
            // Item actions by key; anything else (Scan, batches) is recorded without a key,
            // which no grant here matches: a new kind of request must be granted on purpose.
            other => push(other, &body, &body["Key"]),
        }
        Ok(())
    }
}

/// The tables of the request scenario, on the local AWS, and a client recording its requests.
struct Scenario {
    sdk: aws_config::SdkConfig,
    idempotency: String,
    ledger: String,
    outbox: String,
}

/// The consumer's bodies: a credit with a receipt, its duplicate, an overdraft (a recorded
/// rejection), its duplicate, and the credit's event id reused for another account.
const SCENARIO_BODIES: [&str; 5] = [
    r#"{"event_id": "pay_0001", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD", "receipt_email": "alice@example.com"}"#,
    r#"{"event_id": "pay_0001", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD", "receipt_email": "alice@example.com"}"#,
    r#"{"event_id": "pay_0002", "account_id": "acct_7", "amount_cents": -500, "currency": "USD"}"#,
    r#"{"event_id": "pay_0002", "account_id": "acct_7", "amount_cents": -500, "currency": "USD"}"#,
    r#"{"event_id": "pay_0001", "account_id": "acct_9", "amount_cents": 1250, "currency": "USD"}"#,
];

impl Scenario {
    async fn new() -> Self {
        use effectively_once_dynamodb::testing::{sdk_config, unique_name};
        let sdk = sdk_config().await;
        let setup = aws_sdk_dynamodb::Client::new(&sdk);
        let scenario = Scenario {
            sdk,
            idempotency: unique_name("idem"),
            ledger: unique_name("ledger"),
            outbox: unique_name("outbox"),
        };
        effectively_once_dynamodb::create_table(&setup, &scenario.idempotency).await.unwrap();
        payments::tables::create_ledger_table(&setup, &scenario.ledger).await.unwrap();
        payments::tables::create_outbox_table(&setup, &scenario.outbox).await.unwrap();
        scenario
    }

    /// The template's name of one of the scenario's tables.
    fn logical(&self, table: &str) -> &'static str {
        match table {
            t if t == self.idempotency => "IdempotencyTable",
            t if t == self.ledger => "LedgerTable",
            t if t == self.outbox => "OutboxTable",
            _ => "unknown",
        }
    }

    fn recorded(&self) -> (aws_sdk_dynamodb::Client, Recorder) {
        let recorder = Recorder::default();
        let config = aws_sdk_dynamodb::config::Builder::from(&self.sdk).interceptor(recorder.clone()).build();
        (aws_sdk_dynamodb::Client::from_conf(config), recorder)
    }

    /// The payments consumer on [`SCENARIO_BODIES`], one message an invocation.
    async fn consumer(&self) -> Vec<(String, String, String)> {
        use aws_lambda_events::event::sqs::SqsMessage;
        use effectively_once_dynamodb::DynamoDbStore;
        use effectively_once_lambda::sqs as sqs_driver;
        use lambda_runtime::{Context, LambdaEvent};
        let (client, consumer_requests) = self.recorded();
        let store = DynamoDbStore::new(client, &self.idempotency);
        let consumer =
            payments_consumer::Payments::new(payments::Ledger::new(store, &self.ledger, Some(self.outbox.clone())));
        let options = sqs_driver::Options { emit_metrics: false, ..sqs_driver::Options::new("t") };
        for (i, body) in SCENARIO_BODIES.iter().enumerate() {
            let mut message = SqsMessage::default();
            message.message_id = Some(format!("m{i}"));
            message.body = Some(body.to_string());
            let mut event = aws_lambda_events::event::sqs::SqsEvent::default();
            event.records.push(message);
            sqs_driver::process(&consumer, LambdaEvent::new(event, Context::default()), &options).await;
        }
        consumer_requests.take()
    }

    /// The relay on the consumer's receipt row: a throttled send (the marker is released), the
    /// send, a duplicate.
    async fn relay(&self) -> Vec<(String, String, String)> {
        use aws_lambda_events::event::dynamodb::Event;
        use effectively_once_dynamodb::DynamoDbStore;
        use effectively_once_effects::email::{SendError, SendErrorKind};
        use effectively_once_lambda::streams;
        use lambda_runtime::{Context, LambdaEvent};
        let (idempotency, ledger_table, outbox_table) = (&self.idempotency, &self.ledger, &self.outbox);
        let recorded = || self.recorded();
        let (client, relay_requests) = recorded();
        let markers = effectively_once::Idempotency::new(DynamoDbStore::new(client, idempotency), Default::default());
        let sender = effectively_once_effects::RecordingSender::new();
        sender.fail_next(SendError::new(SendErrorKind::Throttled, "injected"));
        // With every rule on: the profile read and the rate counter are requests of the role too.
        let relay =
            receipts_relay::Receipts::new(markers, sender, outbox_table, effectively_once_effects::Policy::default())
                .with_profiles(ledger_table)
                .with_rate_limit(payments::RateLimit::from_env_values(Some("5"), None).unwrap());
        let event: Event =
            serde_json::from_str(include_str!("../../../../../events/dynamodb-stream-outbox.json")).unwrap();
        let options = streams::Options { emit_metrics: false, ..streams::Options::new("t") };
        for _ in 0..3 {
            streams::process(&relay, LambdaEvent::new(event.clone(), Context::default()), &options).await;
        }
        assert_eq!(relay.sender().sent().len(), 1, "the scenario ran: one receipt sent");

        relay_requests.take()
    }

    /// The Kafka consumer on the same tables, with event ids of its own: the same payments one
    /// record at a time, then as one batch (the batch path), then that batch again in another
    /// sandbox (replays, read from the records).
    async fn kafka(&self) -> Vec<(String, String, String)> {
        use effectively_once_dynamodb::DynamoDbStore;
        use effectively_once_lambda::events::{KafkaEvent, KafkaRecord};
        use effectively_once_lambda::kafka;
        use lambda_runtime::{Context, LambdaEvent};
        let (idempotency, ledger_table, outbox_table) = (&self.idempotency, &self.ledger, &self.outbox);
        let bodies = SCENARIO_BODIES;
        let recorded = || self.recorded();
        let (client, kafka_requests) = recorded();
        let outbox = Some(outbox_table.clone());
        let ledger = payments::Ledger::new(DynamoDbStore::new(client, idempotency), ledger_table, outbox);
        let kafka_event = |prefix: &str, offset: i64| {
            let mut event = KafkaEvent::default();
            for (i, body) in bodies.iter().enumerate() {
                let mut record = KafkaRecord::default();
                (record.topic, record.partition, record.offset) = (Some("payments".into()), 0, offset + i as i64);
                record.value = Some(base64::engine::general_purpose::STANDARD.encode(body.replace("pay_", prefix)));
                event.records.entry("payments-0".into()).or_default().push(record);
            }
            event
        };
        let options = kafka::Options { emit_metrics: false, ..kafka::Options::new("t") };
        let one_by_one = kafka_consumer::Payments::new(ledger.clone_forgetting());
        for record in kafka_event("kpay_", 0).records.remove("payments-0").unwrap() {
            let mut event = KafkaEvent::default();
            event.records.insert("payments-0".into(), vec![record]);
            kafka::process(&one_by_one, LambdaEvent::new(event, Context::default()), &options).await;
        }
        for _ in 0..2 {
            let batch = kafka_consumer::Payments::new(ledger.clone_forgetting());
            kafka::process_batch(&batch, LambdaEvent::new(kafka_event("bpay_", 10), Context::default()), &options)
                .await;
        }
        let kafka_requests = kafka_requests.take();
        let posted = ledger.entries("acct_42").await.unwrap();
        assert_eq!(posted.len(), 3, "the scenario ran: the SQS, one-by-one and batch credits: {posted:?}");

        kafka_requests
    }

    /// The sweeper, with every rule on as the relay, a day later: the Kafka payments' receipts,
    /// which no stream delivered here, are still PENDING.
    async fn sweeper(&self) -> Vec<(String, String, String)> {
        use effectively_once_dynamodb::DynamoDbStore;
        let (idempotency, ledger_table, outbox_table) = (&self.idempotency, &self.ledger, &self.outbox);
        let recorded = || self.recorded();
        let (client, sweeper_requests) = recorded();
        let markers = effectively_once::Idempotency::new(DynamoDbStore::new(client, idempotency), Default::default());
        let sender = effectively_once_effects::RecordingSender::new();
        let receipts =
            receipts_relay::Receipts::new(markers, sender, outbox_table, effectively_once_effects::Policy::default())
                .with_profiles(ledger_table)
                .with_rate_limit(payments::RateLimit::from_env_values(Some("5"), None).unwrap());
        let sweeper = receipts_relay::Sweeper::new(receipts, receipts_relay::Sweep::default());
        let a_day_later = std::time::SystemTime::now() + std::time::Duration::from_secs(86_400);
        let swept =
            sweeper.run(a_day_later.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64, None).await;
        assert!(swept.sent > 0 && swept.unsent == 0, "the scenario ran: receipts sent by the sweep: {swept:?}");
        let sweeper_requests = sweeper_requests.take();
        let queries: Vec<&str> =
            sweeper_requests.iter().filter(|r| r.0 == "dynamodb:Query").map(|r| r.2.as_str()).collect();
        let index = format!("index/{}", outbox::PENDING_INDEX);
        assert!(
            !queries.is_empty() && queries.iter().all(|q| *q == index),
            "the sweeper queries the index alone: {queries:?}"
        );

        sweeper_requests
    }
}

#[tokio::test]
async fn every_request_the_functions_send_is_allowed_by_their_own_role() {
    let scenario = Scenario::new().await;
    let consumer_requests = scenario.consumer().await;
    let relay_requests = scenario.relay().await;
    let kafka_requests = scenario.kafka().await;
    let sweeper_requests = scenario.sweeper().await;
    let logical = |table: &str| scenario.logical(table);
    let t = template();
    for (role, requests) in
        [(CONSUMER, consumer_requests), (RELAY, relay_requests), (KAFKA, kafka_requests), (SWEEPER, sweeper_requests)]
    {
        assert!(!requests.is_empty());
        let mut seen = std::collections::BTreeSet::new();
        for (action, table, key) in &requests {
            let request = Request { action, table: logical(table), key };
            assert!(
                allows(&t, role, request),
                "{role} sends {action} on {} key {key:?}: its role denies it",
                logical(table)
            );
            seen.insert(format!("{action} {} {}#", logical(table), key.split('#').next().unwrap_or_default()));
        }
        println!("{role}: {} requests, all allowed: {seen:?}", requests.len());
    }
}

/// A queue that refuses its first send (a definite refusal: the API releases the record) and
/// takes the rest.
#[derive(Default)]
struct FailsFirst(std::sync::atomic::AtomicBool);

impl payments_api::Queue for FailsFirst {
    async fn send(&self, _event: &payments::PaymentEvent) -> Result<(), payments_api::EnqueueError> {
        match self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            false => Err(payments_api::EnqueueError::refused("injected")),
            true => Ok(()),
        }
    }
}

/// Every DynamoDB request of the API, through each of its paths (a failed send and its
/// release, the send, a replay, a key reuse, a key in flight read for Retry-After), is allowed
/// by its role.
#[tokio::test]
async fn every_request_the_api_sends_is_allowed_by_its_role() {
    use effectively_once::{Begin, Config, Idempotency, Key};
    use effectively_once_dynamodb::testing::{sdk_config, unique_name};
    use effectively_once_dynamodb::DynamoDbStore;
    use lambda_http::http::{HeaderMap, HeaderValue};
    use lambda_http::Body;

    let sdk = sdk_config().await;
    let setup = aws_sdk_dynamodb::Client::new(&sdk);
    let idempotency = unique_name("idem");
    effectively_once_dynamodb::create_table(&setup, &idempotency).await.unwrap();
    let recorder = Recorder::default();
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(recorder.clone()).build();
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), &idempotency);
    let api = payments_api::Api::new(Idempotency::new(store, Config::default()), FailsFirst::default());

    let body = r#"{"account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}"#;
    let request = |key: &str, body: &str| {
        let mut request = lambda_http::Request::new(Body::Text(body.to_owned()));
        *request.method_mut() = lambda_http::http::Method::POST;
        *request.uri_mut() = "/payments".parse().unwrap();
        request.headers_mut().insert(payments_api::IDEMPOTENCY_KEY, HeaderValue::from_str(key).unwrap());
        request
    };
    let statuses = [
        api.handle(request("pay_0001", body)).await.status(),
        api.handle(request("pay_0001", body)).await.status(),
        api.handle(request("pay_0001", body)).await.status(),
        api.handle(request("pay_0001", &body.replace("1250", "99"))).await.status(),
    ];
    assert_eq!(statuses.map(|s| s.as_u16()), [503, 202, 202, 422]);
    // A key in flight: claimed by another attempt (through the unrecorded client).
    let mut headers = HeaderMap::new();
    headers.insert(payments_api::IDEMPOTENCY_KEY, HeaderValue::from_static("pay_0002"));
    let event = payments_api::parse(&headers, &Body::Text(body.to_owned())).unwrap();
    let other = Idempotency::new(DynamoDbStore::new(setup, &idempotency), Config::default());
    let key = Key::new(payments_api::PREFIX, "pay_0002").unwrap();
    let Ok(Begin::Claimed(_held)) = other.begin::<_, payments_api::Answer>(&key, &event).await else {
        panic!("claimed")
    };
    assert_eq!(api.handle(request("pay_0002", body)).await.status().as_u16(), 409);

    let t = template();
    let requests = recorder.take();
    let mut seen = std::collections::BTreeSet::new();
    for (action, table, key) in &requests {
        assert_eq!(table, &idempotency);
        let request = Request { action, table: "IdempotencyTable", key };
        assert!(allows(&t, API, request), "the API sends {action} on key {key:?}: its role denies it");
        seen.insert(action.clone());
    }
    let all = ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"];
    assert_eq!(seen.iter().map(String::as_str).collect::<Vec<_>>(), all, "every path ran");
}
