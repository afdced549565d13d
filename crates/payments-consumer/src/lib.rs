//! The payments consumer: an SQS record handler that parses the payment event and posts it to
//! the ledger once. `main.rs` only wires the environment, the clients and this handler.

use aws_lambda_events::event::sqs::SqsMessage;
use effectively_once::{ErrorKind, Outcome};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{Ledger, PaymentEvent, Posting};
use effectively_once_lambda::{Disposition, RecordError, RecordResult};

/// The function's name in metrics.
pub const FUNCTION: &str = "payments-consumer";

/// The environment contract: table names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    /// `IDEMPOTENCY_TABLE`: the payments' records (applied and rejected).
    pub idempotency_table: String,
    /// `LEDGER_TABLE`: entries and balances.
    pub ledger_table: String,
    /// `OUTBOX_TABLE`: receipt rows; optional (no receipts without it).
    pub outbox_table: Option<String>,
}

impl Env {
    /// Reads the environment; a missing variable is named in the error.
    pub fn from_env() -> Result<Env, String> {
        let var = |name: &str| std::env::var(name).map_err(|_| format!("environment variable {name} is not set"));
        Ok(Env {
            idempotency_table: var("IDEMPOTENCY_TABLE")?,
            ledger_table: var("LEDGER_TABLE")?,
            outbox_table: std::env::var("OUTBOX_TABLE").ok().filter(|t| !t.is_empty()),
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

    /// A handler on the tables `env` names.
    pub fn from_env(client: aws_sdk_dynamodb::Client, env: &Env) -> Self {
        let store = DynamoDbStore::new(client, &env.idempotency_table);
        Payments::new(Ledger::new(store, &env.ledger_table, env.outbox_table.clone()))
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
}

impl effectively_once_lambda::sqs::Handler for Payments {
    async fn handle(&self, message: &SqsMessage, _deadline_ms: Option<u64>) -> RecordResult {
        let body = message.body.as_deref().ok_or_else(|| RecordError::permanent("message has no body"))?;
        let event = PaymentEvent::parse(body).map_err(|e| RecordError::permanent(e.to_string()))?;
        tracing::Span::current().record("event_id", event.event_id.as_str());
        // The post is one transaction: no lease to bound by the deadline.
        match self.ledger.post(&event).await {
            Ok(Outcome::Fresh(Posting::Applied)) => Ok(Disposition::Applied),
            Ok(Outcome::Fresh(Posting::Rejected { reason })) => {
                tracing::info!(?reason, "payment rejected; recorded, not retried");
                Ok(Disposition::Rejected)
            }
            Ok(Outcome::Replayed(posting)) => {
                tracing::info!(?posting, "duplicate; answered from the first delivery");
                Ok(Disposition::Duplicate)
            }
            Err(effectively_once_effects::Error::Idempotency(e)) if e.kind() == ErrorKind::InProgress => {
                Err(RecordError::in_progress_elsewhere(e.to_string()))
            }
            Err(e) if e.is_retryable() => Err(RecordError::retryable(e.to_string())),
            Err(e) => Err(RecordError::permanent(e.to_string())),
        }
    }
}
