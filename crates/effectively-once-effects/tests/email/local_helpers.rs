//! The `testing` helpers on the local AWS (or `AWS_ENDPOINT_URL`): a table with a composite key
//! of mixed types, and a verified sender whose email the local SES records.

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once_effects::testing::{emails_to, fresh_table, sdk_config, ses_sender, unique_name, KeyAttribute};
use effectively_once_effects::{EmailMessage, EmailSender as _};

#[tokio::test]
async fn a_table_with_a_string_partition_key_and_a_number_sort_key_holds_items_by_both() {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let table = fresh_table(&client, "orders", "pk", Some(KeyAttribute::number("version"))).await;
    for version in ["1", "2"] {
        client
            .put_item()
            .table_name(&table)
            .item("pk", AttributeValue::S("order#1".into()))
            .item("version", AttributeValue::N(version.into()))
            .send()
            .await
            .unwrap();
    }
    let items = client
        .query()
        .table_name(&table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S("order#1".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(items.count(), 2, "two items under one partition key, told apart by the sort key");
    // A number sort key: a string there is refused.
    let wrong = client
        .put_item()
        .table_name(&table)
        .item("pk", AttributeValue::S("order#1".into()))
        .item("version", AttributeValue::S("3".into()))
        .send()
        .await;
    assert!(wrong.is_err());
}

#[tokio::test]
async fn a_verified_sender_sends_and_the_local_ses_records_it_once() {
    let from = format!("{}@example.com", unique_name("shop"));
    let to = format!("{}@example.com", unique_name("alice"));
    let sender = ses_sender(&from).await;
    let message = EmailMessage { to: to.clone(), subject: "Your order".into(), text: "Received.".into() };
    sender.send(&message).await.unwrap();
    let received = emails_to(&to);
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0]["source"], from.as_str());
    assert_eq!(received[0]["subject"], "Your order");
}
