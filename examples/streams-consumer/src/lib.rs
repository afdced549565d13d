//! A DynamoDB Streams consumer: each order inserted into the orders table is projected once
//! (an order row plus its customer's running totals, in one transaction with the record). A
//! transient failure fails that record, and the driver checkpoints there.
#![warn(missing_docs)]

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Idempotency, Key};
use effectively_once_dynamodb::{CommitOnce, DynamoDbStore, Table};
use effectively_once_lambda::events::Context;
use effectively_once_lambda::events::EventRecord;
use effectively_once_lambda::Handler;
use effectively_once_lambda::{Disposition, RecordError, RecordResult};
use serde::{Deserialize, Serialize};

/// The orders table's item, as the stream's new image carries it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    /// The business id: the idempotency key.
    pub order_id: String,
    /// Whose order.
    pub customer_id: String,
    /// The order's total.
    pub total_cents: i64,
}

/// The projection's row for one order (partition key `pk`).
#[derive(Serialize)]
struct OrderRow<'a> {
    pk: String,
    customer_id: &'a str,
    total_cents: i64,
}

/// Projects inserted orders, once each.
pub struct Projector {
    /// The orders' records, in the idempotency table.
    pub idempotency: Idempotency<DynamoDbStore>,
    /// The projection table (partition key `pk`): `order#{id}` rows and `customer#{id}` totals.
    pub projections: Table,
}

impl Handler<EventRecord> for Projector {
    async fn handle(&self, record: &EventRecord, _context: &Context) -> RecordResult {
        let order: Order = serde_dynamo::from_item(record.change.new_image.clone())
            .map_err(|e| RecordError::permanent(format!("not an order: {e}")))?;
        tracing::Span::current().record("order_id", order.order_id.as_str());
        let key = Key::new("order-projection", &order.order_id)?;
        let row = OrderRow {
            pk: format!("order#{}", order.order_id),
            customer_id: &order.customer_id,
            total_cents: order.total_cents,
        };
        let totals = [("pk", format!("customer#{}", order.customer_id))];
        // The row, the totals and the record commit together or not at all: a redelivered
        // record finds its record and adds nothing. A store failure converts to a retryable
        // RecordError, so the driver reports this record's sequence number as the checkpoint.
        let projected = self
            .idempotency
            .commit_once(&key, &order, |tx| {
                tx.put(&self.projections, &row)?;
                tx.update(&self.projections, &std::collections::HashMap::from(totals), |update| {
                    update
                        .update_expression("ADD order_count :one, total_cents :total")
                        .expression_attribute_values(":one", AttributeValue::N("1".into()))
                        .expression_attribute_values(":total", AttributeValue::N(order.total_cents.to_string()))
                })?;
                Ok(())
            })
            .await?;
        Ok(if projected.is_replay() { Disposition::Duplicate } else { Disposition::Applied })
    }

    fn span(&self, _record: &EventRecord) -> tracing::Span {
        tracing::info_span!("projection", order_id = tracing::field::Empty)
    }
}
