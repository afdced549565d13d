//! The layered counter service on the local AWS: one increment per event, however often SQS
//! delivers it, and the duplicate answered with the stored response.

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency, Key, Lookup};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_effects::testing::{fresh_table, unique_name, KeyAttribute};
use effectively_once_lambda::events::{Context, LambdaEvent};
use effectively_once_lambda::sqs::{self, Options};
use effectively_once_lambda::testing::sqs::{Batch, Message};
use lambda_runtime::tower::{Layer, ServiceExt};
use sqs_tower_layer::{counter_service, layer, Consumer, Counted, Increment};

async fn counter_value(client: &aws_sdk_dynamodb::Client, table: &str, counter: &str) -> Option<String> {
    let out = client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(format!("counter#{counter}")))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item().and_then(|item| item.get("value")).and_then(|v| v.as_n().ok()).cloned()
}

/// One event delivered three times in one batch: twice under one message id (SQS redelivered
/// it), once under another (the producer sent it again). The counter moves once; calling the
/// service again answers the stored `Counted` without adding.
#[tokio::test]
async fn the_same_event_three_times_adds_once_and_replays_the_stored_answer() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let table = fresh_table(&client, "counters", KeyAttribute::string("pk"), None).await;
    let idempotency = Idempotency::new(store, Config::default());
    let service = layer(idempotency.clone()).layer(counter_service(client.clone(), table.clone()));
    let consumer = Consumer { service: service.clone() };

    let counter = unique_name("clicks");
    let body = format!(r#"{{"event_id": "ev-1", "counter": "{counter}", "by": 1}}"#);
    let batch = Batch::new()
        .message(Message::new(body.as_str()).id("m-1"))
        .message(Message::new(body.as_str()).id("m-1").receive_count(2))
        .message(Message::new(body.as_str()).id("m-2"));
    let options = Options { emit_metrics: false, ..Options::new("sqs-tower-layer") };
    let response = sqs::process(&consumer, LambdaEvent::new(batch.build(), Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty(), "no redelivery: {:?}", response.batch_item_failures);
    assert_eq!(counter_value(&client, &table, &counter).await.as_deref(), Some("1"), "added once");

    // The record holds the first run's answer, and a duplicate call gets it without adding.
    let key = Key::new("counter", "ev-1").unwrap();
    let stored = idempotency.get::<Counted>(&key).await.unwrap();
    assert_eq!(stored, Lookup::Completed(Counted { counter: counter.clone(), value: 1 }));
    let again = Increment { event_id: "ev-1".into(), counter: counter.clone(), by: 1 };
    let answer = service.oneshot(again).await.unwrap();
    assert_eq!(answer, Counted { counter: counter.clone(), value: 1 }, "the stored response");
    assert_eq!(counter_value(&client, &table, &counter).await.as_deref(), Some("1"), "still once");
}
