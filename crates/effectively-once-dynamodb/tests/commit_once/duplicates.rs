//! The high-level commit once (`CommitOnce::commit_once`) against DynamoDB (the local AWS, or
//! `AWS_ENDPOINT_URL`): what it writes, what a duplicate gets, and that no setting writes twice.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Config, ErrorKind, Idempotency, Key, ManualClock, Outcome, Retry};
use effectively_once_dynamodb::testing::fresh_store_and_table;
use effectively_once_dynamodb::{carried, CommitOnce, DynamoDbStore, Otherwise, Table, Tx};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Order {
    id: String,
    total_cents: i64,
}

#[derive(Serialize)]
struct CounterKey<'a> {
    id: &'a str,
}

/// A store, and a table of the caller's own keyed by `id`.
async fn setup() -> (DynamoDbStore, Table) {
    fresh_store_and_table("orders").await
}

/// The order item, a counter bumped in the same transaction (a second commit would show), and
/// the count of items in the caller's table.
fn order_and_count(tx: &mut Tx<String>, table: &Table, order: &Order) -> Result<String, effectively_once::Error> {
    tx.put(table, order)?;
    tx.update(table, &CounterKey { id: "counter" }, |u| {
        u.update_expression("ADD #n :one")
            .expression_attribute_names("#n", "n")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
    })?;
    Ok(format!("stored {}", order.id))
}

async fn counter(store: &DynamoDbStore, table: &Table) -> Option<String> {
    let out = store
        .client()
        .get_item()
        .table_name(table.name())
        .key("id", AttributeValue::S("counter".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item().and_then(|i| i.get("n")).and_then(|v| v.as_n().ok()).cloned()
}

async fn item(store: &DynamoDbStore, table: &Table, id: &str) -> Option<aws_sdk_dynamodb::types::AttributeValue> {
    let out = store
        .client()
        .get_item()
        .table_name(table.name())
        .key("id", AttributeValue::S(id.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item().map(|i| AttributeValue::M(i.clone()))
}

/// The defaults cannot write twice: the record is written with the dedup window from the commit
/// (a record born expired would answer `Fresh` again), so a second commit of the key replays.
#[tokio::test]
async fn with_default_settings_a_second_commit_replays_and_writes_nothing() {
    let (store, orders) = setup().await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    let order = Order { id: "order-1".into(), total_cents: 4200 };
    let key = Key::new("orders", &order.id).unwrap();
    let first = idempotency.commit_once(&key, &order, |tx| order_and_count(tx, &orders, &order)).await.unwrap();
    assert_eq!(first, Outcome::Fresh("stored order-1".to_owned()));
    let second = idempotency.commit_once(&key, &order, |tx| order_and_count(tx, &orders, &order)).await.unwrap();
    assert_eq!(second, Outcome::Replayed("stored order-1".to_owned()));
    assert_eq!(counter(&store, &orders).await.as_deref(), Some("1"), "the transaction committed once");
    let record = effectively_once::Store::get(&store, key.as_str()).await.unwrap().expect("the record");
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let window = Config::default().dedup_window().as_secs();
    assert!(record.expiration_s >= now_s + window - 60, "expires a dedup window after the commit: {record:?}");
    // Another payload under the key is key reuse, and writes nothing.
    let other = Order { total_cents: 1, ..order.clone() };
    let reused = idempotency.commit_once(&key, &other, |tx| order_and_count(tx, &orders, &other)).await.unwrap_err();
    assert_eq!(reused.kind(), ErrorKind::KeyReused);
    assert_eq!(counter(&store, &orders).await.as_deref(), Some("1"));
}

/// Past the dedup window the record no longer blocks, but the put's own condition does: the
/// order is not written twice, and the error is permanent (the message ends in the DLQ).
#[tokio::test]
async fn past_the_window_the_put_still_refuses_to_replace_the_item() {
    let (store, orders) = setup().await;
    let clock = Arc::new(ManualClock::new());
    let config = Config::default().with_clock(clock.clone()).with_dedup_window(Duration::from_secs(60));
    let idempotency = Idempotency::new(store.clone(), config);
    let order = Order { id: "order-2".into(), total_cents: 100 };
    let key = Key::new("orders", &order.id).unwrap();
    idempotency.commit_once(&key, &order, |tx| order_and_count(tx, &orders, &order)).await.unwrap();
    clock.advance(Duration::from_secs(3600));
    let error = idempotency.commit_once(&key, &order, |tx| order_and_count(tx, &orders, &order)).await.unwrap_err();
    assert_eq!(error.retry(), Retry::AfterFix, "{error}");
    assert_eq!(counter(&store, &orders).await.as_deref(), Some("1"));
}

/// A zero dedup window still writes a record that blocks a second commit in the same second.
#[tokio::test]
async fn a_zero_window_is_not_a_record_born_expired() {
    let (store, orders) = setup().await;
    let config = Config::default().with_dedup_window(Duration::ZERO);
    let idempotency = Idempotency::new(store.clone(), config);
    let order = Order { id: "order-3".into(), total_cents: 100 };
    let key = Key::new("orders", &order.id).unwrap();
    idempotency.commit_once(&key, &order, |tx| order_and_count(tx, &orders, &order)).await.unwrap();
    let again = idempotency.commit_once(&key, &order, |tx| order_and_count(tx, &orders, &order)).await;
    assert!(matches!(again, Ok(Outcome::Replayed(_))), "{again:?}");
    assert_eq!(counter(&store, &orders).await.as_deref(), Some("1"));
}

/// A carried record lives on the caller's item under reserved names, next to a business field
/// called `response` that it must not overwrite; a duplicate replays from it.
#[tokio::test]
async fn a_carried_record_keeps_to_its_reserved_names() {
    #[derive(Serialize)]
    struct Ticket<'a> {
        id: &'a str,
        response: &'a str,
        payload_hash: &'a str,
    }
    let (store, tickets) = setup().await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    let key = Key::new("tickets", "t-1").unwrap();
    let ticket = Ticket { id: "ticket#t-1", response: "the customer's words", payload_hash: "theirs" };
    let build = |tx: &mut Tx<u32>| {
        let put = tx.put(&tickets, &ticket)?;
        tx.carry_record(put)?;
        Ok(7)
    };
    assert_eq!(idempotency.commit_once(&key, "t-1", build).await.unwrap(), Outcome::Fresh(7));
    assert_eq!(idempotency.commit_once(&key, "t-1", build).await.unwrap(), Outcome::Replayed(7));
    let Some(AttributeValue::M(stored)) = item(&store, &tickets, "ticket#t-1").await else { panic!("the ticket") };
    assert_eq!(stored["response"], AttributeValue::S("the customer's words".into()));
    assert_eq!(stored["payload_hash"], AttributeValue::S("theirs".into()));
    assert_eq!(stored[carried::RESPONSE], AttributeValue::S("7".into()));
    assert!(effectively_once::Store::get(&store, key.as_str()).await.unwrap().is_none(), "no own record");

    // An item that already uses the reserved prefix is refused before anything is sent.
    #[derive(Serialize)]
    struct Sneaky<'a> {
        id: &'a str,
        __once_response: &'a str,
    }
    let key = Key::new("tickets", "t-2").unwrap();
    let refused = idempotency
        .commit_once(&key, "t-2", |tx: &mut Tx<u32>| {
            let put = tx.put(&tickets, &Sneaky { id: "ticket#t-2", __once_response: "9" })?;
            tx.carry_record(put)?;
            Ok(7)
        })
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("reserved") || format!("{refused:?}").contains("reserved"), "{refused:?}");
    assert!(item(&store, &tickets, "ticket#t-2").await.is_none());
}

/// A failed business condition answers through `otherwise`: the answer is recorded, so a
/// duplicate gets it even after the condition would pass, and nothing is written.
#[tokio::test]
async fn a_business_refusal_is_recorded_and_replayed() {
    let (store, accounts) = setup().await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Answer {
        Taken,
        Refused { had: i64 },
    }
    let take = |tx: &mut Tx<Answer>| {
        let take = tx.update(&accounts, &CounterKey { id: "counter" }, |u| {
            u.update_expression("ADD #n :minus")
                .condition_expression("#n >= :one")
                .expression_attribute_names("#n", "n")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .expression_attribute_values(":minus", AttributeValue::N("-1".into()))
        })?;
        tx.otherwise(take, |old| {
            let had = old.and_then(|i| i.get("n")).and_then(|n| n.as_n().ok()).and_then(|n| n.parse().ok());
            Otherwise::Answer(Answer::Refused { had: had.unwrap_or(0) })
        });
        Ok(Answer::Taken)
    };
    let key = Key::new("take", "one").unwrap();
    assert_eq!(idempotency.commit_once(&key, "one", take).await.unwrap(), Outcome::Fresh(Answer::Refused { had: 0 }));
    // Funds arrive; the duplicate still gets the first answer and takes nothing.
    let fund = |tx: &mut Tx<Answer>| {
        tx.update(&accounts, &CounterKey { id: "counter" }, |u| {
            u.update_expression("ADD #n :one")
                .expression_attribute_names("#n", "n")
                .expression_attribute_values(":one", AttributeValue::N("5".into()))
        })?;
        Ok(Answer::Taken)
    };
    idempotency.commit_once(&Key::new("fund", "f").unwrap(), "f", fund).await.unwrap();
    assert_eq!(
        idempotency.commit_once(&key, "one", take).await.unwrap(),
        Outcome::Replayed(Answer::Refused { had: 0 })
    );
    assert_eq!(counter(&store, &accounts).await.as_deref(), Some("5"));
    // A failed condition with no `otherwise` is a permanent error, and writes nothing.
    let key = Key::new("take", "two").unwrap();
    let bare = |tx: &mut Tx<Answer>| {
        tx.check(&accounts, &CounterKey { id: "counter" }, |c| {
            c.condition_expression("#n > :many")
                .expression_attribute_names("#n", "n")
                .expression_attribute_values(":many", AttributeValue::N("100".into()))
        })?;
        tx.put(&accounts, &Order { id: "two".into(), total_cents: 1 })?;
        Ok(Answer::Taken)
    };
    let error = idempotency.commit_once(&key, "two", bare).await.unwrap_err();
    assert_eq!(error.retry(), Retry::AfterFix, "{error}");
    assert!(item(&store, &accounts, "two").await.is_none());
}

/// An effect that is there without a record answers as a duplicate, or as key reuse when it
/// shows another payload.
#[tokio::test]
async fn an_effect_without_a_record_answers_through_otherwise() {
    let (store, orders) = setup().await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    let order = Order { id: "order-4".into(), total_cents: 300 };
    store
        .client()
        .put_item()
        .table_name(orders.name())
        .set_item(Some(serde_dynamo::to_item(&order).unwrap()))
        .send()
        .await
        .unwrap();
    let orders = &orders;
    let build = |order: Order| {
        move |tx: &mut Tx<String>| {
            let put = tx.put(orders, &order)?;
            tx.otherwise(put, move |old| {
                let same = old.and_then(|i| i.get("total_cents")).and_then(|n| n.as_n().ok())
                    == Some(&order.total_cents.to_string());
                Otherwise::AlreadyApplied { response: "stored".into(), same_payload: same }
            });
            Ok("stored".to_owned())
        }
    };
    let key = Key::new("orders", "order-4").unwrap();
    let same = idempotency.commit_once(&key, &order, build(order.clone())).await.unwrap();
    assert_eq!(same, Outcome::Replayed("stored".to_owned()));
    let other = Order { total_cents: 301, ..order.clone() };
    let error = idempotency.commit_once(&key, &other, build(other.clone())).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::KeyReused);
    assert!(effectively_once::Store::get(&store, key.as_str()).await.unwrap().is_none(), "nothing recorded");
}

/// What no setting can do is write twice within the window: a zero dedup window still keeps the
/// record long enough that a transaction of updates alone (no put to refuse the second time) is
/// not applied again by a redelivery seconds later (an SQS visibility timeout is 30 s by default).
mod zero_window {
    use std::sync::Arc;
    use std::time::Duration;

    use aws_sdk_dynamodb::types::AttributeValue;
    use effectively_once::{Config, Idempotency, Key, ManualClock};
    use effectively_once_dynamodb::testing::fresh_store_and_table;
    use effectively_once_dynamodb::{CommitOnce, Tx};
    use serde::Serialize;

    #[derive(Serialize)]
    struct Id<'a> {
        id: &'a str,
    }

    #[tokio::test]
    async fn a_zero_window_does_not_apply_an_update_twice() {
        let (store, table) = fresh_store_and_table("review-counter").await;
        let clock = Arc::new(ManualClock::new());
        let config = Config::default().with_clock(clock.clone()).with_dedup_window(Duration::ZERO);
        let idempotency = Idempotency::new(store.clone(), config);
        let key = Key::new("add", "e-1").unwrap();
        let add = |tx: &mut Tx<()>| {
            tx.update(&table, &Id { id: "counter" }, |u| {
                u.update_expression("ADD #n :one")
                    .expression_attribute_names("#n", "n")
                    .expression_attribute_values(":one", AttributeValue::N("1".into()))
            })?;
            Ok(())
        };
        let first = idempotency.commit_once(&key, "e-1", add).await;
        clock.advance(Duration::from_secs(30));
        let redelivery = idempotency.commit_once(&key, "e-1", add).await;
        let n = super::counter(&store, &table).await;
        assert_eq!(n.as_deref(), Some("1"), "applied twice: {first:?} then {redelivery:?}");
    }
}
