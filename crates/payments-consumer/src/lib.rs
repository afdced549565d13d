//! The payments consumer: an SQS record handler that parses the payment event and posts it to
//! the ledger once. `main.rs` only wires the environment, the clients and this handler.

use aws_lambda_events::event::sqs::SqsMessage;
use effectively_once::{Config, Outcome};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::events::Context;
use effectively_once_lambda::{BatchHandler, Handler};
use effectively_once_lambda::{Disposition, RecordError, RecordResult};
use payments::{Ledger, PaymentEvent, Posting};

/// The function's name in metrics where Lambda's `AWS_LAMBDA_FUNCTION_NAME` is absent.
pub const FUNCTION: &str = "payments-consumer";

/// The environment contract: table names, and the idempotency settings.
#[derive(Debug, Clone)]
pub struct Env {
    /// `IDEMPOTENCY_TABLE`: the payments' records (applied and rejected).
    pub idempotency_table: String,
    /// `LEDGER_TABLE`: entries and balances.
    pub ledger_table: String,
    /// `OUTBOX_TABLE`: receipt rows; optional (no receipts without it).
    pub outbox_table: Option<String>,
    /// [`Config::from_env_with`]: the disable switch (`POWERTOOLS_IDEMPOTENCY_DISABLED`) is read,
    /// and the ledger ignores it: a post keeps its once-only condition whatever the environment
    /// says ([`payments::warn_if_disabled`], which `main` calls at cold start).
    pub config: Config,
}

impl Env {
    /// Reads the environment; a missing variable is named in the error.
    pub fn from_env() -> Result<Env, String> {
        Env::from_env_with(|name| std::env::var(name).ok())
    }

    /// The same, with the variables read through `var` (`None` for unset): tests pass a map.
    pub fn from_env_with(var: impl Fn(&str) -> Option<String>) -> Result<Env, String> {
        let required = |name: &str| var(name).ok_or_else(|| format!("environment variable {name} is not set"));
        Ok(Env {
            idempotency_table: required("IDEMPOTENCY_TABLE")?,
            ledger_table: required("LEDGER_TABLE")?,
            outbox_table: var("OUTBOX_TABLE").filter(|t| !t.is_empty()),
            config: Config::from_env_with(&var),
        })
    }
}

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
        let store = DynamoDbStore::new(client, &env.idempotency_table);
        Payments::new(Ledger::new(store, &env.ledger_table, env.outbox_table.clone()).with_config(env.config.clone()))
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

/// A post's answer as the record's result, logged.
fn disposition(posted: Result<Outcome<Posting>, payments::Error>) -> RecordResult {
    match posted {
        Ok(Outcome::Fresh(Posting::Applied)) => Ok(Disposition::Applied),
        Ok(Outcome::Fresh(Posting::Rejected { reason })) => {
            tracing::info!(?reason, "payment rejected; recorded, not retried");
            Ok(Disposition::Rejected)
        }
        Ok(Outcome::Replayed(posting)) => {
            tracing::info!(?posting, "duplicate; answered from the first delivery");
            Ok(Disposition::Duplicate)
        }
        // In progress elsewhere, permanent for a verdict on the payment, retryable else.
        Err(error) => Err(error.into()),
    }
}

impl Handler<SqsMessage> for Payments {
    async fn handle(&self, message: &SqsMessage, _context: &Context) -> RecordResult {
        let event = parse(message)?;
        tracing::Span::current().record("event_id", event.event_id.as_str());
        // The post is one transaction: no lease to bound by the deadline.
        disposition(self.ledger.post(&event).await)
    }

    /// The payment's span: its `event_id`, recorded once the body parses.
    fn span(&self, _message: &SqsMessage) -> tracing::Span {
        tracing::info_span!("payment", event_id = tracing::field::Empty)
    }

    /// The event id: an in-batch duplicate runs after the first copy and is answered from it,
    /// instead of finding it in progress and going back to the queue. An unparseable body has
    /// none (it fails on its own in `handle`).
    fn key(&self, message: &SqsMessage) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Key {
            event_id: String,
        }
        serde_json::from_str::<Key>(message.body.as_deref()?).ok().map(|key| key.event_id)
    }
}

/// The batch path, the function's default: the valid payments of a batch in one transaction
/// (as few as DynamoDB's limits allow, [`Ledger::post_batch`]), each answered as if posted alone
/// in batch order; a malformed message fails alone.
impl BatchHandler<SqsMessage> for Payments {
    async fn handle_batch(&self, messages: &[&SqsMessage], _context: &Context) -> Vec<RecordResult> {
        let mut results: Vec<Option<RecordResult>> = messages.iter().map(|_| None).collect();
        let (mut events, mut positions) = (Vec::with_capacity(messages.len()), Vec::with_capacity(messages.len()));
        for (position, message) in messages.iter().enumerate() {
            match parse(message) {
                Ok(event) => {
                    events.push(event);
                    positions.push(position);
                }
                Err(error) => results[position] = Some(Err(error)),
            }
        }
        let posted = self.ledger.post_batch(&events).await;
        for ((result, position), event) in posted.into_iter().zip(positions).zip(&events) {
            let span = tracing::info_span!("payment", event_id = event.event_id.as_str());
            results[position] = Some(span.in_scope(|| disposition(result)));
        }
        results.into_iter().map(|r| r.unwrap_or_else(|| Err(RecordError::retryable("not handled")))).collect()
    }
}

#[cfg(test)]
mod tests {
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
}
