//! A Kinesis Data Streams consumer: each order on the stream is stored once in the orders table
//! and confirmed once by email, however often Kinesis delivers it. The handler below is the
//! whole of it.
//!
//! The key is the order id in the record's data, never the record's sequence number: a producer
//! that retries a `PutRecord` whose answer it lost writes the same order again under a new
//! sequence number, a resharded stream can deliver a record again, and a batch that failed is
//! delivered again from its checkpoint. All of them find the order's record and add nothing.
#![warn(missing_docs)]

use effectively_once::{Idempotency, Key};
use effectively_once_dynamodb::{CommitOnce, DynamoDbStore, Table};
use effectively_once_effects::{send_once, EmailMessage, EmailSender, Policy};
use effectively_once_lambda::events::{Context, KinesisEventRecord};
use effectively_once_lambda::{BodyHandler, Handled, RecordResult};
use serde::{Deserialize, Serialize};

/// The prefix of an order's idempotency record (`order#{order_id}`), and of its item in the
/// orders table. The deployment's role may write only records under this prefix and
/// [`EMAIL_PREFIX`].
pub const PREFIX: &str = "order";

/// The prefix of an order's confirmation marker (`order-email#{order_id}`).
pub const EMAIL_PREFIX: &str = "order-email";

/// The record's data: a JSON object with these three fields.
#[derive(Debug, Clone, Serialize)]
pub struct Order {
    /// The business id: the idempotency key.
    pub order_id: String,
    /// Where the confirmation goes.
    pub email: String,
    /// The order's total.
    pub total_cents: i64,
}

/// The order's fields, as serde's derive reads them.
#[derive(Deserialize)]
struct Fields {
    order_id: String,
    email: String,
    total_cents: i64,
}

/// An order is a JSON object only. serde's derive also builds a struct from a sequence of its
/// fields in order, so `["order", "x", 100]` would be an order to the address `x`: the data is
/// read as a map first, which a sequence is not.
impl<'de> Deserialize<'de> for Order {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let Fields { order_id, email, total_cents } =
            serde_json::from_value(serde_json::Value::Object(map)).map_err(serde::de::Error::custom)?;
        Ok(Order { order_id, email, total_cents })
    }
}

/// The orders table's item (partition key `pk`).
#[derive(Serialize)]
struct OrderItem<'a> {
    pk: String,
    order_id: &'a str,
    total_cents: i64,
}

/// Stores each order and sends its confirmation, once each. Serve it as
/// `kinesis::run(Typed(orders), options)`: the data is decoded into an [`Order`] first, and a
/// record whose data is not one fails alone, permanently (logged, counted, not the checkpoint).
pub struct Orders<E> {
    /// Records (the order's, the email's marker) in the idempotency table.
    pub idempotency: Idempotency<DynamoDbStore>,
    /// The orders table.
    pub orders: Table,
    /// The email sender (SES in production).
    pub sender: E,
}

impl<E: EmailSender> BodyHandler<KinesisEventRecord> for Orders<E> {
    type Body = Order;

    async fn handle(&self, order: Order, _record: &KinesisEventRecord, context: &Context) -> RecordResult {
        tracing::Span::current().record("order_id", order.order_id.as_str());
        let key = Key::new(PREFIX, &order.order_id)?;
        let item = OrderItem {
            pk: format!("{PREFIX}#{}", order.order_id),
            order_id: &order.order_id,
            total_cents: order.total_cents,
        };
        let stored = self
            .idempotency
            .commit_once(&key, &order, |tx| {
                tx.put(&self.orders, &item)?;
                Ok(())
            })
            .await?;
        let email = EmailMessage {
            to: order.email.clone(),
            subject: format!("Order {} confirmed", order.order_id),
            text: format!("We have your order; its total is {} cents.", order.total_cents),
        };
        // The marker's lease ends with the invocation: a batch retried after a timeout finds it
        // lapsed rather than waiting out a fixed lease.
        let markers = self.idempotency.with_deadline(context.deadline);
        let email_key = Key::new(EMAIL_PREFIX, &order.order_id)?;
        send_once(&markers, &self.sender, &email_key, &email, Policy::AtMostOnce).await?;
        Ok(if stored.is_replay() { Handled::Duplicate } else { Handled::Applied })
    }

    /// Two copies of one order in a batch (a producer retry, even under another partition key)
    /// run one after the other: the second is answered from the first.
    fn key(&self, order: &Order) -> Option<String> {
        Some(order.order_id.clone())
    }

    fn span(&self, _record: &KinesisEventRecord) -> tracing::Span {
        tracing::info_span!("order", order_id = tracing::field::Empty)
    }
}
