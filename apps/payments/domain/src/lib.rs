//! The payments showcase's domain, shared by its functions (the payments consumer, the
//! receipts relay, and the Kafka example): the payment event contract ([`PaymentEvent`]), the
//! ledger that posts each event exactly once in one DynamoDB transaction ([`Ledger`], on the
//! tables [`LedgerEnv`] names), the transactional outbox of receipts ([`Outbox`],
//! [`ReceiptRow`]), and the receipt email's marker key ([`receipt_key`]). Not a library of the family (never published): the generic keyed
//! effects are in `effectively-once-effects`, which this crate uses for the receipt.
//!
//! ```no_run
//! use payments::{Ledger, PaymentEvent, Posting};
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
//!
//! # Ledger posts: exactly once, in one request
//!
//! [`Ledger::post`] validates nothing itself: [`PaymentEvent::parse`] does, with an error naming
//! the field (`event_id`, `account_id`, `amount_cents`, `currency`, `receipt_email`). Then one
//! `TransactWriteItems` writes the ledger entry (`pk = account#{account_id}`,
//! `sk = entry#{event_id}`, `amount_cents`, `currency`, `event_id`, `posted_at`), updates the
//! balance item (`balance_cents`, `entry_count`, `currency`), writes the event's idempotency
//! record `payments#{event_id}` in the idempotency table, and, when the event has a
//! `receipt_email`, puts the outbox row. The record is keyed by the event id alone, so an event
//! id takes effect once across the whole ledger: a duplicate, or the same id sent for another
//! account or with another amount, currency or address, finds it, and its `ALL_OLD` image,
//! returned in the cancellation reason, is the replay (or `KeyReused`), with no second read.
//! Ledger records never expire, like the entries. The entry and the outbox row are conditional
//! on their absence: nothing ever overwrites them. The balance update's condition is the
//! business rule: a credit needs the account's currency (or no account yet); a debit needs the
//! currency and `balance_cents >= -amount`. Which cancellation reason fired tells a duplicate
//! (the record) from a rejection (the balance).
//!
//! | item | why it is in the transaction |
//! |---|---|
//! | idempotency record `payments#{event_id}` | one effect per event id across accounts; the replay; keeps a rejection rejected |
//! | ledger entry | the effect |
//! | balance update | the effect; its condition is the business rule |
//! | outbox row (with `receipt_email`) | the receipt is sent if and only if the payment applied |
//!
//! What these cost in write units per message, first and duplicate, against the Powertools
//! pattern, is in the [cost model](https://github.com/effectively-once/effectively-once/blob/main/docs/cost-model.md) (units modelled by
//! [`WriteUnits`](effectively_once_dynamodb::WriteUnits), requests measured by
//! [`RequestCounter`](effectively_once_dynamodb::RequestCounter)).
//!
//! A rejection posts nothing; it is recorded as a completed record `payments#{event_id}` under
//! the same key and condition, so a concurrent duplicate that applied the payment after a credit
//! arrived wins and its answer stands, and a rejected debit's duplicate stays rejected after
//! funds arrive. Transaction conflicts between concurrent duplicates are retried: one commits,
//! the rest replay. More than 100 actions, an item over 400 KB or a transaction over 4 MB is
//! refused before sending, with the limit in the message. On a standard queue a debit that
//! arrives before its funding credit is rejected for good: [delivery order](https://github.com/effectively-once/effectively-once/blob/main/docs/ordering.md)
//! says why, and how a FIFO queue (message group = account) removes it.
//!
//! # Receipt email
//!
//! The relay sends each receipt with [`send_once`](effectively_once_effects::send_once) under the marker
//! [`receipt_key`] (`email#{event_id}`, a deployed contract: markers already written under it
//! keep replaying), with the default policy, at most once: a payment receipt sent twice looks
//! like a double charge to a customer, so an ambiguous send is flagged, not resent. The relay
//! marks the row `AMBIGUOUS`, acks the record and raises it (an `EmailAmbiguous` EMF metric and
//! an error log); an account-level refusal (`Blocked`) releases the marker, retries the record
//! and raises an `EmailBlocked` metric. A stream retry that finds a dead attempt's marker (its
//! sandbox crashed) waits the lease out within its own invocation when it ends before the
//! deadline, rather than failing the record until the stream's few retries run out and the row
//! stays `PENDING`.
//!
//! # Outbox
//!
//! The outbox row (`OUTBOX_TABLE`, key `pk = receipt#{event_id}`, stream with new images)
//! carries what the receipt needs: `event_id`, `account_id`, `amount_cents`, `currency`,
//! `receipt_email`, `created_at`, `status = PENDING`. The relay reads the [`ReceiptRow`] out of
//! the stream record and marks the row `SENT` (with `message_id`, the address removed),
//! `FAILED`, `AMBIGUOUS`, or, sending nothing, `REFUSED` or `RATE_LIMITED` (the address
//! removed) through an [`Outbox`] ([`outbox`]). The table, not the stream, is the source of
//! truth: while `PENDING` a row carries `pending_shard`, the key of the sparse index `pending`,
//! where the outbox sweeper finds the receipts the stream did not deliver
//! ([`Outbox::pending`]) and sends them through the relay's marker; each mark removes it.
//!
//! The event's address is a request, not the recipient: the relay sends to the account's
//! registered address where its [profile] names one, else to the event's when the
//! deployment's allow-list admits it (or no allow-list is set), and admits at most a
//! [rate] of receipts per account. Both are what a deployment turns on:
//! [operations](https://github.com/effectively-once/effectively-once/blob/main/docs/operations.md#receipts-who-gets-them-and-how-many).
//!
//! # Features
//!
//! - `lambda`: [`ReceiptRow::from_stream_record`] (a DynamoDB Streams record of
//!   `aws_lambda_events`), the mapping of an [`Error`] to a batch driver's record result
//!   (`impl From<Error> for effectively_once_lambda::RecordError`, the family's one mapping
//!   with an invalid payment permanent), and `lambda`: a post's answer as a record's result
//!   and a batch's payments posted together, shared by the consumers of every trigger.
//! - `test-util`: `tables` (the ledger and outbox tables, for tests and the local AWS).
//!
//! # Guarantees
//!
//! | effect | guarantee | survives |
//! |---|---|---|
//! | ledger entry and balance | exactly once per event id | duplicate deliveries, producer retries with new message ids, DLQ redrive, concurrent consumers, a crash at any point (the transaction is all or nothing), a lost response (the retry finds the entry) |
//! | rejection (overdraft, currency) | the same answer for every duplicate, within the 14-day window | duplicates after the balance changed; a duplicate racing the rejection |
//! | outbox row | written if and only if the payment applied, once | everything the ledger survives |
//! | receipt email, at most once | never two emails per event; ambiguous cases flagged | duplicates, throttling and account-level refusals (released and retried), a 5xx or lost answer and a crash after SES accepted (flagged, not resent) |
//! | receipt email, at least once | never a lost email; a copy only in the ambiguous window | duplicates, throttling, a crash before or after SES accepted (resent after the lease) |
#![warn(missing_docs)]

mod env;
mod error;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod ledger;
pub mod outbox;
mod payment;
pub mod profile;
pub mod rate;
#[cfg(feature = "test-util")]
pub mod tables;
mod time;

use effectively_once::{Key, KeyError};

pub use crate::env::LedgerEnv;
pub use crate::error::Error;
pub use crate::ledger::{Balance, Deliveries, Delivery, Ledger, Migration, Posting, Rejection};
pub use crate::outbox::{Outbox, OutboxRow, ReceiptRow, RowStatus};
pub use crate::payment::{valid_email, BodyError, InvalidPayment, PaymentEvent, MAX_AMOUNT_CENTS};
pub use crate::profile::Profiles;
pub use crate::rate::{RateLimit, ReceiptRate};
pub use crate::time::rfc3339;

/// The key prefix of receipt email markers: `email#{event_id}`. A deployed contract: the
/// markers already written under it are what keeps a redelivered receipt from being sent again.
pub const RECEIPT_EMAIL_PREFIX: &str = "email";

/// The marker key of a payment's receipt email, `email#{event_id}`: deterministic, never
/// random, so every retry and every duplicate meets the same marker.
pub fn receipt_key(event_id: &str) -> Result<Key, KeyError> {
    Key::new(RECEIPT_EMAIL_PREFIX, event_id)
}

/// What the disable switch (`POWERTOOLS_IDEMPOTENCY_DISABLED`, `IDEMPOTENCY_DISABLED`) does to
/// the payments effects: nothing. [`Ledger::post`] and the receipt's
/// [`send_once`](effectively_once_effects::send_once) keep their once-only conditions whatever
/// `config` says: a ledger entry and an email marker are the business invariant, not a cache,
/// and an environment variable left set in production must not post a payment twice or send a
/// receipt twice. Only `Idempotency::run` (and what is built on it: `wrap`, the tower layer)
/// honours the switch.
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

#[cfg(test)]
mod tests {
    /// The receipt markers' prefix is deployed: markers already written under it must replay.
    #[test]
    fn receipt_keys_keep_the_deployed_prefix() {
        assert_eq!(super::receipt_key("pay_0001").unwrap().as_str(), "email#pay_0001");
    }
}
