//! The projector on the local AWS: a transient failure at record 2 of 4 is the checkpoint, and
//! redelivering from it projects every order once; a put refused past the dedup window (a
//! permanent answer) is no checkpoint, so the orders behind it are projected.

use crate::support::{item, number, projector, LoseAnswer};
use effectively_once_effects::testing::unique_name;
use effectively_once_lambda::events::{Context, LambdaEvent};
use effectively_once_lambda::streams::{self, Options};
use effectively_once_lambda::testing::streams::Batch;
use serde_json::json;

/// Four inserts; the second's transaction lands but its answer is lost. The first invocation
/// reports record 2's sequence number (the checkpoint); Lambda redelivers records 2..4, and
/// each order is projected once: four rows, and the customer's totals count four orders.
#[tokio::test]
async fn a_transient_failure_at_record_2_checkpoints_and_the_redelivery_projects_each_order_once() {
    let (handler, client, _) = projector(LoseAnswer::nth(2)).await;
    let projections = handler.projections.name().to_owned();

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

/// A bad deploy: the idempotency table named is not there (a stack of another stage, a name
/// mistyped), so DynamoDB refuses every call with a ResourceNotFoundException, an answer no
/// retry changes. It is no verdict on the order, so the shard must not go past it: the first order
/// is the checkpoint, on the record-at-a-time path and the batch path alike, until the fix; then
/// each order projects once.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_the_store_refuses_for_good_is_the_checkpoint_until_the_fix() {
    let (fixed, client, _) = projector(LoseAnswer::default()).await;
    let store = effectively_once_dynamodb::DynamoDbStore::new(client.clone(), unique_name("idem-not-created"));
    let broken = streams_consumer::Projector {
        idempotency: effectively_once::Idempotency::new(store, effectively_once::Config::default()),
        projections: fixed.projections.clone(),
    };
    let projections = fixed.projections.name().to_owned();
    let customer = unique_name("cust");
    let orders: Vec<String> = (1..=2).map(|n| unique_name(&format!("ord{n}"))).collect();
    let event = orders
        .iter()
        .fold(Batch::new("orders", &["pk"]), |batch, id| {
            batch
                .insert(json!({"pk": format!("order#{id}"), "order_id": id, "customer_id": customer, "total_cents": 5}))
        })
        .build();
    let first = event.records[0].change.sequence_number.clone();
    let options = Options { emit_metrics: false, ..Options::new("streams-consumer") };

    let alone = streams::process(&broken, LambdaEvent::new(event.clone(), Context::default()), &options).await;
    let checkpoint: Vec<_> = alone.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    assert_eq!(checkpoint, vec![first.clone()], "one at a time: the first order is the checkpoint");
    let batched = streams::process_batch(&broken, LambdaEvent::new(event.clone(), Context::default()), &options).await;
    let checkpoint: Vec<_> = batched.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    assert_eq!(checkpoint, vec![first], "the batch path: the first order is the checkpoint");
    assert!(item(&client, &projections, &format!("order#{}", orders[0])).await.is_none());

    // The fix; Lambda redelivers from the checkpoint: each order projects once.
    let done = streams::process_batch(&fixed, LambdaEvent::new(event, Context::default()), &options).await;
    assert!(done.batch_item_failures.is_empty(), "{:?}", done.batch_item_failures);
    let totals = item(&client, &projections, &format!("customer#{customer}")).await;
    assert_eq!((number(&totals, "order_count"), number(&totals, "total_cents")), (Some(2), Some(10)), "{totals:?}");
}

/// A refused put past the dedup window is permanent, not the checkpoint.
mod past_the_window {
    use std::sync::Arc;
    use std::time::Duration;

    use aws_sdk_dynamodb::types::AttributeValue;
    use effectively_once::{Config, Idempotency, ManualClock};
    use effectively_once_dynamodb::testing::fresh_store;
    use effectively_once_dynamodb::Table;
    use effectively_once_effects::testing::{fresh_table, unique_name, KeyAttribute};
    use effectively_once_lambda::events::{Context, LambdaEvent};
    use effectively_once_lambda::streams::{self, Options};
    use effectively_once_lambda::testing::streams::Batch;
    use serde_json::json;
    use streams_consumer::Projector;

    /// A dedup window of one hour; the shard redelivers record 1 (already projected) and a new
    /// record 2 two hours later (a stalled shard, a bisected batch). The record of order 1 has
    /// expired, so its put is refused: `commit_once` answers a non-retryable error, which must stay
    /// permanent as a record error, or the driver would checkpoint on it forever: order 2, behind
    /// it, is projected.
    #[tokio::test]
    async fn a_refused_put_past_the_window_does_not_stall_the_shard() {
        let (store, _) = fresh_store().await;
        let client = store.client().clone();
        let projections = fresh_table(&client, "projections", KeyAttribute::string("pk"), None).await;
        let clock = Arc::new(ManualClock::new());
        let config = Config::default().with_clock(clock.clone()).with_dedup_window(Duration::from_secs(3600));
        let handler = Projector {
            idempotency: Idempotency::new(store, config),
            projections: Table::new(projections.as_str(), "pk"),
        };
        let customer = unique_name("cust");
        let (first, second) = (unique_name("ord1"), unique_name("ord2"));
        let image = |id: &str| json!({"pk": format!("order#{id}"), "order_id": id, "customer_id": customer, "total_cents": 100});
        let options = Options { emit_metrics: false, ..Options::new("streams-consumer") };

        let once = Batch::new("orders", &["pk"]).insert(image(&first)).build();
        let done = streams::process(&handler, LambdaEvent::new(once, Context::default()), &options).await;
        assert!(done.batch_item_failures.is_empty(), "{:?}", done.batch_item_failures);

        clock.advance(Duration::from_secs(2 * 3600));
        let again = Batch::new("orders", &["pk"]).insert(image(&first)).insert(image(&second)).build();
        let response = streams::process(&handler, LambdaEvent::new(again, Context::default()), &options).await;
        let out = client
            .get_item()
            .table_name(&projections)
            .key("pk", AttributeValue::S(format!("order#{second}")))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        assert!(
            response.batch_item_failures.is_empty() && out.item().is_some(),
            "the shard is checkpointed at an already projected record: {:?}",
            response.batch_item_failures
        );
    }
}
