//! Keys scoped by caller (`API_PRODUCERS`): a producer's keys are its own, an unknown principal
//! or an account outside a producer's list is `403` with nothing stored or sent, and one
//! producer (or none) keeps the event id the key. In memory, then once against the local AWS
//! (the DynamoDB records and the SQS messages).

use std::sync::{Arc, Mutex};

use effectively_once::{Config, Idempotency, InMemoryStore};
use lambda_http::Body;
use payments::PaymentEvent;
use payments_api::{Api, EnqueueError, Producers, Queue, REPLAYED};
use serde_json::{json, Value};

const SHOP: &str = "arn:aws:iam::123456789012:user/producer";
const PAYROLL: &str = "arn:aws:sts::123456789012:assumed-role/payroll-producer/session-1";
const STRANGER: &str = "arn:aws:iam::123456789012:user/stranger";

/// Two producers: `shop` (the sample events' user) for any account, `payroll` (a role, any of
/// its sessions) for `acct_42` and `staff_*` only.
fn two_producers() -> Producers {
    Producers::parse(
        r#"{"shop": {"principals": ["arn:aws:iam::123456789012:user/producer"], "accounts": ["*"]},
            "payroll": {"principals": ["arn:aws:iam::123456789012:role/producers/payroll-producer"],
                        "accounts": ["acct_42", "staff_*"]}}"#,
    )
    .unwrap()
}

/// The events the queue was sent, in order.
#[derive(Default)]
struct Recording(Mutex<Vec<PaymentEvent>>);

impl Queue for Recording {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        self.0.lock().unwrap().push(event.clone());
        Ok(())
    }
}

impl Recording {
    fn sent(&self) -> Vec<(String, i64)> {
        self.0.lock().unwrap().iter().map(|event| (event.event_id.clone(), event.amount_cents)).collect()
    }
}

struct Setup {
    api: Api<Arc<InMemoryStore>, Recording>,
    store: Arc<InMemoryStore>,
}

fn setup(producers: Producers) -> Setup {
    let store = Arc::new(InMemoryStore::new());
    let api =
        Api::new(Idempotency::new(store.clone(), Config::default()), Recording::default()).with_producers(producers);
    Setup { api, store }
}

/// The sample Function URL event, from `principal` (none: no IAM authorizer), with `key` and `body`.
fn request(principal: Option<&str>, key: &str, body: &str) -> lambda_http::Request {
    let mut event: Value = serde_json::from_str(include_str!("../../../../../events/http-payment.json")).unwrap();
    match principal {
        Some(arn) => event["requestContext"]["authorizer"]["iam"]["userArn"] = json!(arn),
        None => drop(event["requestContext"].as_object_mut().unwrap().remove("authorizer")),
    }
    event["headers"]["idempotency-key"] = json!(key);
    event["body"] = json!(body);
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

fn body(account: &str, cents: i64) -> String {
    format!(r#"{{"account_id": "{account}", "amount_cents": {cents}, "currency": "USD"}}"#)
}

/// Status, `Idempotent-Replayed`, JSON body.
async fn answer<S: effectively_once::Store, Q: Queue + 'static>(
    api: &Api<S, Q>,
    request: lambda_http::Request,
) -> (u16, bool, Value) {
    let response = api.handle(request).await;
    let replayed = response.headers().get(REPLAYED).is_some();
    let Body::Text(text) = response.body() else { panic!("a text body") };
    (response.status().as_u16(), replayed, serde_json::from_str(text).unwrap())
}

#[tokio::test]
async fn a_second_producers_key_squat_does_not_touch_the_firsts_payment() {
    let s = setup(two_producers());
    // payroll squats the key shop is about to use, with a 1-cent body.
    let squat = answer(&s.api, request(Some(PAYROLL), "pay_7", &body("acct_42", 1))).await;
    assert_eq!((squat.0, &squat.2["event_id"]), (202, &json!("payroll:pay_7")));
    let real = answer(&s.api, request(Some(SHOP), "pay_7", &body("acct_42", 125_000))).await;
    assert_eq!((real.0, real.1, &real.2["event_id"]), (202, false, &json!("shop:pay_7")), "shop's own payment");
    let retry = answer(&s.api, request(Some(SHOP), "pay_7", &body("acct_42", 125_000))).await;
    assert_eq!((retry.0, retry.1, &retry.2["event_id"]), (202, true, &json!("shop:pay_7")), "replayed to shop");
    let probe = answer(&s.api, request(Some(PAYROLL), "pay_7", &body("acct_42", 125_000))).await;
    assert_eq!((probe.0, probe.2["error"].as_str()), (422, Some("idempotency_key_reused")), "only its own key");
    assert_eq!(s.api.queue().sent(), [("payroll:pay_7".to_owned(), 1), ("shop:pay_7".to_owned(), 125_000)]);
    let records: Vec<String> = s.store.records().into_iter().map(|record| record.id).collect();
    assert_eq!(records, ["api#payroll:pay_7", "api#shop:pay_7"]);
}

#[tokio::test]
async fn a_producer_may_not_squat_where_its_accounts_forbid() {
    let s = setup(two_producers());
    let squat = answer(&s.api, request(Some(PAYROLL), "pay_8", &body("acct_7", 1))).await;
    assert_eq!((squat.0, squat.2["error"].as_str()), (403, Some("forbidden")));
    assert_eq!(squat.2["message"], "account_id: producer payroll may not post to account acct_7");
    assert!(s.api.queue().sent().is_empty() && s.store.records().is_empty(), "nothing sent or stored");
    // Another session of the same role, for an account of its own: allowed.
    let staff = "arn:aws:sts::123456789012:assumed-role/payroll-producer/session-2";
    assert_eq!(answer(&s.api, request(Some(staff), "pay_9", &body("staff_3", 10))).await.0, 202);
}

#[tokio::test]
async fn an_unknown_principal_is_403_with_nothing_read_stored_or_sent() {
    let s = setup(two_producers());
    for principal in [Some(STRANGER), None] {
        let refused = answer(&s.api, request(principal, "pay_1", &body("acct_42", 5))).await;
        assert_eq!((refused.0, refused.2["error"].as_str()), (403, Some("forbidden")), "{principal:?}");
        assert!(refused.2["message"].is_string());
    }
    assert_eq!(s.store.requests(), 0, "the store was never asked");
    assert!(s.api.queue().sent().is_empty());
    let oversized = answer(&s.api, request(Some(STRANGER), "pay_1", &"x".repeat(1 << 20))).await;
    assert_eq!(oversized.0, 403, "refused before the body is looked at");
}

/// A `403` for the account leaves no record: the caller's corrected request under the same
/// key is its first, not a `422` against the refused body.
#[tokio::test]
async fn an_account_refusal_leaves_the_key_free_for_the_callers_valid_request() {
    let s = setup(two_producers());
    assert_eq!(answer(&s.api, request(Some(PAYROLL), "pay_2", &body("acct_99", 5))).await.0, 403);
    let valid = answer(&s.api, request(Some(PAYROLL), "pay_2", &body("staff_1", 5))).await;
    assert_eq!((valid.0, valid.1, &valid.2["event_id"]), (202, false, &json!("payroll:pay_2")));
    assert_eq!(s.api.queue().sent(), [("payroll:pay_2".to_owned(), 5)]);
}

#[tokio::test]
async fn one_producer_keeps_the_event_id_the_key_and_refuses_everyone_else() {
    let one = Producers::parse(
        r#"{"shop": {"principals": ["arn:aws:iam::123456789012:user/producer"], "accounts": ["acct_*"]}}"#,
    )
    .unwrap();
    let s = setup(one);
    let first = answer(&s.api, request(Some(SHOP), "pay_3", &body("acct_42", 5))).await;
    assert_eq!((first.0, &first.2["event_id"]), (202, &json!("pay_3")));
    assert_eq!(answer(&s.api, request(Some(PAYROLL), "pay_4", &body("acct_42", 5))).await.0, 403);
    assert_eq!(answer(&s.api, request(Some(SHOP), "pay_5", &body("shop_42", 5))).await.0, 403);
    assert_eq!(s.api.queue().sent(), [("pay_3".to_owned(), 5)]);
    let records: Vec<String> = s.store.records().into_iter().map(|record| record.id).collect();
    assert_eq!(records, ["api#pay_3"], "the records of the default deployment: a one-producer config keeps them");
    // A key of the full 200 characters is still accepted: nothing is prefixed to it.
    let long = "k".repeat(200);
    assert_eq!(answer(&s.api, request(Some(SHOP), &long, &body("acct_42", 5))).await.2["event_id"], json!(long));
}

#[tokio::test]
async fn several_producers_shorten_the_key_by_the_producers_name() {
    let s = setup(two_producers());
    let longest = "k".repeat(200 - "payroll:".len());
    let fits = answer(&s.api, request(Some(PAYROLL), &longest, &body("acct_42", 5))).await;
    assert_eq!((fits.0, fits.2["event_id"].as_str().map(str::len)), (202, Some(200)));
    let over = answer(&s.api, request(Some(PAYROLL), &format!("{longest}k"), &body("acct_42", 5))).await;
    assert_eq!((over.0, over.2["error"].as_str()), (400, Some("invalid_idempotency_key")));
    assert_eq!(over.2["message"], "Idempotency-Key: must have 1 to 192 characters, has 193");
}

/// The sample events, with the second producer's: as documented with no configuration (the
/// second producer's 1-cent body under the first's key is `422`: the squat the configuration
/// prevents), and each producer's own event once two are configured.
#[tokio::test]
async fn the_sample_events_scope_by_producer_once_configured() {
    let first = || lambda_http::request::from_str(include_str!("../../../../../events/http-payment.json")).unwrap();
    let second = || {
        lambda_http::request::from_str(include_str!("../../../../../events/http-payment-second-producer.json")).unwrap()
    };
    let open = setup(Producers::open());
    assert_eq!(answer(&open.api, first()).await.2["event_id"], "pay_http_0001");
    assert_eq!(answer(&open.api, second()).await.0, 422, "unscoped: the squat is refused, the key is taken");
    let scoped = setup(two_producers());
    assert_eq!(answer(&scoped.api, second()).await.2["event_id"], "payroll:pay_http_0001");
    assert_eq!(answer(&scoped.api, first()).await.2["event_id"], "shop:pay_http_0001");
    assert_eq!(scoped.api.queue().sent().len(), 2);
}

/// Against the local AWS: the two producers' records in DynamoDB and their two messages on SQS.
#[tokio::test]
async fn two_producers_put_two_events_on_the_queue_under_their_own_records() {
    use effectively_once_dynamodb::testing::unique_name;
    use effectively_once_dynamodb::DynamoDbStore;
    use payments_api::SqsQueue;
    use payments_local::{Clients, Pipeline};

    let pipeline = Pipeline::up(Clients::local().await, &unique_name("scopes")).await.unwrap();
    let (clients, resources) = (&pipeline.clients, &pipeline.resources);
    let store = DynamoDbStore::new(clients.dynamodb.clone(), &resources.idempotency_table);
    let queue = SqsQueue::new(clients.sqs.clone(), &resources.queue_url, false);
    let api = Api::new(Idempotency::new(store, Config::default()), queue).with_producers(two_producers());
    assert_eq!(answer(&api, request(Some(PAYROLL), "pay_1", &body("acct_42", 1))).await.0, 202);
    assert_eq!(answer(&api, request(Some(SHOP), "pay_1", &body("acct_42", 900))).await.0, 202);
    assert_eq!(answer(&api, request(Some(STRANGER), "pay_1", &body("acct_42", 5))).await.0, 403);
    assert_eq!(answer(&api, request(Some(PAYROLL), "pay_2", &body("acct_1", 5))).await.0, 403);
    let mut events = Vec::new();
    for _ in 0..10 {
        let received = clients
            .sqs
            .receive_message()
            .queue_url(&resources.queue_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        for message in received.messages() {
            let event = PaymentEvent::parse(message.body().unwrap()).unwrap();
            events.push((event.event_id, event.amount_cents));
        }
        if events.len() >= 2 {
            break;
        }
    }
    events.sort();
    assert_eq!(events, [("payroll:pay_1".to_owned(), 1), ("shop:pay_1".to_owned(), 900)]);
    let scan = clients.dynamodb.scan().table_name(&resources.idempotency_table).consistent_read(true).send().await;
    let mut ids: Vec<String> = scan
        .unwrap()
        .items()
        .iter()
        .filter_map(|item| item.get("id")?.as_s().ok().cloned())
        .filter(|id| id.starts_with("api#"))
        .collect();
    ids.sort();
    assert_eq!(ids, ["api#payroll:pay_1", "api#shop:pay_1"], "nothing stored for the 403s");
}

/// Going from no producer (or one) to several keeps the records (`api#{key}`, kept for good)
/// on the prefix the scoped ones use (`api#{producer}:{key}`): a key sent before the switch
/// that spells `{producer}:{key}` holds that event id, in the API's records and in the ledger.
/// After the switch, that producer's own request under it with another body is refused `422`
/// and nothing is sent: a `202` would put a second event under one event id on the queue,
/// which the consumer sends to the DLQ as key reuse after the client was told it was
/// accepted. docs/deploy.md says to check for such keys before switching.
#[tokio::test]
async fn a_key_held_from_before_producers_were_configured_is_refused_never_sent_twice() {
    let store = Arc::new(InMemoryStore::new());
    let open = Api::new(Idempotency::new(store.clone(), Config::default()), Recording::default());
    let squat = answer(&open, request(Some(STRANGER), "payroll:pay_1", &body("acct_42", 1))).await;
    assert_eq!((squat.0, &squat.2["event_id"]), (202, &json!("payroll:pay_1")));

    let scoped = Api::new(Idempotency::new(store.clone(), Config::default()), Recording::default())
        .with_producers(two_producers());
    let real = answer(&scoped, request(Some(PAYROLL), "pay_1", &body("acct_42", 125_000))).await;
    assert_eq!((real.0, &real.2["error"]), (422, &json!("idempotency_key_reused")), "{real:?}");
    assert!(scoped.queue().sent().is_empty(), "nothing sent under the held event id");
    assert_eq!(open.queue().sent(), [("payroll:pay_1".to_owned(), 1)], "the one event of that id");
}
