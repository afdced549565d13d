//! The projector on the local AWS: a transient failure at record 2 of 4 is the checkpoint, and
//! redelivering from it projects every order once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::{fresh_store, sdk_config};
use effectively_once_dynamodb::{DynamoDbStore, Table};
use effectively_once_effects::testing::streams::Batch;
use effectively_once_effects::testing::{fresh_table, unique_name, KeyAttribute};
use effectively_once_lambda::events::{Context, LambdaEvent};
use effectively_once_lambda::streams::{self, Options};
use serde_json::json;
use streams_consumer::Projector;

/// Loses the answer of the `nth` TransactWriteItems (from 1): DynamoDB applies it, the client
/// sees an error. The worst transient failure: the effect may or may not have happened.
#[derive(Debug, Clone, Default)]
struct LoseAnswer {
    nth: usize,
    seen: Arc<AtomicUsize>,
    losing: Arc<AtomicBool>,
}

impl Intercept for LoseAnswer {
    fn name(&self) -> &'static str {
        "LoseAnswer"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let target = context.request().headers().get("x-amz-target").unwrap_or_default();
        if target.ends_with(".TransactWriteItems") && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.nth {
            self.losing.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    fn read_after_transmit(
        &self,
        _: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match self.losing.swap(false, Ordering::SeqCst) {
            true => Err("the answer was lost".into()),
            false => Ok(()),
        }
    }
}

async fn item(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    pk: &str,
) -> Option<aws_sdk_dynamodb::types::AttributeValue> {
    let out = client.get_item().table_name(table).key("pk", AttributeValue::S(pk.into())).consistent_read(true);
    let out = out.send().await.unwrap();
    out.item().map(|item| AttributeValue::M(item.clone()))
}

fn number(item: &Option<AttributeValue>, attribute: &str) -> Option<i64> {
    let AttributeValue::M(item) = item.as_ref()? else { return None };
    item.get(attribute)?.as_n().ok()?.parse().ok()
}

/// Four inserts; the second's transaction lands but its answer is lost. The first invocation
/// reports record 2's sequence number (the checkpoint); Lambda redelivers records 2..4, and
/// each order is projected once: four rows, and the customer's totals count four orders.
#[tokio::test]
async fn a_transient_failure_at_record_2_checkpoints_and_the_redelivery_projects_each_order_once() {
    let (store, _) = fresh_store().await;
    let fault = LoseAnswer { nth: 2, ..LoseAnswer::default() };
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await).interceptor(fault).build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    let projections = fresh_table(&client, "projections", KeyAttribute::string("pk"), None).await;
    let handler = Projector {
        idempotency: Idempotency::new(DynamoDbStore::new(client.clone(), store.table()), Config::default()),
        projections: Table::new(projections.as_str(), "pk"),
    };

    let customer = unique_name("cust");
    let orders: Vec<String> = (1..=4).map(|n| unique_name(&format!("ord{n}"))).collect();
    let batch = orders.iter().enumerate().fold(Batch::new("orders", &["pk"]), |batch, (n, id)| {
        batch.insert(
            json!({"pk": format!("order#{id}"), "order_id": id, "customer_id": customer, "total_cents": 100 * (n + 1)}),
        )
    });
    let event = batch.build();
    let sequence = |i: usize| event.records[i].change.sequence_number.clone().unwrap();
    let options = Options { emit_metrics: false, ..Options::new("streams-consumer") };

    let first = streams::process(&handler, LambdaEvent::new(event.clone(), Context::default()), &options).await;
    let checkpoint: Vec<_> = first.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    assert_eq!(checkpoint, vec![Some(sequence(1))], "record 2 is the checkpoint");
    let landed = item(&client, &projections, &format!("order#{}", orders[1])).await;
    assert!(landed.is_some(), "record 2's transaction landed; only its answer was lost");
    assert!(item(&client, &projections, &format!("order#{}", orders[2])).await.is_none(), "record 3 not started");

    // Lambda resumes the shard at the checkpoint: records 2, 3 and 4 again.
    let mut redelivery = event.clone();
    redelivery.records.retain(|record| record.change.sequence_number >= Some(sequence(1)));
    assert_eq!(redelivery.records.len(), 3);
    let second = streams::process(&handler, LambdaEvent::new(redelivery, Context::default()), &options).await;
    assert!(second.batch_item_failures.is_empty(), "{:?}", second.batch_item_failures);

    for id in &orders {
        let row = item(&client, &projections, &format!("order#{id}")).await;
        assert!(row.is_some(), "order {id} projected");
    }
    let totals = item(&client, &projections, &format!("customer#{customer}")).await;
    assert_eq!(number(&totals, "order_count"), Some(4), "each order counted once: {totals:?}");
    assert_eq!(number(&totals, "total_cents"), Some(100 + 200 + 300 + 400));
}
