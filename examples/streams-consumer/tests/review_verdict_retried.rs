//! Review (issue 14): a verdict of `commit_once` (a put refused with no `otherwise`, which the
//! library reports as not retryable) converts into a *retryable* record error, so on a stream
//! the driver checkpoints at an already projected record and the shard stalls behind it.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, Idempotency, ManualClock};
use effectively_once_dynamodb::testing::fresh_store;
use effectively_once_dynamodb::Table;
use effectively_once_effects::testing::streams::Batch;
use effectively_once_effects::testing::{fresh_table, unique_name, KeyAttribute};
use effectively_once_lambda::events::{Context, LambdaEvent};
use effectively_once_lambda::streams::{self, Options};
use serde_json::json;
use streams_consumer::Projector;

/// A dedup window of one hour; the shard redelivers record 1 (already projected) and a new
/// record 2 two hours later (a stalled shard, a bisected batch). The record of order 1 has
/// expired, so its put is refused: `commit_once` answers a non-retryable error. The driver must
/// not checkpoint on it forever: order 2, behind it, must be projected.
#[tokio::test]
async fn a_refused_put_past_the_window_does_not_stall_the_shard() {
    let (store, _) = fresh_store().await;
    let client = store.client().clone();
    let projections = fresh_table(&client, "projections", KeyAttribute::string("pk"), None).await;
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_clock(clock.clone()).with_dedup_window(Duration::from_secs(3600));
    let handler =
        Projector { idempotency: Idempotency::new(store, config), projections: Table::new(projections.as_str(), "pk") };
    let customer = unique_name("cust");
    let (first, second) = (unique_name("ord1"), unique_name("ord2"));
    let image =
        |id: &str| json!({"pk": format!("order#{id}"), "order_id": id, "customer_id": customer, "total_cents": 100});
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
