//! The API on a FIFO queue of the local AWS: the message group and deduplication ids it sends
//! fit SQS's limits for every key and account id the contract accepts.

use effectively_once::{Config, Idempotency, InMemoryStore};
use payments_api::Api;
use serde_json::{json, Value};

/// `POST /payments` as a Function URL event, with `Idempotency-Key: key`.
fn request(key: &str, body: &str) -> lambda_http::Request {
    let mut event: Value = serde_json::from_str(include_str!("../../../../../events/http-payment.json")).unwrap();
    event["headers"]["idempotency-key"] = json!(key);
    event["body"] = json!(body);
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

fn body(account: &str, cents: i64) -> String {
    format!(r#"{{"account_id": "{account}", "amount_cents": {cents}, "currency": "USD"}}"#)
}

/// A key of 129 to 200 characters (valid by the contract) and an account id as long: on a FIFO
/// queue they become `MessageDeduplicationId` and `MessageGroupId`, which SQS caps at 128
/// characters, so they are sent shortened (real SQS would refuse longer ones with
/// InvalidParameterValue on every try, and the client get `503` forever). The local emulator
/// does not check the length, so this test reads the ids back off the message.
#[tokio::test]
async fn fifo_ids_fit_sqs_limits_for_every_valid_key() {
    use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
    use effectively_once_dynamodb::testing::unique_name;

    let clients = local::Clients::local().await;
    let sqs = clients.sqs.clone();
    let fifo = sqs
        .create_queue()
        .queue_name(format!("{}.fifo", unique_name("api-fifo")))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let api = Api::new(
        Idempotency::new(InMemoryStore::new(), Config::default()),
        payments_api::SqsQueue::new(sqs.clone(), &fifo, true),
    );
    let key = format!("pay_{}", "k".repeat(196));
    let account = format!("acct_{}", "a".repeat(195));
    let response = api.handle(request(&key, &body(&account, 800))).await;
    let status = response.status().as_u16();
    let received = sqs
        .receive_message()
        .queue_url(&fifo)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    sqs.delete_queue().queue_url(&fifo).send().await.unwrap();
    assert_eq!(status, 202, "a key and an account id of 200 characters are valid");
    let attributes = received.messages()[0].attributes().unwrap();
    let dedup = &attributes[&MessageSystemAttributeName::MessageDeduplicationId];
    let group = &attributes[&MessageSystemAttributeName::MessageGroupId];
    assert!(dedup.len() <= 128, "MessageDeduplicationId has {} characters", dedup.len());
    assert!(group.len() <= 128, "MessageGroupId has {} characters", group.len());
}
