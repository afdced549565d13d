//! Typed bodies: a [`BodyHandler`] receives the record's payload decoded with serde into its own
//! type; [`Typed`] makes it a [`Handler`] for the trigger. A payload that does not decode is a
//! permanent failure of that record alone (its reason logged, addresses redacted): the rest of
//! the batch goes on, and on SQS the message ends in the dead-letter queue.
//!
//! What the payload is, per trigger ([`Payload`]): an SQS message's body (JSON), a Kinesis
//! record's data and a Kafka record's value (JSON, after Lambda's base64), a DynamoDB Streams
//! record's `NewImage` (the item,
//! through `serde_dynamo`; a `REMOVE` has none, and answers permanent unless its event name is
//! skipped).

use std::future::Future;

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::kinesis::KinesisEventRecord;
use aws_lambda_events::event::sqs::SqsMessage;
use lambda_runtime::Context;
use serde::de::DeserializeOwned;

use crate::driver::{BatchHandler, Handler};
use crate::{redact_emails, RecordError, RecordResult};

/// A record whose payload decodes into a handler's own type.
pub trait Payload {
    /// The payload decoded into `T`, or why it is not one (no personal data: the reason is
    /// logged).
    fn decode<T: DeserializeOwned>(&self) -> Result<T, String>;
}

impl Payload for SqsMessage {
    fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        let body = self.body.as_deref().ok_or("the message has no body")?;
        serde_json::from_str(body).map_err(|e| format!("the body is not a {}: {e}", short_name::<T>()))
    }
}

impl Payload for KinesisEventRecord {
    fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.kinesis.data).map_err(|e| format!("the data is not a {}: {e}", short_name::<T>()))
    }
}

impl Payload for aws_lambda_events::event::kafka::KafkaRecord {
    fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        let value = crate::kafka::value_bytes(self).ok_or("the record has no value, or it is not base64")?;
        serde_json::from_slice(&value).map_err(|e| format!("the value is not a {}: {e}", short_name::<T>()))
    }
}

impl Payload for EventRecord {
    fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        if self.change.new_image.is_empty() {
            return Err(format!("a {} record has no NewImage", self.event_name));
        }
        serde_dynamo::from_item(self.change.new_image.clone())
            .map_err(|e| format!("the NewImage is not a {}: {e}", short_name::<T>()))
    }
}

/// The last segment of a type's path, for a reason line.
fn short_name<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    name.rsplit("::").next().unwrap_or(name)
}

/// Handles one record through its decoded payload. Wrap it in [`Typed`] to serve it:
/// `sqs::run(Typed(Orders), options)`.
pub trait BodyHandler<R>: Send + Sync {
    /// The payload's type.
    type Body: DeserializeOwned + Send + Sync;

    /// Handles `body`, decoded from `record`'s payload; `record` and `context` as in
    /// [`Handler::handle`].
    fn handle(&self, body: Self::Body, record: &R, context: &Context) -> impl Future<Output = RecordResult> + Send;

    /// The body's business key, as [`Handler::key`] (standard SQS queues run equal keys one after
    /// the other). The payload is decoded for it once more when the key is asked. Default: none.
    fn key(&self, body: &Self::Body) -> Option<String> {
        let _ = body;
        None
    }

    /// The handler's own span, as [`Handler::span`]. Default: none.
    fn span(&self, record: &R) -> tracing::Span {
        let _ = record;
        tracing::Span::none()
    }
}

/// A [`BodyHandler`] served as a [`Handler`] (and as a [`BatchHandler`] when it is a
/// [`BodyBatchHandler`]): the payload decoded first, a failure to decode answered permanent.
#[derive(Debug, Clone, Default)]
pub struct Typed<H>(pub H);

fn decode<R: Payload, T: DeserializeOwned>(record: &R) -> Result<T, RecordError> {
    record.decode().map_err(|reason| RecordError::permanent(redact_emails(&reason)))
}

impl<R: Payload + Sync, H: BodyHandler<R>> Handler<R> for Typed<H> {
    async fn handle(&self, record: &R, context: &Context) -> RecordResult {
        let body = decode(record)?;
        self.0.handle(body, record, context).await
    }

    fn key(&self, record: &R) -> Option<String> {
        decode(record).ok().and_then(|body| self.0.key(&body))
    }

    fn span(&self, record: &R) -> tracing::Span {
        self.0.span(record)
    }
}

/// Handles a batch's decoded records together (one `commit_batch` for the batch, say), as
/// [`BatchHandler`]; records whose payload does not decode are answered permanent and left out
/// of the call.
pub trait BodyBatchHandler<R>: BodyHandler<R> {
    /// Handles `bodies` (each with its record), one result per entry, in the same order.
    fn handle_batch(
        &self,
        bodies: Vec<(Self::Body, &R)>,
        context: &Context,
    ) -> impl Future<Output = Vec<RecordResult>> + Send;
}

impl<R: Payload + Sync, H: BodyBatchHandler<R>> BatchHandler<R> for Typed<H> {
    async fn handle_batch(&self, records: &[&R], context: &Context) -> Vec<RecordResult> {
        let mut results: Vec<Option<RecordResult>> = Vec::with_capacity(records.len());
        let mut bodies = Vec::with_capacity(records.len());
        for record in records {
            match decode(*record) {
                Ok(body) => {
                    bodies.push((body, *record));
                    results.push(None);
                }
                Err(error) => results.push(Some(Err(error))),
            }
        }
        let expected = bodies.len();
        let mut answers = self.0.handle_batch(bodies, context).await.into_iter();
        if answers.len() != expected {
            // The driver hands each record to `handle` alone when the count is wrong.
            return Vec::new();
        }
        results.into_iter().map(|result| result.unwrap_or_else(|| answers.next().expect("counted"))).collect()
    }
}
