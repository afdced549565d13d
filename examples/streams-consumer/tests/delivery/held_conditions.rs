//! A business condition that fails now and may pass on a later delivery (stock arrives a
//! moment later), with nothing said otherwise: the stream driver holds the record as the
//! checkpoint, never commits past it, and the redelivery after the stock arrives reserves once.

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency, Key};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_dynamodb::{CommitOnce, DynamoDbStore, Table, Tx};
use effectively_once_effects::testing::{fresh_table, unique_name, KeyAttribute};
use effectively_once_lambda::events::{Context, EventRecord, LambdaEvent};
use effectively_once_lambda::streams::{self, Options};
use effectively_once_lambda::testing::streams::Batch;
use effectively_once_lambda::{Handled, Handler, RecordResult};
use serde_json::json;

/// Reserves one unit of stock per inserted order, once per order: `stock >= 1` is the
/// condition, with nothing said otherwise (so a failed condition is `ConditionFailed`).
struct Reserve {
    idempotency: Idempotency<DynamoDbStore>,
    stock: Table,
}

impl Handler<EventRecord> for Reserve {
    async fn handle(&self, record: &EventRecord, _context: &Context) -> RecordResult {
        let order = match record.change.new_image.get("order_id") {
            Some(serde_dynamo::AttributeValue::S(order)) => order.clone(),
            _ => String::new(),
        };
        let key = Key::new("reserve", &order).map_err(effectively_once::Error::from)?;
        let stock = self.stock.clone();
        let take = move |tx: &mut Tx<()>| {
            tx.update(&stock, &json!({"pk": "sku-1"}), |u| {
                u.update_expression("SET n = n - :one")
                    .condition_expression("n >= :one")
                    .expression_attribute_values(":one", AttributeValue::N("1".into()))
            })?;
            Ok(())
        };
        self.idempotency.commit_once(&key, &order, take).await?;
        Ok(Handled::Applied)
    }
}

async fn set_stock(client: &aws_sdk_dynamodb::Client, table: &str, n: u32) {
    client
        .put_item()
        .table_name(table)
        .item("pk", AttributeValue::S("sku-1".into()))
        .item("n", AttributeValue::N(n.to_string()))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_reservation_refused_by_its_condition_is_the_checkpoint_until_stock_arrives() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let stock = fresh_table(&client, "stock", KeyAttribute::string("pk"), None).await;
    set_stock(&client, stock.as_str(), 0).await;
    let handler =
        Reserve { idempotency: Idempotency::new(store, Config::default()), stock: Table::new(stock.as_str(), "pk") };
    let order = unique_name("ord");
    let event =
        Batch::new("orders", &["pk"]).insert(json!({"pk": format!("order#{order}"), "order_id": order})).build();
    let sequence = event.records[0].change.sequence_number.clone();
    let options = Options { emit_metrics: false, ..Options::new("reserve") };

    let first = streams::process(&handler, LambdaEvent::new(event.clone(), Context::default()), &options).await;
    let checkpoint: Vec<_> = first.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    assert_eq!(checkpoint, vec![sequence.clone()], "the order whose reservation failed is held, not skipped");

    // Stock arrives; Lambda redelivers from the checkpoint: reserved once, and a further
    // redelivery takes nothing more.
    set_stock(&client, stock.as_str(), 1).await;
    for _ in 0..2 {
        let again = streams::process(&handler, LambdaEvent::new(event.clone(), Context::default()), &options).await;
        assert!(again.batch_item_failures.is_empty(), "{:?}", again.batch_item_failures);
    }
    let left = client
        .get_item()
        .table_name(stock.as_str())
        .key("pk", AttributeValue::S("sku-1".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let n = left.item().and_then(|item| item.get("n")).and_then(|n| n.as_n().ok()).cloned();
    assert_eq!(n.as_deref(), Some("0"), "one unit reserved, once");
}
