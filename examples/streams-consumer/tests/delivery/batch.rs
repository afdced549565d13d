//! The projector's batch path (`streams::process_batch`, what `main` serves) on the local AWS:
//! a batch of orders is one transaction; an order seen twice, a record that is not an order
//! (parked), and a lost answer each leave every order projected once and the checkpoint exact.

use crate::support::park::ParkQueue;
use crate::support::{item, number, projector, LoseAnswer};
use effectively_once_effects::testing::unique_name;
use effectively_once_lambda::events::{Context, DynamoDbEvent, DynamoDbEventResponse, LambdaEvent};
use effectively_once_lambda::park::{Coordinates, Parcel};
use effectively_once_lambda::streams::{self, Options};
use effectively_once_lambda::testing::streams::Batch;
use serde_json::{json, Value};
use streams_consumer::Projector;

fn order(id: &str, customer: &str, total_cents: i64) -> Value {
    json!({"pk": format!("order#{id}"), "order_id": id, "customer_id": customer, "total_cents": total_cents})
}

/// One invocation, as `main` serves the projector: its poison parked in a queue of the
/// invocation's own (`PARK_QUEUE_URL`). The answer, and the parcels parked.
async fn deliver(handler: &Projector, event: &DynamoDbEvent) -> (DynamoDbEventResponse, Vec<Parcel>) {
    let park = ParkQueue::fresh("streams-park").await;
    let options = Options { emit_metrics: false, ..Options::new("streams-consumer") }.park_in(park.destination());
    let response = streams::process_batch(handler, LambdaEvent::new(event.clone(), Context::default()), &options).await;
    (response, park.drain().await)
}

/// `parked` holds `record`'s parcel alone: the record as delivered, at its sequence number.
fn assert_parked_alone(parked: &[Parcel], record: &effectively_once_lambda::events::EventRecord) {
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].trigger, "aws:dynamodb");
    let sequence_number = record.change.sequence_number.clone().unwrap();
    assert_eq!(parked[0].coordinates, Coordinates::DynamoDb { sequence_number });
    assert_eq!(parked[0].record, serde_json::to_value(record).unwrap(), "the record as delivered");
}

/// Five orders of two customers, the first inserted twice (a row written again), and a record
/// that is not an order: the five in one transaction, the repeat in a second (a change of an item
/// waits for the item's earlier one); each order's row once; each customer's totals count its
/// orders once; the bad record fails alone, is parked as delivered and is not the checkpoint.
#[tokio::test]
async fn a_batch_of_orders_is_one_transaction_and_each_order_counts_once() {
    let (handler, client, requests) = projector(LoseAnswer::default()).await;
    let table = handler.projections.name().to_owned();
    let (alice, bob) = (unique_name("cust"), unique_name("cust"));
    let ids: Vec<String> = (1..=5).map(|n| unique_name(&format!("ord{n}"))).collect();
    let mut batch = Batch::new("orders", &["pk"]);
    for (n, id) in ids.iter().enumerate() {
        batch = batch.insert(order(id, if n % 2 == 0 { &alice } else { &bob }, 100 * (n as i64 + 1)));
    }
    let event =
        batch.insert(order(&ids[0], &alice, 100)).insert(json!({"pk": "order#broken", "customer_id": alice})).build();

    let (response, parked) = deliver(&handler, &event).await;
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    assert_parked_alone(&parked, event.records.last().unwrap());
    let transactions = requests.by_operation().get("TransactWriteItems").copied();
    assert_eq!(transactions, Some(2), "the five orders in one transaction, the repeat after");
    for id in &ids {
        assert!(item(&client, &table, &format!("order#{id}")).await.is_some(), "order {id} projected");
    }
    let totals = |customer: String| {
        let (client, table) = (client.clone(), table.clone());
        async move { item(&client, &table, &format!("customer#{customer}")).await }
    };
    let (of_alice, of_bob) = (totals(alice.clone()).await, totals(bob.clone()).await);
    assert_eq!((number(&of_alice, "order_count"), number(&of_alice, "total_cents")), (Some(3), Some(100 + 300 + 500)));
    assert_eq!((number(&of_bob, "order_count"), number(&of_bob, "total_cents")), (Some(2), Some(200 + 400)));

    // The whole batch again (a lost answer to Lambda): nothing changes.
    let (again, parked) = deliver(&handler, &event).await;
    assert!(again.batch_item_failures.is_empty());
    assert_parked_alone(&parked, event.records.last().unwrap());
    let of_alice = totals(alice).await;
    assert_eq!(number(&of_alice, "order_count"), Some(3), "each order counted once: {of_alice:?}");
}

/// The batch's transaction lands but its answer is lost: the checkpoint is at or before the
/// first order, and the redelivery from it projects each order once.
#[tokio::test]
async fn a_lost_answer_to_the_batch_checkpoints_and_the_redelivery_counts_each_order_once() {
    let (handler, client, _) = projector(LoseAnswer::nth(1)).await;
    let table = handler.projections.name().to_owned();
    let customer = unique_name("cust");
    let ids: Vec<String> = (1..=3).map(|n| unique_name(&format!("ord{n}"))).collect();
    let event =
        ids.iter().fold(Batch::new("orders", &["pk"]), |batch, id| batch.insert(order(id, &customer, 100))).build();

    let (first, _) = deliver(&handler, &event).await;
    let mut redelivery = event.clone();
    if let Some(checkpoint) = first.batch_item_failures.first() {
        let at = event.records.iter().position(|r| r.change.sequence_number == checkpoint.item_identifier);
        redelivery.records.drain(..at.expect("the checkpoint is a record of the batch"));
        let (second, _) = deliver(&handler, &redelivery).await;
        assert!(second.batch_item_failures.is_empty(), "{:?}", second.batch_item_failures);
    }
    for id in &ids {
        assert!(item(&client, &table, &format!("order#{id}")).await.is_some(), "order {id} projected");
    }
    let totals = item(&client, &table, &format!("customer#{customer}")).await;
    assert_eq!(number(&totals, "order_count"), Some(3), "each order counted once: {totals:?}");
}

/// The ordered path (`streams::process_ordered`, what `main` serves): three items of two
/// customers, two of them inserted again later in the batch (several changes an item), in one
/// call and one transaction, where the rounds take a transaction per change of the busiest item;
/// both project each order once and count each customer's orders once.
#[tokio::test]
async fn several_changes_of_several_items_are_one_transaction_on_the_ordered_path() {
    let (alice, bob) = (unique_name("cust"), unique_name("cust"));
    let ids: Vec<String> = (1..=4).map(|n| unique_name(&format!("ord{n}"))).collect();
    let customer = |n: usize| if n.is_multiple_of(2) { &alice } else { &bob };
    let mut batch = Batch::new("orders", &["pk"]);
    for (n, id) in ids.iter().enumerate().take(3) {
        batch = batch.insert(order(id, customer(n), 100 * (n as i64 + 1)));
    }
    let event = batch
        .insert(order(&ids[0], &alice, 100))
        .insert(order(&ids[3], &bob, 400))
        .insert(order(&ids[1], &bob, 200))
        .insert(order(&ids[0], &alice, 100))
        .build();

    for ordered in [true, false] {
        let (handler, client, requests) = projector(LoseAnswer::default()).await;
        let park = ParkQueue::fresh("streams-park").await;
        let options = Options { emit_metrics: false, ..Options::new("streams-consumer") }.park_in(park.destination());
        let invocation = LambdaEvent::new(event.clone(), Context::default());
        let response = if ordered {
            streams::process_ordered(&handler, invocation, &options).await
        } else {
            streams::process_batch(&handler, invocation, &options).await
        };
        assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
        assert!(park.drain().await.is_empty());
        let transactions = requests.by_operation().get("TransactWriteItems").copied();
        let expected = if ordered { 1 } else { 3 };
        assert_eq!(transactions, Some(expected), "ordered {ordered}: {:?}", requests.by_operation());
        let table = handler.projections.name().to_owned();
        for id in &ids {
            assert!(item(&client, &table, &format!("order#{id}")).await.is_some(), "order {id} projected");
        }
        let of_alice = item(&client, &table, &format!("customer#{alice}")).await;
        let of_bob = item(&client, &table, &format!("customer#{bob}")).await;
        assert_eq!((number(&of_alice, "order_count"), number(&of_alice, "total_cents")), (Some(2), Some(100 + 300)));
        assert_eq!((number(&of_bob, "order_count"), number(&of_bob, "total_cents")), (Some(2), Some(200 + 400)));
    }
}
