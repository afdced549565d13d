//! The floor writes the ledger items `payments::Ledger` writes for the same batch (on the local
//! AWS): the same entries and balances, read back from both tables; only `posted_at`, a clock
//! reading, may differ.

use std::collections::{BTreeMap, HashMap};

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use payments::{Ledger, PaymentEvent};

type Item = BTreeMap<String, AttributeValue>;

/// Every item of `table`, without `posted_at` (checked to be there on each entry), sorted by key.
async fn items(client: &Client, table: &str) -> Vec<Item> {
    let scanned = client.scan().table_name(table).consistent_read(true).send().await.unwrap();
    assert!(scanned.last_evaluated_key().is_none(), "one page holds a sample's items");
    let mut items: Vec<Item> = scanned
        .items()
        .iter()
        .map(|item: &HashMap<String, AttributeValue>| {
            let mut item: Item = item.clone().into_iter().collect();
            let is_entry = matches!(item.get("sk"), Some(AttributeValue::S(sk)) if sk.starts_with("entry#"));
            let posted_at = item.remove("posted_at");
            if is_entry {
                let Some(AttributeValue::S(at)) = posted_at else { panic!("an entry without posted_at: {item:?}") };
                assert!(at.len() == 24 && at.ends_with('Z'), "posted_at {at} is YYYY-MM-DDTHH:MM:SS.mmmZ");
            }
            item
        })
        .collect();
    items.sort_by_key(|item| format!("{:?}{:?}", item.get("pk"), item.get("sk")));
    items
}

/// Runs `event` through the floor and through `payments::Ledger::post_batch` (its valid events,
/// as the consumer does), each on a ledger table of its own, and compares what they wrote.
/// Returns the floor's requests, by operation.
async fn assert_same_items(event: SqsEvent) -> BTreeMap<String, u64> {
    let (store, counter) = fresh_store().await;
    let client = store.client().clone();
    let (ours, floor, outbox) = (unique_name("ledger"), unique_name("floor"), unique_name("outbox"));
    for table in [&ours, &floor] {
        payments::tables::create_ledger_table(&client, table).await.unwrap();
    }
    payments::tables::create_outbox_table(&client, &outbox).await.unwrap();

    let mut invalid = Vec::new();
    let mut events = Vec::new();
    for message in &event.records {
        match PaymentEvent::parse(message.body.as_deref().unwrap_or_default()) {
            Ok(payment) => events.push(payment),
            Err(_) => invalid.push(message.message_id.clone().unwrap_or_default()),
        }
    }
    let ledger = Ledger::new(store, ours.clone(), Some(outbox));
    for result in ledger.post_batch(&events).await {
        result.unwrap();
    }

    counter.reset();
    let response = payments_floor::handle(&client, &floor, event).await.unwrap();
    let requests = counter.by_operation();
    let failed: Vec<String> = response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
    assert_eq!(failed, invalid, "the floor fails exactly the messages the payment contract refuses");

    let (ours, floor) = (items(&client, &ours).await, items(&client, &floor).await);
    assert!(!ours.is_empty(), "the sample posts something");
    assert_eq!(floor, ours);
    requests
}

fn sample(json: &[u8]) -> SqsEvent {
    serde_json::from_slice(json).unwrap()
}

#[tokio::test]
async fn the_floor_writes_what_the_ledger_writes_for_a_batch_with_bad_input() {
    let requests = assert_same_items(sample(include_bytes!("../../../events/sqs-bad-input.json"))).await;
    assert_eq!(requests, BTreeMap::from([("TransactWriteItems".to_owned(), 1)]), "one transaction a batch");
}

#[tokio::test]
async fn the_floor_writes_each_event_once_for_a_batch_with_duplicates() {
    let requests = assert_same_items(sample(include_bytes!("../../../events/sqs-batch-duplicates.json"))).await;
    assert_eq!(requests, BTreeMap::from([("TransactWriteItems".to_owned(), 1)]), "one transaction a batch");
}

#[tokio::test]
async fn the_floor_splits_a_batch_beyond_100_actions_and_writes_what_the_ledger_writes() {
    // 150 credits over 3 accounts: 153 actions, so two transactions.
    let records: Vec<serde_json::Value> = (0..150)
        .map(|i| {
            let body = serde_json::json!({
                "event_id": format!("pay_floor_{i}"),
                "account_id": format!("acct_floor_{}", i % 3),
                "amount_cents": 100 + i,
                "currency": "EUR",
            });
            serde_json::json!({"messageId": format!("msg-{i}"), "body": body.to_string(), "eventSource": "aws:sqs"})
        })
        .collect();
    let event: SqsEvent = serde_json::from_value(serde_json::json!({ "Records": records })).unwrap();
    let requests = assert_same_items(event).await;
    assert_eq!(requests, BTreeMap::from([("TransactWriteItems".to_owned(), 2)]), "split at 100 actions");
}
