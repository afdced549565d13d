//! An outbox row carrying attributes of every DynamoDB type (binary, number and binary sets,
//! lists, maps, nulls, booleans), as another writer of the table may add: the relay read stream
//! images by hand and rejected binary and number-set values, which failed the record and held
//! the shard's checkpoint. Images are now read with `serde_dynamo`.

use crate::support;
use crate::support::Pending;
use effectively_once_effects::{Policy, RecordingSender};
use effectively_once_lambda::park::Coordinates;
use effectively_once_lambda::streams::{process, Options};
use lambda_runtime::{Context, LambdaEvent};

#[tokio::test]
async fn a_row_with_attributes_of_every_type_still_gets_its_receipt() {
    let mut p = Pending::new("alltypes").await;
    // In DynamoDB JSON, the stream's form: binary as base64.
    let extra: serde_dynamo::Item = serde_json::from_str(
        r#"{"blob": {"B": "AAEC"}, "numbers": {"NS": ["1", "2.5", "-300"]}, "blobs": {"BS": ["AAE=", "Ag=="]},
            "strings": {"SS": ["a", "b"]}, "list": {"L": [{"N": "1"}, {"NULL": true}]},
            "map": {"M": {"flag": {"BOOL": false}}}, "nothing": {"NULL": true}, "flag": {"BOOL": true}}"#,
    )
    .unwrap();
    // The row as the table holds it, and the image the stream captured of it.
    let mut item = p.item.clone();
    for (name, value) in extra.clone().into_inner() {
        item.insert(name.clone(), value.clone());
        p.event.records[0].change.new_image.insert(name, value);
    }
    p.client.put_item().table_name(&p.outbox_table).set_item(Some(item.into())).send().await.unwrap();

    let sender = RecordingSender::new();
    let relay = support::relay(p.markers(), &sender, &p.outbox_table, Policy::AtMostOnce);
    let options = Options { emit_metrics: false, ..Options::new("test") };
    let response = process(&relay, LambdaEvent::new(p.event.clone(), Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty(), "the checkpoint moves on: {:?}", response.batch_item_failures);
    let sent = sender.sent();
    assert_eq!(sent.len(), 1, "one receipt");
    assert_eq!(sent[0].to, p.to);
    assert_eq!(p.status().await, "SENT");
    // The whole item, read back in the stream's form.
    let stored = p
        .client
        .get_item()
        .table_name(&p.outbox_table)
        .key("pk", serde_dynamo::to_attribute_value(format!("receipt#{}", p.event_id)).unwrap())
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let row = serde_json::to_value(serde_dynamo::Item::from(stored.item().cloned().unwrap())).unwrap();
    let mut numbers: Vec<String> = serde_json::from_value(row["numbers"]["NS"].clone()).unwrap();
    numbers.sort();
    assert_eq!(numbers, ["-300", "1", "2.5"], "left as it was");
}

/// A row whose `status` another writer left in a form the relay does not know (here a number):
/// the status read before sending (`Outbox::status`) calls it malformed, and the relay must not
/// answer that with a retry, which holds the shard's checkpoint for a day (MaximumRetryAttempts
/// -1) and every receipt behind it: the record fails for good, is parked, and the checkpoint
/// moves on. Nothing is sent over a fate the relay cannot read.
#[tokio::test]
async fn a_row_whose_status_is_not_one_the_relay_knows_is_parked_and_does_not_hold_the_checkpoint() {
    let p = Pending::new("oddstatus").await;
    let mut item = p.item.clone();
    item.insert("status".into(), serde_dynamo::AttributeValue::N("0".into()));
    p.client.put_item().table_name(&p.outbox_table).set_item(Some(item.into())).send().await.unwrap();

    let sender = RecordingSender::new();
    let relay = support::relay(p.markers(), &sender, &p.outbox_table, Policy::AtMostOnce);
    let park = support::Park::fresh().await;
    let response = process(&relay, LambdaEvent::new(p.event.clone(), Context::default()), &park.options()).await;
    assert!(response.batch_item_failures.is_empty(), "the checkpoint moves on: {:?}", response.batch_item_failures);
    assert!(sender.sent().is_empty(), "nothing sent over a status the relay cannot read");
    let parcels = park.parcels().await;
    assert_eq!(parcels.len(), 1, "the insert parked, alone: {parcels:?}");
    let insert = &p.event.records[0];
    let sequence = insert.change.sequence_number.clone().unwrap();
    assert_eq!(parcels[0].trigger, "aws:dynamodb");
    assert_eq!(parcels[0].coordinates, Coordinates::DynamoDb { sequence_number: sequence });
    assert!(parcels[0].reason.contains("reading the outbox row"), "{}", parcels[0].reason);
    assert!(!parcels[0].reason.contains(&p.to), "the address redacted: {}", parcels[0].reason);
    assert_eq!(parcels[0].record, serde_json::to_value(insert).unwrap(), "the record as delivered");
}
