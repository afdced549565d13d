//! Keyed side effects on the idempotency core: each effect is fenced by a once-only record
//! under a key the caller builds, so a duplicate delivery answers with the first outcome
//! instead of acting twice. Today: a keyed email ([`send_once`], SES v2 behind the
//! [`EmailSender`] trait).
//!
//! ```no_run
//! use effectively_once_dynamodb::DynamoDbStore;
//! use effectively_once_effects::{send_once, Config, EmailMessage, Idempotency, Key, Policy, SendOutcome, SesSender};
//!
//! # async fn example(dynamodb: aws_sdk_dynamodb::Client, ses: aws_sdk_sesv2::Client) -> Result<(), effectively_once_effects::Error> {
//! let markers = Idempotency::new(DynamoDbStore::new(dynamodb, "idempotency"), Config::default());
//! let sender = SesSender::new(ses, "orders@example.com");
//! let key = Key::new("order-confirmation", "ord_0001")?;
//! let message = EmailMessage { to: "alice@example.com".into(), subject: "Your order".into(), text: "Received.".into() };
//! match send_once(&markers, &sender, &key, &message, Policy::default()).await?.into_inner() {
//!     SendOutcome::Sent { message_id } => println!("sent: {message_id}"),
//!     SendOutcome::Failed { reason } => println!("refused for good: {reason}"),
//!     SendOutcome::Ambiguous => println!("may have been sent: not resent, for an operator"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Everything [`send_once`]'s signature names is re-exported here ([`Idempotency`], [`Key`],
//! [`Store`], [`Outcome`], [`Config`]), so a user of this crate needs no other crate of the
//! family to call it; a store comes from `effectively-once` (`InMemoryStore`) or
//! `effectively-once-dynamodb` (`DynamoDbStore`).
//!
//! # Keyed email: fenced by a marker
//!
//! [`send_once`] claims the marker under the caller's key (a prefix naming the email and the
//! event's business id, [`email`] says how to choose it), sends through an [`EmailSender`]
//! ([`SesSender`] for SES v2, `RecordingSender` for tests, with the `test-util` feature), and
//! completes the marker with SES's message id. SES's answers are classified in one place
//! (`SendError::from_ses` in [`email`]):
//!
//! - throttled: the marker is released and the retry sends;
//! - refused for the account or configuration (sending paused, account suspended, sender or
//!   mail-from domain not verified, configuration set or identity not found, quota spent,
//!   credentials or IAM refused): no verdict on the message, so the marker is released and the
//!   record retried; the caller raises it for an operator ([`SendErrorKind::Blocked`]);
//! - refused for this message (`MessageRejected` for its recipient, an invalid request):
//!   recorded as [`SendOutcome::Failed`], not retried;
//! - ambiguous (a 5xx, a timeout, a connection broken after the request left): SES may have
//!   accepted it.
//!
//! The ambiguous answer, and the window no email API closes (SES accepted and the attempt died
//! before the marker completed), follow the [`Policy`]:
//!
//! - [`Policy::AtMostOnce`] (**default**): never resend; an ambiguous answer is recorded
//!   [`SendOutcome::Ambiguous`] at once, and a dead attempt's marker by the attempt that takes
//!   it over after the lease, with an error log for an operator. An email sent twice (a
//!   receipt, a confirmation) looks like a bug to its reader, while the window is milliseconds
//!   wide, so a missing email is rare, visible, and fixable by hand from SES's sending events.
//! - [`Policy::AtLeastOnce`]: the takeover resends. No email is lost; a duplicate is possible
//!   only in that window. For messages whose loss costs more than a copy.
//!
//! Addresses are redacted (`a***@example.com`) in logs, in every send error (SES echoes the
//! refused address), in stored failure reasons and in `Debug` output.
//!
//! # Errors
//!
//! One error type, [`Error`]: the once-only record's ([`Error::Idempotency`]), an effect's own
//! write ([`Error::Store`]), the provider's ([`Error::Email`]), and the caller's own
//! ([`Error::caller`], with its word on what a retry can do), so a handler that runs effects
//! returns one type. [`Error::retry`] answers "retry or give up?" in the core's one
//! classification ([`Retry`](effectively_once::Retry)); with the
//! `lambda` feature, `RecordError::from` maps it to a batch driver's record result.
//!
//! # Features
//!
//! - `lambda`: the one mapping of an [`Error`] to a batch driver's record result
//!   (`impl From<Error> for effectively_once_lambda::RecordError`).
//! - `test-util`: `testing`, the helpers an email test needs: tables with any key schema and a
//!   verified SES sender on the local AWS, the emails the local SES recorded, and
//!   `RecordingSender` (a fake sender that records and fails as scripted). Lambda event builders
//!   are `effectively-once-lambda`'s (its `test-util`).
//!
//! # Guarantees
//!
//! | effect | guarantee | survives |
//! |---|---|---|
//! | email, at most once | never two emails per key; ambiguous cases flagged | duplicates, throttling and account-level refusals (released and retried), a 5xx or lost answer and a crash after SES accepted (flagged, not resent) |
//! | email, at least once | never a lost email; a copy only in the ambiguous window | duplicates, throttling, a crash before or after SES accepted (resent after the lease) |
//!
//! # Rust version and your Cargo.toml
//!
//! Rust 1.94.1 or newer (the AWS SDK's). This crate turns on no SDK behaviour version, HTTP client
//! or async runtime: your program does, on its `aws-config` and `aws-sdk-sesv2` (`features =
//! ["behavior-version-latest", "default-https-client", "rt-tokio"]` with `default-features =
//! false`, or the SDK's default features and `BehaviorVersion::latest()` passed to
//! `aws_config::load_defaults`). See `docs/packaging.md` in the repository.
// docs.rs (nightly, `--cfg docsrs`): each feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod email;
mod error;
#[cfg(feature = "test-util")]
pub mod testing;

#[cfg(any(test, feature = "test-util"))]
pub use crate::email::RecordingSender;
pub use crate::email::{
    on_send_error, redact_email, send_once, sends_once_claimed, EmailMessage, EmailSender, OnSendError, Policy,
    SendError, SendErrorKind, SendOutcome, SesSender,
};
pub use crate::error::{CallerError, Error};
pub use effectively_once::{Config, Idempotency, Key, KeyError, Outcome, Store};
