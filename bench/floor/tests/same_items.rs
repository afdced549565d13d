//! The floor writes the ledger items `payments::Ledger` writes for the same batch (on the local
//! AWS): the same entries and balances, read back from both tables; only `posted_at`, a clock
//! reading, may differ. With a record table (`FLOOR_RECORD`), it also writes one record per event,
//! with the id, status and response ours records and a hash of the same length, and a batch of
//! one transaction holding an event already recorded writes nothing.

use std::collections::{BTreeMap, HashMap};

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use payments::{Ledger, PaymentEvent};
use sha2::{Digest, Sha256};

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

/// Every item of a record table, sorted by `id`.
async fn records(client: &Client, table: &str) -> Vec<Item> {
    let scanned = client.scan().table_name(table).consistent_read(true).send().await.unwrap();
    assert!(scanned.last_evaluated_key().is_none(), "one page holds a sample's records");
    let mut items: Vec<Item> = scanned.items().iter().map(|item| item.clone().into_iter().collect()).collect();
    items.sort_by_key(|item| format!("{:?}", item.get("id")));
    items
}

fn text(item: &Item, name: &str) -> String {
    match item.get(name) {
        Some(AttributeValue::S(value)) => value.clone(),
        other => panic!("{name} is not a string in {item:?}: {other:?}"),
    }
}

/// The floor's records are exactly the least record of each event it wrote (its first message's
/// body hashed), and each has the id, status and response of ours' record for that event, and a
/// hash of the same length.
fn assert_least_records(event: &SqsEvent, floor: &[Item], ours: &[Item]) {
    let mut expected: BTreeMap<String, Item> = BTreeMap::new();
    for body in event.records.iter().filter_map(|m| m.body.as_deref()) {
        let Ok(payment) = PaymentEvent::parse(body) else { continue };
        let id = format!("payments#{}", payment.event_id);
        let hash = format!("v2:{}", hex::encode(Sha256::digest(body.as_bytes())));
        expected.entry(id.clone()).or_insert_with(|| {
            BTreeMap::from([
                ("id".to_owned(), AttributeValue::S(id)),
                ("status".to_owned(), AttributeValue::S("COMPLETED".to_owned())),
                ("payload_hash".to_owned(), AttributeValue::S(hash)),
                ("response".to_owned(), AttributeValue::S(r#"{"outcome":"applied"}"#.to_owned())),
            ])
        });
    }
    assert_eq!(floor, expected.into_values().collect::<Vec<_>>(), "one least record per event");
    let view = |items: &[Item]| -> Vec<(String, String, String, usize)> {
        items
            .iter()
            .map(|r| (text(r, "id"), text(r, "status"), text(r, "response"), text(r, "payload_hash").len()))
            .collect()
    };
    assert_eq!(view(floor), view(ours), "ids, statuses, responses and hash lengths as ours records them");
}

/// Runs `event` through the floor (with a record table of its own when `with_records`) and
/// through `payments::Ledger::post_batch` (its valid events, as the consumer does), each on a
/// ledger table of its own, and compares what they wrote. Returns the floor's requests, by
/// operation.
async fn assert_same_items(event: SqsEvent, with_records: bool) -> BTreeMap<String, u64> {
    let (store, counter) = fresh_store().await;
    let client = store.client().clone();
    let ours_records = store.table().to_owned();
    let (ours, floor, outbox) = (unique_name("ledger"), unique_name("floor"), unique_name("outbox"));
    for table in [&ours, &floor] {
        payments::tables::create_ledger_table(&client, table).await.unwrap();
    }
    payments::tables::create_outbox_table(&client, &outbox).await.unwrap();
    let floor_records = unique_name("floor-records");
    if with_records {
        effectively_once_dynamodb::create_table(&client, &floor_records).await.unwrap();
    }

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
    let records_table = with_records.then_some(floor_records.as_str());
    let response = payments_floor::handle(&client, &floor, records_table, event.clone()).await.unwrap();
    let requests = counter.by_operation();
    let failed: Vec<String> = response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
    assert_eq!(failed, invalid, "the floor fails exactly the messages the payment contract refuses");

    let (ours, floor) = (items(&client, &ours).await, items(&client, &floor).await);
    assert!(!ours.is_empty(), "the sample posts something");
    assert_eq!(floor, ours);
    if with_records {
        let (ours, floor) = (records(&client, &ours_records).await, records(&client, &floor_records).await);
        assert_least_records(&event, &floor, &ours);
    }
    requests
}

fn sample(json: &[u8]) -> SqsEvent {
    serde_json::from_slice(json).unwrap()
}

/// `n` credits over 3 accounts, `pay_{tag}_{i}` each.
fn credits(tag: &str, n: usize) -> SqsEvent {
    let records: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let body = serde_json::json!({
                "event_id": format!("pay_{tag}_{i}"),
                "account_id": format!("acct_{tag}_{}", i % 3),
                "amount_cents": 100 + i,
                "currency": "EUR",
            });
            serde_json::json!({"messageId": format!("msg-{i}"), "body": body.to_string(), "eventSource": "aws:sqs"})
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
}

fn transactions(n: u64) -> BTreeMap<String, u64> {
    BTreeMap::from([("TransactWriteItems".to_owned(), n)])
}

#[tokio::test]
async fn the_floor_writes_what_the_ledger_writes_for_a_batch_with_bad_input() {
    let requests = assert_same_items(sample(include_bytes!("../../../events/sqs-bad-input.json")), false).await;
    assert_eq!(requests, transactions(1), "one transaction a batch");
}

#[tokio::test]
async fn the_floor_writes_each_event_once_for_a_batch_with_duplicates() {
    let requests = assert_same_items(sample(include_bytes!("../../../events/sqs-batch-duplicates.json")), false).await;
    assert_eq!(requests, transactions(1), "one transaction a batch");
}

#[tokio::test]
async fn the_floor_splits_a_batch_beyond_100_actions_and_writes_what_the_ledger_writes() {
    // 150 credits over 3 accounts: 153 actions, so two transactions.
    let requests = assert_same_items(credits("floor", 150), false).await;
    assert_eq!(requests, transactions(2), "split at 100 actions");
}

#[tokio::test]
async fn with_records_the_floor_writes_the_ledgers_items_and_a_record_per_event_for_a_batch_with_bad_input() {
    let requests = assert_same_items(sample(include_bytes!("../../../events/sqs-bad-input.json")), true).await;
    assert_eq!(requests, transactions(1), "the records in the batch's one transaction");
}

#[tokio::test]
async fn with_records_the_floor_writes_one_record_per_event_for_a_batch_with_duplicates() {
    let requests = assert_same_items(sample(include_bytes!("../../../events/sqs-batch-duplicates.json")), true).await;
    assert_eq!(requests, transactions(1), "the records in the batch's one transaction");
}

#[tokio::test]
async fn with_records_the_floor_counts_each_record_as_an_action_of_its_100() {
    // 150 credits over 3 accounts: 48 events and 3 balances (99 actions) a transaction, so four,
    // where the same batch without records takes two.
    let requests = assert_same_items(credits("floorrec", 150), true).await;
    assert_eq!(requests, transactions(4), "split at 100 actions, records counted");
}

#[tokio::test]
async fn with_records_a_batch_holding_an_event_already_recorded_fails_and_writes_nothing() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let (ledger, records_table) = (unique_name("floor"), unique_name("floor-records"));
    payments::tables::create_ledger_table(&client, &ledger).await.unwrap();
    effectively_once_dynamodb::create_table(&client, &records_table).await.unwrap();
    let first = credits("recorded", 4);
    payments_floor::handle(&client, &ledger, Some(&records_table), first.clone()).await.unwrap();
    let (ledger_before, records_before) = (items(&client, &ledger).await, records(&client, &records_table).await);
    assert_eq!(records_before.len(), 4, "the first batch's records");

    // New events, and the first batch's last event again (a producer retry, a new message id).
    let mut second = credits("fresh", 5);
    let mut again = first.records[3].clone();
    again.message_id = Some("msg-again".to_owned());
    second.records.insert(2, again);
    let result = payments_floor::handle(&client, &ledger, Some(&records_table), second).await;

    assert!(result.is_err(), "the recorded event cancels the batch's transaction");
    assert_eq!(items(&client, &ledger).await, ledger_before, "no entry and no balance moved");
    assert_eq!(records(&client, &records_table).await, records_before, "no record written");
}
