//! An orders consumer: each order from SQS is stored once in the orders table and confirmed
//! once by email, however often SQS delivers it. The handler below is the whole of it.

use effectively_once::{Idempotency, Key};
use effectively_once_dynamodb::{CommitOnce, DynamoDbStore, Table};
use effectively_once_effects::{send_once, EmailMessage, EmailSender, Policy};
use effectively_once_lambda::events::Context;
use effectively_once_lambda::events::SqsMessage;
use effectively_once_lambda::Handler;
use effectively_once_lambda::{Handled, RecordError, RecordResult};
use serde::{Deserialize, Serialize};

/// The message body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    /// The business id: the idempotency key.
    pub order_id: String,
    /// Where the confirmation goes.
    pub email: String,
    /// The order's total.
    pub total_cents: i64,
}

/// The orders table's item (partition key `pk`).
#[derive(Serialize)]
struct OrderItem<'a> {
    pk: String,
    order_id: &'a str,
    total_cents: i64,
}

/// Stores each order and sends its confirmation, once each.
pub struct Orders<E> {
    /// Records (the order's, the email's marker) in the idempotency table.
    pub idempotency: Idempotency<DynamoDbStore>,
    /// The orders table.
    pub orders: Table,
    /// The email sender (SES in production).
    pub sender: E,
}

fn parse(message: &SqsMessage) -> Result<Order, RecordError> {
    serde_json::from_str(message.body.as_deref().unwrap_or_default())
        .map_err(|e| RecordError::permanent(format!("not an order: {e}")))
}

impl<E: EmailSender> Handler<SqsMessage> for Orders<E> {
    async fn handle(&self, message: &SqsMessage, context: &Context) -> RecordResult {
        let order = parse(message)?;
        tracing::Span::current().record("order_id", order.order_id.as_str());
        let key = Key::new("orders", &order.order_id)?;
        let item = OrderItem {
            pk: format!("order#{}", order.order_id),
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
        let markers = self.idempotency.with_deadline(context.deadline);
        let email_key = Key::new("order-email", &order.order_id)?;
        send_once(&markers, &self.sender, &email_key, &email, Policy::AtMostOnce).await?;
        Ok(if stored.is_replay() { Handled::Duplicate } else { Handled::Applied })
    }

    /// Two copies of one order in a batch run one after the other: the second is answered.
    fn key(&self, message: &SqsMessage) -> Option<String> {
        parse(message).ok().map(|order| order.order_id)
    }

    fn span(&self, _message: &SqsMessage) -> tracing::Span {
        tracing::info_span!("order", order_id = tracing::field::Empty)
    }
}
