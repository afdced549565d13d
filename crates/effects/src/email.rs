//! Keyed email: a marker record `email#{event_id}` fences each send, so a duplicate delivery
//! never sends twice; the one window no email API can close follows a declared [`Policy`].

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::Mutex;

use aws_sdk_sesv2::config::retry::RetryConfig;
use aws_sdk_sesv2::error::SdkError;
use aws_sdk_sesv2::operation::send_email::SendEmailError;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message};
use idempotency::{Begin, Idempotency, Key, Outcome, Store};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::payment::redact_email;

/// The key prefix of email markers: `email#{event_id}`.
pub const PREFIX: &str = "email";

/// The marker key of an event's email: deterministic, never random, so every retry and every
/// duplicate meets the same marker.
pub fn email_key(event_id: &str) -> Result<Key, idempotency::KeyError> {
    Key::new(PREFIX, event_id)
}

/// A plain-text email.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailMessage {
    /// The recipient.
    pub to: String,
    /// The subject.
    pub subject: String,
    /// The body, plain text.
    pub text: String,
}

/// How a provider's failure bears on a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendErrorKind {
    /// The provider shed load; the message was not accepted. Retryable.
    Throttled,
    /// The provider answered that it is unavailable (a 5xx before accepting). Retryable.
    Unavailable,
    /// The request may have been accepted: it timed out, or its answer was lost. Retryable,
    /// under the [`Policy`] of the ambiguous window.
    Ambiguous,
    /// The provider refused the message for good (unverified sender, rejected content or
    /// address). Permanent.
    Rejected,
}

/// An email provider's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendError {
    /// How it bears on a retry.
    pub kind: SendErrorKind,
    /// What the provider said.
    pub message: String,
}

impl SendError {
    /// A failure of the given kind.
    pub fn new(kind: SendErrorKind, message: impl Into<String>) -> Self {
        SendError { kind, message: message.into() }
    }

    /// Whether a retry may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind != SendErrorKind::Rejected
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "email {:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for SendError {}

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

/// Amazon SES v2.
#[derive(Debug, Clone)]
pub struct SesSender {
    client: aws_sdk_sesv2::Client,
    from: String,
}

impl SesSender {
    /// Sends from `from` (a verified identity; env `RECEIPT_FROM` in the binaries).
    pub fn new(client: aws_sdk_sesv2::Client, from: impl Into<String>) -> Self {
        SesSender { client, from: from.into() }
    }
}

impl EmailSender for SesSender {
    async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
        let content = |data: &str| {
            Content::builder()
                .data(data)
                .charset("UTF-8")
                .build()
                .map_err(|e| SendError::new(SendErrorKind::Rejected, e.to_string()))
        };
        let simple = Message::builder()
            .subject(content(&message.subject)?)
            .body(Body::builder().text(content(&message.text)?).build())
            .build();
        let out = self
            .client
            .send_email()
            .from_email_address(&self.from)
            .destination(Destination::builder().to_addresses(&message.to).build())
            .content(EmailContent::builder().simple(simple).build())
            .customize()
            // SendEmail is not idempotent: an SDK retry after a lost answer sends a second
            // copy behind the marker's back. One attempt; `send_once` retries what is safe to.
            .config_override(aws_sdk_sesv2::config::Builder::default().retry_config(RetryConfig::disabled()))
            .send()
            .await
            .map_err(classify_ses)?;
        out.message_id()
            .map(str::to_owned)
            .ok_or_else(|| SendError::new(SendErrorKind::Ambiguous, "SES returned no message id"))
    }
}

/// SES errors into send errors, in one place.
fn classify_ses<R: fmt::Debug>(err: SdkError<SendEmailError, R>) -> SendError {
    let kind = match &err {
        SdkError::ConstructionFailure(_) => SendErrorKind::Rejected,
        // A dispatch failure may be a refused connection (nothing sent) or a connection closed
        // after the request went out (SES may have accepted it): the SDK does not tell them
        // apart, so both are ambiguous, and the policy decides.
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) | SdkError::DispatchFailure(_) => {
            SendErrorKind::Ambiguous
        }
        SdkError::ServiceError(e) => match e.err() {
            SendEmailError::TooManyRequestsException(_) | SendEmailError::LimitExceededException(_) => {
                SendErrorKind::Throttled
            }
            e if e.meta().code() == Some("ServiceUnavailable") || e.meta().code() == Some("InternalFailure") => {
                SendErrorKind::Unavailable
            }
            SendEmailError::MessageRejected(_)
            | SendEmailError::MailFromDomainNotVerifiedException(_)
            | SendEmailError::AccountSuspendedException(_)
            | SendEmailError::SendingPausedException(_)
            | SendEmailError::BadRequestException(_)
            | SendEmailError::NotFoundException(_) => SendErrorKind::Rejected,
            _ => SendErrorKind::Ambiguous,
        },
        _ => SendErrorKind::Ambiguous,
    };
    let message = match &err {
        SdkError::ServiceError(e) => format!("{}", e.err()),
        other => other.to_string(),
    };
    SendError::new(kind, message)
}

/// A fake for unit tests: records what it sends, and fails as scripted.
#[derive(Debug, Default)]
pub struct RecordingSender {
    sent: Mutex<Vec<EmailMessage>>,
    failures: Mutex<VecDeque<SendError>>,
}

impl RecordingSender {
    /// A sender that accepts everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next send fails with `error` (queued: one scripted failure per send).
    pub fn fail_next(&self, error: SendError) {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).push_back(error);
    }

    /// The messages sent so far.
    pub fn sent(&self) -> Vec<EmailMessage> {
        self.sent.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl EmailSender for RecordingSender {
    async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
        if let Some(error) = self.failures.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
            if error.kind == SendErrorKind::Ambiguous {
                // Ambiguous means it may have gone out: the fake says it did.
                self.sent.lock().unwrap_or_else(|p| p.into_inner()).push(message.clone());
            }
            return Err(error);
        }
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        sent.push(message.clone());
        Ok(format!("fake-{}", sent.len()))
    }
}

/// What happened to a keyed email. Stored in its marker, so a duplicate gets the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Receipt {
    /// The provider accepted it.
    Sent {
        /// The provider's message id.
        message_id: String,
    },
    /// The provider refused it for good; not retried.
    Failed {
        /// What the provider said.
        reason: String,
    },
    /// An earlier attempt died between claiming the marker and completing it, maybe after the
    /// provider accepted the message. Under [`Policy::AtMostOnce`] it is not resent; an
    /// operator checks the provider's sending records.
    Ambiguous,
}

/// What to do in the window no email API can close: the provider accepted the message, then
/// the attempt died before its marker recorded it.
///
/// The default is [`AtMostOnce`](Policy::AtMostOnce): a customer who gets a payment receipt
/// twice sees a bug (and may think they paid twice), while the window is a few milliseconds per
/// send, so a missing receipt is rare, flagged as [`Receipt::Ambiguous`] with an error log, and
/// an operator can check SES's sending events and resend by hand. Choose
/// [`AtLeastOnce`](Policy::AtLeastOnce) for messages whose loss costs more than a duplicate
/// (a password reset, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Never resend after the ambiguous window; flag it instead. No duplicate emails, ever.
    #[default]
    AtMostOnce,
    /// Resend once the dead attempt's lease ends. No lost emails; a duplicate only in the
    /// ambiguous window.
    AtLeastOnce,
}

/// Sends `message` once for `effect_key` (see [`email_key`]).
///
/// Claims the marker, sends, completes the marker with the provider's message id. A definite
/// failure that may pass later (throttling, unreachable) releases the marker, so the retry sends;
/// a permanent refusal is recorded as [`Receipt::Failed`]; an ambiguous failure (timeout) leaves
/// the marker in progress, and when a later attempt takes it over after the lease the policy
/// decides: [`Receipt::Ambiguous`] without sending, or a resend.
pub async fn send_once<S: Store, E: EmailSender>(
    idempotency: &Idempotency<S>,
    sender: &E,
    effect_key: &Key,
    message: &EmailMessage,
    policy: Policy,
) -> Result<Outcome<Receipt>, Error> {
    let to = redact_email(&message.to);
    let attempt = match idempotency.begin::<_, Receipt>(effect_key, message).await? {
        Begin::Replayed(receipt) => {
            tracing::info!(key = %effect_key, to = %to, ?receipt, "email already handled; not sending");
            return Ok(Outcome::Replayed(receipt));
        }
        Begin::Claimed(attempt) => attempt,
    };
    if attempt.took_over() && policy == Policy::AtMostOnce {
        tracing::error!(
            key = %effect_key,
            to = %to,
            "an earlier attempt died after claiming this email; it may have been sent; not resending (at most once): operator check"
        );
        idempotency.complete(attempt, &Receipt::Ambiguous).await?;
        return Ok(Outcome::Fresh(Receipt::Ambiguous));
    }
    match sender.send(message).await {
        Ok(message_id) => {
            let receipt = Receipt::Sent { message_id };
            idempotency.complete(attempt, &receipt).await?;
            tracing::info!(key = %effect_key, to = %to, "email sent");
            Ok(Outcome::Fresh(receipt))
        }
        Err(e) if e.kind == SendErrorKind::Rejected => {
            tracing::warn!(key = %effect_key, to = %to, error = %e, "email refused for good");
            let receipt = Receipt::Failed { reason: e.message };
            idempotency.complete(attempt, &receipt).await?;
            Ok(Outcome::Fresh(receipt))
        }
        Err(e) if e.kind == SendErrorKind::Ambiguous && policy == Policy::AtMostOnce => {
            // Keep the marker: releasing it would let the retry send a second copy of a
            // message that may have gone out. The takeover after the lease flags it.
            tracing::warn!(key = %effect_key, to = %to, error = %e, "email may have been sent; marker kept");
            drop(attempt);
            Err(Error::Email(e))
        }
        Err(e) => {
            tracing::warn!(key = %effect_key, to = %to, error = %e, "email not sent; marker released for the retry");
            if let Err(release) = idempotency.release(attempt).await {
                tracing::warn!(key = %effect_key, error = %release, "could not release the marker; the retry waits for its lease");
            }
            Err(Error::Email(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use idempotency::{Config, InMemoryStore, ManualClock};

    use super::*;

    fn setup() -> (Idempotency<InMemoryStore>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        let config = Config::default().lease(Duration::from_secs(60)).clock(clock.clone());
        (Idempotency::new(InMemoryStore::new(), config), clock)
    }

    fn receipt(to: &str) -> EmailMessage {
        EmailMessage { to: to.into(), subject: "Receipt".into(), text: "Paid.".into() }
    }

    #[tokio::test]
    async fn two_sends_of_one_key_send_once() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        let key = email_key("pay_1").unwrap();
        let first = send_once(&idem, &sender, &key, &receipt("a@example.com"), Policy::default()).await.unwrap();
        let second = send_once(&idem, &sender, &key, &receipt("a@example.com"), Policy::default()).await.unwrap();
        assert_eq!(first, Outcome::Fresh(Receipt::Sent { message_id: "fake-1".into() }));
        assert_eq!(second, Outcome::Replayed(Receipt::Sent { message_id: "fake-1".into() }));
        assert_eq!(sender.sent().len(), 1);
    }

    #[tokio::test]
    async fn throttled_send_releases_and_the_retry_sends_once() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        sender.fail_next(SendError::new(SendErrorKind::Throttled, "slow down"));
        let key = email_key("pay_2").unwrap();
        let err = send_once(&idem, &sender, &key, &receipt("b@example.com"), Policy::default()).await.unwrap_err();
        assert!(err.is_retryable());
        let retry = send_once(&idem, &sender, &key, &receipt("b@example.com"), Policy::default()).await.unwrap();
        assert!(matches!(retry, Outcome::Fresh(Receipt::Sent { .. })));
        assert_eq!(sender.sent().len(), 1);
    }

    #[tokio::test]
    async fn a_refused_send_is_recorded_and_not_retried() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        sender.fail_next(SendError::new(SendErrorKind::Rejected, "address suppressed"));
        let key = email_key("pay_3").unwrap();
        let first = send_once(&idem, &sender, &key, &receipt("c@example.com"), Policy::default()).await.unwrap();
        let again = send_once(&idem, &sender, &key, &receipt("c@example.com"), Policy::default()).await.unwrap();
        let failed = Receipt::Failed { reason: "address suppressed".into() };
        assert_eq!((first, again), (Outcome::Fresh(failed.clone()), Outcome::Replayed(failed)));
        assert!(sender.sent().is_empty());
    }

    /// The ambiguous window: the provider took the message, the attempt died before the marker
    /// completed. At most once never resends; at least once resends after the lease.
    #[tokio::test]
    async fn ambiguous_window_follows_the_policy() {
        for (policy, emails, outcome) in [
            (Policy::AtMostOnce, 1, Receipt::Ambiguous),
            (Policy::AtLeastOnce, 2, Receipt::Sent { message_id: "fake-2".into() }),
        ] {
            let (idem, clock) = setup();
            let sender = RecordingSender::new();
            let key = email_key("pay_4").unwrap();
            let message = receipt("d@example.com");
            // The send is accepted, then the attempt dies before completing the marker.
            struct SendThenDie<'a>(&'a RecordingSender);
            impl EmailSender for SendThenDie<'_> {
                async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
                    self.0.send(message).await?;
                    std::future::pending().await
                }
            }
            let dying_sender = SendThenDie(&sender);
            let dying = send_once(&idem, &dying_sender, &key, &message, policy);
            assert!(tokio::time::timeout(Duration::from_millis(50), dying).await.is_err());
            assert_eq!(sender.sent().len(), 1);
            let early = send_once(&idem, &sender, &key, &message, policy).await.unwrap_err();
            assert!(early.is_retryable(), "in progress until the lease ends");
            clock.advance(Duration::from_secs(61));
            let later = send_once(&idem, &sender, &key, &message, policy).await.unwrap();
            assert_eq!(later, Outcome::Fresh(outcome.clone()), "{policy:?}");
            assert_eq!(sender.sent().len(), emails, "{policy:?}");
            let replay = send_once(&idem, &sender, &key, &message, policy).await.unwrap();
            assert_eq!(replay, Outcome::Replayed(outcome), "{policy:?}");
        }
    }

    #[tokio::test]
    async fn an_ambiguous_error_keeps_the_marker_under_at_most_once() {
        let (idem, clock) = setup();
        let sender = RecordingSender::new();
        sender.fail_next(SendError::new(SendErrorKind::Ambiguous, "timed out"));
        let key = email_key("pay_5").unwrap();
        let message = receipt("e@example.com");
        assert!(send_once(&idem, &sender, &key, &message, Policy::AtMostOnce).await.is_err());
        assert!(send_once(&idem, &sender, &key, &message, Policy::AtMostOnce).await.is_err());
        clock.advance(Duration::from_secs(61));
        let later = send_once(&idem, &sender, &key, &message, Policy::AtMostOnce).await.unwrap();
        assert_eq!(later, Outcome::Fresh(Receipt::Ambiguous));
        assert_eq!(sender.sent().len(), 1, "never a second copy");
    }
}
