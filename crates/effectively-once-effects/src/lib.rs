//! Keyed side effects on the idempotency core: a ledger post that is exactly-once in one
//! DynamoDB transaction, an email fenced by a marker record, and a transactional outbox.
//!
//! ```no_run
//! use effectively_once_effects::{Ledger, PaymentEvent, Posting};
//! use effectively_once_dynamodb::DynamoDbStore;
//!
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let ledger = Ledger::new(DynamoDbStore::new(client, "idempotency"), "ledger", Some("outbox".into()));
//! let event = PaymentEvent::parse(r#"{"event_id": "pay_0001", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}"#)?;
//! let outcome = ledger.post(&event).await?;
//! assert!(matches!(outcome.response(), Posting::Applied | Posting::Rejected { .. }));
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub mod email;
mod error;
pub mod ledger;
pub mod outbox;
mod payment;
pub mod tables;
mod time;

pub use crate::email::{send_once, EmailMessage, EmailSender, Policy, Receipt, RecordingSender, SesSender};
pub use crate::error::Error;
pub use crate::ledger::{Balance, Ledger, Migration, Posting, Rejection};
pub use crate::payment::{InvalidPayment, PaymentEvent, MAX_AMOUNT_CENTS};
pub use crate::time::rfc3339;

/// What the disable switch (`POWERTOOLS_IDEMPOTENCY_DISABLED`, `IDEMPOTENCY_DISABLED`) does to
/// the effects here: nothing. [`Ledger::post`] and [`send_once`] keep their once-only conditions
/// whatever `config` says: a ledger entry and an email marker are the business invariant, not a
/// cache, and an environment variable left set in production must not post a payment twice or
/// send a receipt twice. Only `Idempotency::run` (and what is built on it: `wrap`, the tower
/// layer) honours the switch.
///
/// Returns whether the switch is on, after logging a warning that says so; a binary calls it at
/// cold start with the config it built from the environment (`Config::from_env`).
pub fn warn_if_disabled(config: &effectively_once::Config) -> bool {
    if config.is_disabled() {
        tracing::warn!(
            variables = ?effectively_once::DISABLED_VARS,
            "the idempotency disable switch is set: it does NOT switch off the ledger's once-only posting or the \
             receipt email's once-only marker (the business invariant); only Idempotency::run and its layer honour it"
        );
    }
    config.is_disabled()
}

/// An address as logs may show it (`a***@example.com`). Re-exported from the `effectively-once-redact` crate.
pub use effectively_once_redact::redact_email;
