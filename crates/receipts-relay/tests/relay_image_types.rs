//! An outbox row carrying attributes of every DynamoDB type (binary, number and binary sets,
//! lists, maps, nulls, booleans), as another writer of the table may add: the relay read stream
//! images by hand and rejected binary and number-set values, which failed the record and held
//! the shard's checkpoint. Images are now read with `serde_dynamo`.

mod common;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use common::Pending;
use effectively_once_effects::{Policy, RecordingSender};
use effectively_once_lambda::streams::{process, Options};
use lambda_runtime::{Context, LambdaEvent};

#[tokio::test]
async fn a_row_with_attributes_of_every_type_still_gets_its_receipt() {
    let mut p = Pending::new("alltypes").await;
    let extra = [
        ("blob", AttributeValue::B(Blob::new(vec![0u8, 1, 2]))),
        ("numbers", AttributeValue::Ns(vec!["1".into(), "2.5".into(), "-300".into()])),
        ("blobs", AttributeValue::Bs(vec![Blob::new(vec![0u8, 1]), Blob::new(vec![2u8])])),
        ("strings", AttributeValue::Ss(vec!["a".into(), "b".into()])),
        ("list", AttributeValue::L(vec![AttributeValue::N("1".into()), AttributeValue::Null(true)])),
        ("map", AttributeValue::M([("flag".to_owned(), AttributeValue::Bool(false))].into())),
        ("nothing", AttributeValue::Null(true)),
        ("flag", AttributeValue::Bool(true)),
    ];
    // The row as the table holds it, and the image the stream captured of it.
    let mut item = p.item.clone();
    item.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    p.client.put_item().table_name(&p.outbox_table).set_item(Some(item)).send().await.unwrap();
    for (name, value) in extra {
        p.event.records[0].change.new_image.insert(name.to_owned(), serde_dynamo::AttributeValue::from(value));
    }

    let sender = RecordingSender::new();
    let relay = common::relay(p.markers(), &sender, &p.outbox_table, Policy::AtMostOnce);
    let options = Options { metrics: false, ..Options::new("test") };
    let response = process(&relay, LambdaEvent::new(p.event.clone(), Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty(), "the checkpoint moves on: {:?}", response.batch_item_failures);
    let sent = sender.sent();
    assert_eq!(sent.len(), 1, "one receipt");
    assert_eq!(sent[0].to, p.to);
    assert_eq!(p.status().await, "SENT");
    let row = p.row().await.unwrap();
    let mut numbers = row["numbers"].as_ns().unwrap().clone();
    numbers.sort();
    assert_eq!(numbers, ["-300", "1", "2.5"], "left as it was");
}
