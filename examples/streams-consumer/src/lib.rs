//! A DynamoDB Streams consumer: each order inserted into the orders table is projected once
//! (an order row plus its customer's running totals, in one transaction with the record). A
//! transient failure fails that record, and the driver checkpoints there.
//!
//! Three paths, one result: [`Handler`] projects one record per transaction (`streams::run`);
//! [`BatchHandler`] projects each round of a batch (the next change of every item) through
//! `commit_batch` (`streams::run_batch`); [`OrderedBatchHandler`] projects the whole batch through
//! one `commit_batch` (`streams::run_ordered`, what `main` serves): every order's row and record,
//! and one totals update per customer, in as few transactions as DynamoDB's limits allow, the
//! changes of an item kept in stream order.
#![warn(missing_docs)]

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::Error;
use effectively_once::{Idempotency, Key};
use effectively_once_dynamodb::{BatchWrites, CommitOnce, DynamoDbStore, Member, Otherwise, Table, Tx};
use effectively_once_lambda::events::Context;
use effectively_once_lambda::events::EventRecord;
use effectively_once_lambda::{BatchHandler, Handler, OrderedBatch, OrderedBatchHandler};
use effectively_once_lambda::{Handled, RecordError, RecordResult};
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

const PREFIX: &str = "order-projection";

fn order_of(record: &EventRecord) -> Result<Order, RecordError> {
    serde_dynamo::from_item(record.change.new_image.clone())
        .map_err(|e| RecordError::permanent(format!("not an order: {e}")))
}

fn disposition(outcome: Result<effectively_once::Outcome<()>, Error>) -> RecordResult {
    Ok(if outcome?.is_replay() { Handled::Duplicate } else { Handled::Applied })
}

impl Projector {
    /// The order's row.
    fn put_row(&self, order: &Order, tx: &mut Tx<()>) -> Result<(), Error> {
        let row = OrderRow {
            pk: format!("order#{}", order.order_id),
            customer_id: &order.customer_id,
            total_cents: order.total_cents,
        };
        let put = tx.put(&self.projections, &row)?;
        // The row is there already: this order was projected by a commit whose record has since
        // expired (a redelivery past the dedup window), and its totals with it. A duplicate, not
        // a condition to hold the shard on; another order's row under this id is key reuse.
        let (customer, total) = (order.customer_id.clone(), order.total_cents);
        tx.otherwise(put, move |item| {
            let attribute = |name: &str| item.and_then(|item| item.get(name));
            let same = attribute("customer_id").and_then(|v| v.as_s().ok()) == Some(&customer)
                && attribute("total_cents").and_then(|v| v.as_n().ok()) == Some(&total.to_string());
            Otherwise::AlreadyApplied { response: (), same_payload: same }
        });
        Ok(())
    }

    /// Adds `count` orders and `total_cents` to the customer's totals.
    fn add_to_totals(&self, customer_id: &str, count: usize, total_cents: i64, tx: &mut Tx<()>) -> Result<(), Error> {
        let totals = std::collections::HashMap::from([("pk", format!("customer#{customer_id}"))]);
        tx.update(&self.projections, &totals, |update| {
            update
                .update_expression("ADD order_count :count, total_cents :total")
                .expression_attribute_values(":count", AttributeValue::N(count.to_string()))
                .expression_attribute_values(":total", AttributeValue::N(total_cents.to_string()))
        })?;
        Ok(())
    }
}

impl Handler<EventRecord> for Projector {
    async fn handle(&self, record: &EventRecord, _context: &Context) -> RecordResult {
        let order = order_of(record)?;
        tracing::Span::current().record("order_id", order.order_id.as_str());
        let key = Key::new(PREFIX, &order.order_id)?;
        // The row, the totals and the record commit together or not at all: a redelivered
        // record finds its record and adds nothing. A store failure converts to a retryable
        // RecordError, so the driver reports this record's sequence number as the checkpoint.
        let projected = self
            .idempotency
            .commit_once(&key, &order, |tx| {
                self.put_row(&order, tx)?;
                self.add_to_totals(&order.customer_id, 1, order.total_cents, tx)
            })
            .await;
        disposition(projected)
    }

    /// The order's id: two changes of one order in a batch run in turn on the batch path.
    fn key(&self, record: &EventRecord) -> Option<String> {
        order_of(record).ok().map(|order| order.order_id)
    }

    fn span(&self, _record: &EventRecord) -> tracing::Span {
        tracing::info_span!("projection", order_id = tracing::field::Empty)
    }
}

/// The writes of a batch's orders for `commit_batch`: each order's row, and per customer one
/// totals update for the orders of that customer a transaction holds.
struct Projections<'a> {
    projector: &'a Projector,
    orders: &'a [Order],
}

impl BatchWrites<()> for Projections<'_> {
    fn writes(&self, index: usize, tx: &mut Tx<()>) -> Result<(), Error> {
        self.projector.put_row(&self.orders[index], tx)
    }

    fn shared(&self, members: &[usize], tx: &mut Tx<()>) -> Result<(), Error> {
        let Some(&first) = members.first() else { return Ok(()) };
        let total: i64 = members.iter().map(|&member| self.orders[member].total_cents).sum();
        self.projector.add_to_totals(&self.orders[first].customer_id, members.len(), total, tx)
    }
}

impl Projector {
    /// The batch's orders through one `commit_batch`, each order in its customer's group (one
    /// totals update per customer a transaction) and, given `lane`, in its item's lane (the
    /// changes of one item applied in stream order, whatever their customers). A record that is
    /// not an order is answered alone.
    async fn project<'a>(
        &self,
        records: &[&EventRecord],
        lane: impl Fn(usize) -> Option<&'a str>,
    ) -> Vec<RecordResult> {
        let mut results: Vec<Option<RecordResult>> = records.iter().map(|_| None).collect();
        // The records that are orders with a valid key; the others are answered here, alone.
        let mut orders = Vec::with_capacity(records.len());
        let mut keyed = Vec::with_capacity(records.len());
        for (position, record) in records.iter().enumerate() {
            let checked = order_of(record).and_then(|order| Ok((Key::new(PREFIX, &order.order_id)?, order)));
            match checked {
                Ok((key, order)) => {
                    orders.push(order);
                    keyed.push((key, position));
                }
                Err(error) => results[position] = Some(Err(error)),
            }
        }
        let members: Vec<Member<'_, Order>> = keyed
            .iter()
            .zip(&orders)
            .map(|((key, position), order)| {
                let member = Member::new(key.clone(), order).in_group(order.customer_id.clone());
                match lane(*position) {
                    Some(lane) => member.in_lane(lane),
                    None => member,
                }
            })
            .collect();
        let writes = Projections { projector: self, orders: &orders };
        let projected = self.idempotency.commit_batch(&members, &writes).await;
        for (outcome, (_, position)) in projected.into_iter().zip(keyed) {
            results[position] = Some(disposition(outcome));
        }
        results.into_iter().map(|result| result.unwrap_or_else(|| Err(RecordError::retryable("not handled")))).collect()
    }
}

/// The rounds (`streams::run_batch`): at most one change of each item a call.
impl BatchHandler<EventRecord> for Projector {
    async fn handle_batch(&self, records: &[&EventRecord], _context: &Context) -> Vec<RecordResult> {
        self.project(records, |_| None).await
    }
}

/// The ordered path (`streams::run_ordered`, what `main` serves): the whole batch in one call
/// and one `commit_batch`, each change in its item's lane, so a change never takes effect
/// behind an earlier change of its item that may still take effect.
impl OrderedBatchHandler<EventRecord> for Projector {
    async fn handle_ordered(&self, batch: &OrderedBatch<'_, EventRecord>, _context: &Context) -> Vec<RecordResult> {
        self.project(batch.records(), |at| batch.lane(at)).await
    }
}
