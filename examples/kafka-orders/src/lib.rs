//! A Kafka consumer (Amazon MSK or self-managed Apache Kafka): each order on the topic is stored
//! once and counted once in its customer's totals, however often Kafka delivers it. The handler
//! below is the whole of it.
//!
//! The record's key is the customer (producers partition by it, so a customer's orders keep their
//! order); its value is the order, JSON. The idempotency key is the order id in the value, never
//! the offset: a producer that retries a send whose answer it lost writes the same order again at
//! a new offset, and a consumer group that rebalances delivers records again. Both find the
//! order's record and add nothing.
#![warn(missing_docs)]

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Error, Idempotency, Key};
use effectively_once_dynamodb::{CommitOnce, DynamoDbStore, Table, Tx};
use effectively_once_lambda::events::{Context, KafkaRecord};
use effectively_once_lambda::kafka::key_bytes;
use effectively_once_lambda::{BodyHandler, Handled, RecordError, RecordResult};
use serde::{Deserialize, Serialize};

/// The prefix of an order's idempotency record (`order#{order_id}`) and of its item.
pub const PREFIX: &str = "order";

/// The record's value: a JSON object (other fields, such as `email`, are ignored).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    /// The business id: the idempotency key.
    pub order_id: String,
    /// The order's total.
    pub total_cents: i64,
}

/// The order's item in the orders table (partition key `id`).
#[derive(Serialize)]
struct OrderItem<'a> {
    id: String,
    customer_id: &'a str,
    total_cents: i64,
}

/// Stores each order and adds it to its customer's totals, once. Serve it as
/// `kafka::run(Typed(orders), options)`: the value is decoded into an [`Order`] first, and a
/// record whose value is not one fails alone, permanently (parked, not delivered again).
pub struct Orders {
    /// The orders' records, in the idempotency table.
    pub idempotency: Idempotency<DynamoDbStore>,
    /// The orders table (partition key `id`): `order#{order_id}` items and `customer#{id}` totals.
    pub orders: Table,
}

/// The customer: the record's key, as UTF-8 text.
fn customer_of(record: &KafkaRecord) -> Result<String, RecordError> {
    let key = key_bytes(record).ok_or_else(|| RecordError::permanent("an order without a customer key"))?;
    String::from_utf8(key).map_err(|_| RecordError::permanent("a customer key that is not UTF-8"))
}

impl Orders {
    /// The order's item, and the customer's totals raised by it: in one transaction with the
    /// order's record, so a delivery that finds the record adds nothing to the totals.
    fn writes(&self, order: &Order, customer_id: &str, tx: &mut Tx<()>) -> Result<(), Error> {
        let item =
            OrderItem { id: format!("{PREFIX}#{}", order.order_id), customer_id, total_cents: order.total_cents };
        tx.put(&self.orders, &item)?;
        let totals = HashMap::from([("id", format!("customer#{customer_id}"))]);
        tx.update(&self.orders, &totals, |update| {
            update
                .update_expression("ADD order_count :one, total_cents :total")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .expression_attribute_values(":total", AttributeValue::N(order.total_cents.to_string()))
        })?;
        Ok(())
    }
}

impl BodyHandler<KafkaRecord> for Orders {
    type Body = Order;

    async fn handle(&self, order: Order, record: &KafkaRecord, _context: &Context) -> RecordResult {
        let customer_id = customer_of(record)?;
        let key = Key::new(PREFIX, &order.order_id)?;
        // A store failure converts to a retryable RecordError: the driver names this record and
        // the rest of its partition in the answer, and Lambda delivers them again.
        let stored = self.idempotency.commit_once(&key, &order, |tx| self.writes(&order, &customer_id, tx)).await?;
        Ok(if stored.is_replay() { Handled::Duplicate } else { Handled::Applied })
    }

    /// Two copies of one order in a batch (a producer's retry) run one after the other, even on
    /// two partitions: the second finds the first's record, not its claim in progress.
    fn key(&self, order: &Order) -> Option<String> {
        Some(order.order_id.clone())
    }
}
