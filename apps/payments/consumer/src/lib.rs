//! The payments consumer: an SQS record handler that parses the payment event and posts it to
//! the ledger once. `main.rs` only wires the environment, the clients and this handler. The same
//! handler takes Kinesis records ([`kinesis`], served by `payments-kinesis-consumer`).
//!
//! Environment: the contract's tables ([`Env`]). A batch holding a message SQS delivered before
//! tells the ledger so, which reads that record first, so a duplicate another sandbox posted is
//! answered from one `BatchGetItem` instead of cancelling the batch's transaction; its costs:
//! `docs/operations.md`; measured: `docs/bench.md`.

use aws_lambda_events::event::sqs::SqsMessage;
use effectively_once_lambda::events::Context;
use effectively_once_lambda::sqs;
use effectively_once_lambda::{BatchHandler, Handler, OrderedBatch, OrderedBatchHandler};
use effectively_once_lambda::{RecordError, RecordResult};
use payments::{Delivery, Ledger, PaymentEvent};

pub mod kinesis;

/// The function's name in metrics where Lambda's `AWS_LAMBDA_FUNCTION_NAME` is absent.
pub const FUNCTION: &str = "payments-consumer";

/// The environment contract: table names, and the idempotency settings (the ledger's, shared
/// with every function that posts payments).
pub use payments::LedgerEnv as Env;

/// Posts each message's payment to the ledger.
#[derive(Debug, Clone)]
pub struct Payments {
    ledger: Ledger,
}

impl Payments {
    /// A handler over a ledger.
    pub fn new(ledger: Ledger) -> Self {
        Payments { ledger }
    }

    /// A handler on the tables `env` names, with its config. The disable switch in it does not
    /// reach the ledger: [`Ledger::post`] never drops its once-only condition.
    pub fn from_env(client: aws_sdk_dynamodb::Client, env: &Env) -> Self {
        Payments::new(Ledger::from_env(client, env))
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
}

/// A message's payment event, or why it has none (permanent: malformed).
fn parse(message: &SqsMessage) -> Result<PaymentEvent, RecordError> {
    let body = message.body.as_deref().ok_or_else(|| RecordError::permanent("message has no body"))?;
    PaymentEvent::parse(body).map_err(|e| RecordError::from(payments::Error::from(e)))
}

impl Handler<SqsMessage> for Payments {
    async fn handle(&self, message: &SqsMessage, _context: &Context) -> RecordResult {
        payments::lambda::post(&self.ledger, &parse(message)?).await
    }

    /// The payment's span: its `event_id`, recorded once the body parses.
    fn span(&self, _message: &SqsMessage) -> tracing::Span {
        payments::lambda::span()
    }

    /// The event id: an in-batch duplicate runs after the first copy and is answered from it,
    /// instead of finding it in progress and going back to the queue. An unparseable body has
    /// none (it fails on its own in `handle`).
    fn key(&self, message: &SqsMessage) -> Option<String> {
        PaymentEvent::event_id_of(message.body.as_deref()?.as_bytes())
    }
}

/// The batch path (`sqs::run_batch`): the valid payments of a batch in one transaction
/// (as few as DynamoDB's limits allow, [`Ledger::post_batch`]), each answered as if posted alone
/// in batch order; a malformed message fails alone. Each message SQS delivered before
/// ([`sqs::may_be_redelivery`]) says so to the ledger, which then reads its record first
/// ([`Delivery`]).
impl BatchHandler<SqsMessage> for Payments {
    async fn handle_batch(&self, messages: &[&SqsMessage], _context: &Context) -> Vec<RecordResult> {
        let parsed = messages.iter().map(|message| parse(message)).collect();
        payments::lambda::post_batch_as(&self.ledger, parsed, deliveries(messages)).await
    }
}

/// The ordered path (`sqs::run_ordered`), the function's default: the whole batch's valid payments in
/// one call and one transaction (as few as DynamoDB's limits allow,
/// [`Ledger::post_batch_in_lanes`]), each in its message group's lane, so a message never takes
/// effect behind an earlier one of its group that may still take effect, whatever their
/// accounts; a malformed message fails alone and holds nothing back. Redeliveries as on the
/// batch path.
impl OrderedBatchHandler<SqsMessage> for Payments {
    async fn handle_ordered(&self, batch: &OrderedBatch<'_, SqsMessage>, _context: &Context) -> Vec<RecordResult> {
        let messages = batch.records();
        let parsed = messages.iter().map(|message| parse(message)).collect();
        let lanes: Vec<Option<&str>> = (0..batch.len()).map(|at| batch.lane(at)).collect();
        payments::lambda::post_batch_in_lanes(&self.ledger, parsed, &lanes, deliveries(messages)).await
    }
}

/// What each of a batch's messages says of its redelivery, in order: one received before may
/// be a redelivery.
fn deliveries(messages: &[&SqsMessage]) -> Vec<Delivery> {
    let of = |message: &&SqsMessage| {
        if sqs::may_be_redelivery(message) {
            Delivery::MayBeRedelivery
        } else {
            Delivery::Unknown
        }
    };
    messages.iter().map(of).collect()
}

#[cfg(test)]
mod tests {
    use effectively_once_dynamodb::DynamoDbStore;
    use effectively_once_lambda::Handler;

    use super::*;

    #[test]
    fn the_batch_key_is_the_event_id_and_an_unparseable_body_has_none() {
        let config = aws_sdk_dynamodb::Config::builder().behavior_version_latest().build();
        let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(config), "idempotency");
        let payments = Payments::new(Ledger::new(store, "ledger", None));
        let message = |body: &str| {
            let mut message = SqsMessage::default();
            message.body = Some(body.to_owned());
            message
        };
        let body = r#"{"event_id":"pay_1","account_id":"acct_1","amount_cents":100,"currency":"EUR"}"#;
        assert_eq!(payments.key(&message(body)).as_deref(), Some("pay_1"));
        assert_eq!(payments.key(&message("{not json")), None);
        assert_eq!(payments.key(&message(r#"{"amount_cents":100}"#)), None);
        assert_eq!(payments.key(&SqsMessage::default()), None);
    }

    #[test]
    fn each_message_received_before_may_be_a_redelivery_and_only_it() {
        let received = |count: &str| {
            let mut message = SqsMessage::default();
            message.attributes.insert("ApproximateReceiveCount".into(), count.into());
            message
        };
        let (first, again) = (received("1"), received("3"));
        let (unknown, redelivery) = (Delivery::Unknown, Delivery::MayBeRedelivery);
        assert_eq!(deliveries(&[&first, &first]), [unknown, unknown]);
        assert_eq!(deliveries(&[&first, &again, &first]), [unknown, redelivery, unknown]);
        assert_eq!(deliveries(&[]), []);
    }
}
