//! Keyed email: a marker record under a key the caller builds fences each send, so a duplicate
//! delivery never sends twice; the one window no email API can close follows a declared
//! [`Policy`].
//!
//! The marker's [`Key`](crate::Key) is the caller's: a prefix naming the email (one prefix per kind of
//! email, so two emails of one business event do not share a marker) and the business id of
//! the event it belongs to, never a broker's message id or a random value, so every retry and
//! every duplicate meets the same marker. The prefix is part of what is stored: once markers
//! are written under it, changing it sends every email in the dedup window again.
//!
//! ```no_run
//! use effectively_once_dynamodb::DynamoDbStore;
//! use effectively_once_effects::{send_once, Config, EmailMessage, Idempotency, Key, Policy, SesSender};
//!
//! # async fn example(dynamodb: aws_sdk_dynamodb::Client, ses: aws_sdk_sesv2::Client) -> Result<(), effectively_once_effects::Error> {
//! let markers = Idempotency::new(DynamoDbStore::new(dynamodb, "idempotency"), Config::default());
//! let sender = SesSender::new(ses, "orders@example.com");
//! // `order-confirmation#{order_id}`: one confirmation per order, whatever the deliveries.
//! let key = Key::new("order-confirmation", "ord_0001")?;
//! let message = EmailMessage {
//!     to: "alice@example.com".into(),
//!     subject: "Your order".into(),
//!     text: "We have your order ord_0001.".into(),
//! };
//! let outcome = send_once(&markers, &sender, &key, &message, Policy::default()).await?;
//! if outcome.is_replay() {
//!     // A duplicate delivery: nothing was sent; the first send's outcome is returned.
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`send_once()`] keeps its marker whatever the idempotency disable switch says
//! (`Config::is_disabled`): the marker is the email's once-only condition, not a cache.
//!
//! The module's parts: [`EmailMessage`] (`message`), the [`EmailSender`] seam (here),
//! [`SesSender`] (`ses`) and the one mapping of SES's errors to [`SendErrorKind`]s
//! (`ses_error`), [`send_once()`] and its two rules (`send_once`), and the `RecordingSender` fake
//! (`recording`, with the `test-util` feature).

use std::future::Future;

mod message;
#[cfg(any(test, feature = "test-util"))]
mod recording;
mod send_once;
mod ses;
mod ses_error;

pub use self::message::EmailMessage;
#[cfg(any(test, feature = "test-util"))]
pub use self::recording::RecordingSender;
pub use self::send_once::{on_send_error, send_once, sends_once_claimed, OnSendError, Policy, SendOutcome};
pub use self::ses::SesSender;
pub use crate::error::{SendError, SendErrorKind};

/// Sends one email and returns the provider's message id.
pub trait EmailSender: Send + Sync {
    /// Sends `message`.
    fn send(&self, message: &EmailMessage) -> impl Future<Output = Result<String, SendError>> + Send;
}

impl<E: EmailSender + ?Sized> EmailSender for &E {
    fn send(&self, message: &EmailMessage) -> impl Future<Output = Result<String, SendError>> + Send {
        (**self).send(message)
    }
}

impl<E: EmailSender + ?Sized> EmailSender for std::sync::Arc<E> {
    fn send(&self, message: &EmailMessage) -> impl Future<Output = Result<String, SendError>> + Send {
        (**self).send(message)
    }
}

/// An address as logs may show it (`a***@example.com`). Re-exported from the
/// `effectively-once-redact` crate, which the trigger drivers share.
pub use effectively_once_redact::redact_email;
/// Every email address in free text redacted (`a***@example.com`): a provider's error message,
/// a stored failure reason. Re-exported from the `effectively-once-redact` crate, which the trigger drivers share.
pub use effectively_once_redact::redact_emails;
