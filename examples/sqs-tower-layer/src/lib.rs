//! A generic SQS consumer: an existing tower `Service` (it adds to a counter item) made
//! idempotent with `IdempotencyLayer`, and the adapter that hands it each SQS message.
#![warn(missing_docs)]

use effectively_once_lambda::events::Context;
use effectively_once_lambda::Handler;
use std::fmt;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use effectively_once::layer::IdempotencyLayer;
use effectively_once::{Idempotency, Store};
use effectively_once_lambda::events::SqsMessage;
use effectively_once_lambda::{Handled, RecordError, RecordResult};
use lambda_runtime::tower::{service_fn, Service, ServiceExt};
use serde::{Deserialize, Serialize};

/// The message body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Increment {
    /// The producer's id for this event: the idempotency key.
    pub event_id: String,
    /// Which counter.
    pub counter: String,
    /// How much to add.
    pub by: i64,
}

/// The service's answer: stored with the record, and what a duplicate is answered with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counted {
    /// The counter.
    pub counter: String,
    /// Its value after this increment.
    pub value: i64,
}

/// The service's own error: a failed DynamoDB call, retried by redelivery.
#[derive(Debug)]
pub struct CounterError(String);

impl fmt::Display for CounterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "counter update failed: {}", self.0)
    }
}

impl From<CounterError> for RecordError {
    fn from(error: CounterError) -> Self {
        RecordError::retryable(error.to_string())
    }
}

/// The existing service, idempotent in nothing: `ADD value :by` on the counter's item (`pk`),
/// so every call adds again.
pub fn counter_service(
    client: aws_sdk_dynamodb::Client,
    table: String,
) -> impl Service<Increment, Response = Counted, Error = CounterError, Future: Send> + Clone + Send + Sync {
    service_fn(move |increment: Increment| {
        let request = client
            .update_item()
            .table_name(&table)
            .key("pk", AttributeValue::S(format!("counter#{}", increment.counter)))
            .update_expression("ADD #value :by")
            .expression_attribute_names("#value", "value")
            .expression_attribute_values(":by", AttributeValue::N(increment.by.to_string()))
            .return_values(ReturnValue::UpdatedNew);
        async move {
            let out = request.send().await.map_err(|e| CounterError(effectively_once::ErrorChain(&e).to_string()))?;
            let value = out.attributes().and_then(|a| a.get("value")).and_then(|v| v.as_n().ok());
            let value = value.and_then(|n| n.parse().ok()).ok_or_else(|| CounterError("no value returned".into()))?;
            Ok(Counted { counter: increment.counter, value })
        }
    })
}

/// The layer: one run per `event_id` (the whole message is the payload hashed, so the same id
/// with another body is key reuse); a duplicate gets the first run's `Counted` from the record.
pub fn layer<S: Store>(idempotency: Idempotency<S>) -> IdempotencyLayer<S, Increment> {
    IdempotencyLayer::new(idempotency, "counter", |increment: &Increment| {
        Some((increment.event_id.clone(), serde_json::to_value(increment).ok()?))
    })
}

/// The adapter: an `Handler<SqsMessage>` over any service taking an [`Increment`]. The layer sees no
/// invocation deadline, so its leases are the config's (`Config::with_lease`).
pub struct Consumer<S> {
    /// The service, cloned per message (tower's way to call a service from `&self`).
    pub service: S,
}

impl<S> Handler<SqsMessage> for Consumer<S>
where
    S: Service<Increment, Response = Counted> + Clone + Send + Sync,
    S::Error: Into<RecordError>,
    S::Future: Send,
{
    async fn handle(&self, message: &SqsMessage, _context: &Context) -> RecordResult {
        let increment = parse(message)?;
        self.service.clone().oneshot(increment).await.map_err(Into::into)?;
        Ok(Handled::Applied)
    }

    /// Two copies of one event in a batch run one after the other: the second is answered.
    fn key(&self, message: &SqsMessage) -> Option<String> {
        parse(message).ok().map(|increment| increment.event_id)
    }
}

fn parse(message: &SqsMessage) -> Result<Increment, RecordError> {
    serde_json::from_str(message.body.as_deref().unwrap_or_default())
        .map_err(|e| RecordError::permanent(format!("not an increment: {e}")))
}
