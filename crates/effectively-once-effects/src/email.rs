//! Keyed email: a marker record under a key the caller builds fences each send, so a duplicate
//! delivery never sends twice; the one window no email API can close follows a declared
//! [`Policy`].
//!
//! The marker's [`Key`] is the caller's: a prefix naming the email (one prefix per kind of
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
//! [`send_once`] keeps its marker whatever the idempotency disable switch says
//! (`Config::is_disabled`): the marker is the email's once-only condition, not a cache.

#[cfg(any(test, feature = "test-util"))]
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
#[cfg(any(test, feature = "test-util"))]
use std::sync::Mutex;

use aws_sdk_sesv2::config::http::HttpResponse;
use aws_sdk_sesv2::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_sesv2::config::retry::RetryConfig;
use aws_sdk_sesv2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sesv2::error::{BoxError, ConnectorError, SdkError};
use aws_sdk_sesv2::operation::send_email::SendEmailError;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message};
use effectively_once::{Begin, ErrorChain, Idempotency, Key, Outcome, Store};
use serde::{Deserialize, Serialize};

use crate::error::Error;
pub use crate::error::{SendError, SendErrorKind};

/// A plain-text email.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmailMessage {
    /// The recipient.
    pub to: String,
    /// The subject.
    pub subject: String,
    /// The body, plain text.
    pub text: String,
}

// By hand, so that `{:?}` in a log line or a panic message never shows the address.
impl fmt::Debug for EmailMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmailMessage")
            .field("to", &redact_email(&self.to))
            .field("subject", &redact_emails(&self.subject))
            .field("text", &redact_emails(&self.text))
            .finish()
    }
}

impl SendError {
    /// An SES v2 `SendEmail` failure for a send from `from`, classified: the one place SES's
    /// errors are read, public for senders that call SES their own way (and for tests, which
    /// build the SDK's errors).
    ///
    /// A dispatch failure is read down its source chain: a failed connection (DNS, TCP refused
    /// or unreachable, TLS, connect timeout) sent nothing and is
    /// [`Unavailable`](SendErrorKind::Unavailable); any other (a reset or timeout after the
    /// request was written, a lost answer) is [`Ambiguous`](SendErrorKind::Ambiguous).
    /// [`SesSender`] knows one thing more, whether the SDK ever handed the request to its HTTP
    /// client, and so also tells a credentials, auth scheme or endpoint failure (nothing sent:
    /// [`Blocked`](SendErrorKind::Blocked)) from a lost answer.
    pub fn from_ses(err: SdkError<SendEmailError, HttpResponse>, from: &str) -> Self {
        classify_ses(err, from, Transmit::Unknown)
    }
}

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
    /// Sends from `from`, a verified SES identity.
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
        let transmitted = Transmitted::default();
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
            .interceptor(transmitted.clone())
            .send()
            .await
            .map_err(|e| {
                let transmit = if transmitted.0.load(Ordering::SeqCst) { Transmit::Reached } else { Transmit::Never };
                classify_ses(e, &self.from, transmit)
            })?;
        out.message_id()
            .map(str::to_owned)
            .ok_or_else(|| SendError::new(SendErrorKind::Ambiguous, "SES returned no message id"))
    }
}

/// Whether the SDK handed a send's request to its HTTP client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transmit {
    /// It did (or may have: a later interceptor may still have failed it).
    Reached,
    /// It never did: the attempt failed resolving credentials, the auth scheme or the endpoint,
    /// or signing. Not a byte left the host.
    Never,
    /// Not known (an error built elsewhere).
    Unknown,
}

/// An interceptor that records that the request reached the transmit phase: the one signal
/// the SDK gives of whether an error that carries no answer came before anything was sent
/// (its pre-transmit failures arrive as dispatch failures too, `ConnectorError::other`).
#[derive(Debug, Clone, Default)]
struct Transmitted(Arc<AtomicBool>);

impl Intercept for Transmitted {
    fn name(&self) -> &'static str {
        "EmailTransmitted"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// SES errors into send errors, in one place. `from` is the sender, to tell a refusal of the
/// sender (configuration) from a refusal of the recipient (this message); `transmit`, whether
/// the request reached the HTTP client.
fn classify_ses(err: SdkError<SendEmailError, HttpResponse>, from: &str, transmit: Transmit) -> SendError {
    let kind = match &err {
        SdkError::ConstructionFailure(_) => SendErrorKind::Rejected,
        // Failed before the HTTP client had it (credentials, auth scheme, endpoint, signing):
        // nothing was sent, and it is the function's configuration, not this message, at fault.
        SdkError::DispatchFailure(_) if transmit == Transmit::Never => SendErrorKind::Blocked,
        // The operation timed out before transmitting (a credentials provider that hangs).
        SdkError::TimeoutError(_) if transmit == Transmit::Never => SendErrorKind::Unavailable,
        SdkError::DispatchFailure(failure) => match failure.as_connector_error() {
            Some(connector) => classify_dispatch(connector),
            None => SendErrorKind::Ambiguous,
        },
        // Timed out or lost after the request went out: SES may have accepted it; the policy
        // decides.
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => SendErrorKind::Ambiguous,
        SdkError::ServiceError(service) => classify_answer(service.err(), service.raw().status().as_u16(), from),
        _ => SendErrorKind::Ambiguous,
    };
    let message = match &err {
        SdkError::ServiceError(service) => {
            let (text, status) = (service.err().to_string(), service.raw().status().as_u16());
            match service.err().meta().code() {
                // An unmodeled error's text may not name its code.
                Some(code) if !text.contains(code) => format!("{code}: {text} (HTTP {status})"),
                _ => format!("{text} (HTTP {status})"),
            }
        }
        other => other.to_string(),
    };
    SendError::new(kind, message)
}

/// A failure of the HTTP exchange, read down its source chain. Only a failed connection is
/// known to have sent nothing: the SDK's client reports DNS, TCP, TLS and connect-timeout
/// failures as `hyper_util`'s `Connect` errors, and another client's refused connection shows
/// as the OS error (TCP refuses only at connect). An unreachable host or network outside a
/// connect error is not enough: on an established connection whose acknowledgements stop, the
/// kernel reports the route's error on the read, after the request may have arrived. Anything
/// else (a reset, a read timeout, a closed connection, an unreadable answer) may follow the
/// request's last byte: ambiguous.
fn classify_dispatch(err: &ConnectorError) -> SendErrorKind {
    use std::io::ErrorKind as Io;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = next {
        if cause.downcast_ref::<hyper_util::client::legacy::Error>().is_some_and(|e| e.is_connect()) {
            return SendErrorKind::Unavailable;
        }
        if cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == Io::ConnectionRefused) {
            return SendErrorKind::Unavailable;
        }
        next = cause.source();
    }
    SendErrorKind::Ambiguous
}

/// An answer SES gave to SendEmail. Account- and configuration-level refusals are told from
/// refusals of one message, because a refusal recorded as the message's fate is never retried:
/// a paused account would otherwise lose every email sent while it is paused.
fn classify_answer(err: &SendEmailError, status: u16, from: &str) -> SendErrorKind {
    // Both of the account's sending limits come back as throttling, "Daily message quota
    // exceeded" or "Maximum sending rate exceeded" (SES developer guide, "Errors related to the
    // sending quotas for your Amazon SES account"): the rate passes in a second, the day's quota
    // lasts up to a day and is raised for an operator.
    let daily_quota = || err.meta().message().is_some_and(|m| m.to_ascii_lowercase().contains("daily message quota"));
    match err {
        SendEmailError::TooManyRequestsException(_) if daily_quota() => SendErrorKind::Blocked,
        SendEmailError::TooManyRequestsException(_) => SendErrorKind::Throttled,
        SendEmailError::AccountSuspendedException(_)
        | SendEmailError::SendingPausedException(_)
        | SendEmailError::MailFromDomainNotVerifiedException(_)
        // "Too many instances of the specified resource type": the account's limits.
        | SendEmailError::LimitExceededException(_)
        // SendEmail names no resource of the message's own: what is not found is the sender
        // identity, the configuration set, a template or contact list of the configuration.
        | SendEmailError::NotFoundException(_) => SendErrorKind::Blocked,
        // "Email address is not verified. The following identities failed the check ...: x":
        // the same code for an unverified sender (every message fails) and an unverified
        // recipient in the sandbox (this one does). SES gives no structured field, so the
        // identities it lists are read: the sender among them is a configuration fault.
        SendEmailError::MessageRejected(rejected) if names_sender(rejected.message().unwrap_or_default(), from) => {
            SendErrorKind::Blocked
        }
        SendEmailError::MessageRejected(_) | SendEmailError::BadRequestException(_) => SendErrorKind::Rejected,
        // A server error may come after SES queued the message: ambiguous, never resent at most
        // once (a 503 that shed the request is indistinguishable from a 500 after it).
        _ if status >= 500 => SendErrorKind::Ambiguous,
        other => match other.meta().code() {
            Some("Throttling" | "ThrottlingException") if daily_quota() => SendErrorKind::Blocked,
            Some("Throttling" | "ThrottlingException" | "RequestLimitExceeded") => SendErrorKind::Throttled,
            // Credentials or IAM refused the call: the function's configuration, not the message.
            Some(
                "AccessDenied"
                | "AccessDeniedException"
                | "UnrecognizedClientException"
                | "InvalidClientTokenId"
                | "ExpiredToken"
                | "ExpiredTokenException"
                | "SignatureDoesNotMatch"
                | "InvalidSignatureException"
                | "IncompleteSignature"
                | "MissingAuthenticationToken",
            ) => SendErrorKind::Blocked,
            // The server gave up reading the request: it was not processed.
            Some("RequestTimeout" | "RequestTimeoutException") => SendErrorKind::Unavailable,
            _ if status == 408 => SendErrorKind::Unavailable,
            _ if status == 429 => SendErrorKind::Throttled,
            _ if status == 401 || status == 403 => SendErrorKind::Blocked,
            // Any other 4xx is SES refusing this request, and nothing was sent.
            _ if (400..500).contains(&status) => SendErrorKind::Rejected,
            _ => SendErrorKind::Ambiguous,
        },
    }
}

/// Whether `text` lists the sender identity: `from`'s address, or its domain alone (a domain
/// identity), as one of its words, compared whole (`xorders@example.com` is not
/// `orders@example.com`, and a recipient at the sender's domain is not the domain).
/// `from` may be `Name <address>`.
fn names_sender(text: &str, from: &str) -> bool {
    let address = from.rsplit_once('<').map_or(from, |(_, a)| a.trim_end_matches('>')).trim();
    let domain = address.rsplit_once('@').map_or("", |(_, d)| d);
    !address.is_empty()
        && text
            .split(|c: char| {
                c.is_whitespace() || matches!(c, ',' | ';' | '<' | '>' | '"' | '\'' | '(' | ')' | '[' | ']')
            })
            .map(|w| w.trim_end_matches(['.', ':']))
            .any(|w| w.eq_ignore_ascii_case(address) || (!domain.is_empty() && w.eq_ignore_ascii_case(domain)))
}

/// An address as logs may show it (`a***@example.com`). Re-exported from the
/// `effectively-once-redact` crate, which the trigger drivers share.
pub use effectively_once_redact::redact_email;
/// Every email address in free text redacted (`a***@example.com`): a provider's error message,
/// a stored failure reason. Re-exported from the `effectively-once-redact` crate, which the trigger drivers share.
pub use effectively_once_redact::redact_emails;

/// A fake for tests (the `test-util` feature): records what it sends, and fails as scripted.
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug, Default)]
pub struct RecordingSender {
    sent: Mutex<Vec<EmailMessage>>,
    failures: Mutex<VecDeque<SendError>>,
}

#[cfg(any(test, feature = "test-util"))]
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

#[cfg(any(test, feature = "test-util"))]
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
pub enum SendOutcome {
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
    /// The provider may or may not have accepted the message: its answer was lost or was a
    /// server error, or an earlier attempt died between claiming the marker and completing it.
    /// Under [`Policy::AtMostOnce`] it is not resent; an operator checks the provider's sending
    /// records.
    Ambiguous,
}

/// What to do in the window no email API can close: the provider accepted the message, then
/// the attempt died before its marker recorded it.
///
/// The default is [`AtMostOnce`](Policy::AtMostOnce): a customer who gets a receipt or a
/// confirmation twice sees a bug (and may think they paid or ordered twice), while the window is a few milliseconds per
/// send, so a missing email is rare, flagged as [`SendOutcome::Ambiguous`] with an error log, and
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

/// What an email marker's payload hash covers: the email's identity, its key (the event)
/// and its recipient, never its wording. A release that rewords the email then meets an
/// earlier release's marker as a replay, while the same key sent to another recipient is
/// still `KeyReused`.
#[derive(Serialize)]
struct MarkerIdentity<'a> {
    key: &'a str,
    to: &'a str,
}

/// Claims `message`'s marker under its identity ([`MarkerIdentity`]). A marker written before
/// markers hashed the identity carries the hash of the whole message: a `KeyReused` is asked
/// again under that hash, so such a marker replays for the same message (the same wording).
async fn begin_marker<S: Store>(
    idempotency: &Idempotency<S>,
    key: &Key,
    message: &EmailMessage,
) -> Result<Begin<SendOutcome>, effectively_once::Error> {
    let identity = MarkerIdentity { key: key.as_str(), to: &message.to };
    match idempotency.begin(key, &identity).await {
        Err(error) if error.kind() == effectively_once::ErrorKind::KeyReused => {
            match idempotency.begin(key, message).await {
                // The marker blocking both claims may have ended meanwhile, and this second claim
                // won: it holds the marker all the same (its replays find it through this path).
                Ok(begin) => Ok(begin),
                // Under the whole message's hash too: key reuse indeed (another recipient).
                Err(legacy) if legacy.kind() == effectively_once::ErrorKind::KeyReused => Err(error),
                // The marker is the message's, in the earlier form (in progress, say).
                Err(legacy) => Err(legacy),
            }
        }
        other => other,
    }
}

/// Sends `message` once for `effect_key`, the marker's key, built by the caller from its own
/// prefix and the event's business id (see [the module docs](self)).
///
/// Claims the marker, sends, completes the marker with the provider's message id. A definite
/// failure that may pass later (throttling, unreachable, the account or configuration blocked:
/// [`SendErrorKind::Blocked`], logged at error level) releases the marker, so the retry sends
/// (a release whose answer is lost is sent again; one that still fails is logged at error level
/// and its error says the marker is held until its lease ends, after which at most once records
/// the email ambiguous);
/// a refusal of this message is recorded as [`SendOutcome::Failed`]; an ambiguous failure (timeout,
/// lost answer, a 5xx) follows the policy: at most once records [`SendOutcome::Ambiguous`] at once,
/// without sending again (waiting for nothing: no retry will send it), at least once releases
/// the marker so the retry resends. An attempt that died after claiming leaves the marker in
/// progress, and the attempt that takes it over after the lease follows the policy the same way.
///
/// The marker's payload is the email's identity (its key and recipient), not its wording: a
/// reworded email replays, another recipient under the same key is `KeyReused`. An outcome
/// in hand is recorded even after the marker's lease ended, as long as no other attempt took
/// the marker over (`Idempotency::complete_while_owned`).
pub async fn send_once<S: Store, E: EmailSender>(
    idempotency: &Idempotency<S>,
    sender: &E,
    effect_key: &Key,
    message: &EmailMessage,
    policy: Policy,
) -> Result<Outcome<SendOutcome>, Error> {
    let to = redact_email(&message.to);
    let attempt = match begin_marker(idempotency, effect_key, message).await? {
        Begin::Replayed(earlier) => {
            // Redacted: a reason stored before reasons were redacted may hold an address.
            let earlier_text = redact_emails(&format!("{earlier:?}"));
            tracing::info!(key = %effect_key, to = %to, earlier = %earlier_text, "email already handled; not sending");
            return Ok(Outcome::Replayed(earlier));
        }
        Begin::Claimed(attempt) => attempt,
    };
    if !sends_once_claimed(attempt.what_it_replaced(), policy) {
        tracing::error!(
            key = %effect_key,
            to = %to,
            "an earlier attempt died after claiming this email; it may have been sent; not resending (at most once): operator check"
        );
        idempotency.complete_while_owned(attempt, &SendOutcome::Ambiguous).await?;
        return Ok(Outcome::Fresh(SendOutcome::Ambiguous));
    }
    match sender.send(message).await {
        Ok(message_id) => {
            let outcome = SendOutcome::Sent { message_id };
            // Past the lease too, while this attempt still holds the marker: the email is out,
            // and refusing to record it would only leave the marker to a retry that flags it
            // ambiguous or sends it again (see `Idempotency::complete_while_owned`).
            idempotency.complete_while_owned(attempt, &outcome).await?;
            tracing::info!(key = %effect_key, to = %to, "email sent");
            Ok(Outcome::Fresh(outcome))
        }
        Err(error) if on_send_error(error.kind, policy) == OnSendError::RecordFailed => {
            tracing::warn!(key = %effect_key, to = %to, error = %error, "email refused for good");
            let outcome = SendOutcome::Failed { reason: redact_emails(&error.message) };
            idempotency.complete_while_owned(attempt, &outcome).await?;
            Ok(Outcome::Fresh(outcome))
        }
        Err(error) if on_send_error(error.kind, policy) == OnSendError::RecordAmbiguous => {
            // Never released: the retry would send a second copy of a message that may have
            // gone out. Nor left in progress: every retry until the lease ends would find it
            // busy and spend the trigger's retries on it (a stream gives up after a few), while
            // its fate is already known: ambiguous, for an operator.
            tracing::error!(
                key = %effect_key,
                to = %to,
                error = %error,
                "email may have been sent; not resending (at most once): operator check"
            );
            idempotency.complete_while_owned(attempt, &SendOutcome::Ambiguous).await?;
            Ok(Outcome::Fresh(SendOutcome::Ambiguous))
        }
        Err(error) => {
            if error.kind == SendErrorKind::Blocked {
                tracing::error!(key = %effect_key, error = %error, "the email provider refuses this account or configuration; marker released for the retry: operator check");
            } else {
                tracing::warn!(key = %effect_key, to = %to, error = %error, "email not sent; marker released for the retry");
            }
            // A release whose answer is lost is sent again (`Idempotency::release`): a marker
            // left in progress is, to the attempt that takes it over after the lease, a crash
            // mid-send, which at most once records ambiguous and never sends.
            let lease_end_ms = attempt.lease_expires_at_ms();
            if let Err(release) = idempotency.release(attempt).await {
                tracing::error!(
                    key = %effect_key,
                    error = %ErrorChain(&release),
                    lease_end_ms,
                    ?policy,
                    "email not sent, but its marker could not be released: held until its lease ends, then taken over as a possible crash mid-send (at most once: recorded ambiguous, not sent): operator check"
                );
                return Err(Error::Email(held(error, lease_end_ms, &release)));
            }
            Err(Error::Email(error))
        }
    }
}

/// Whether an attempt that claimed the marker sends: not under at most once when its claim
/// may have taken the marker over from an attempt that died mid-send
/// ([`Replaced::is_takeover`](effectively_once::Replaced::is_takeover)); it records the email
/// ambiguous instead. One of the keyed email's two rules, pure so the protocol model
/// (`tests/model`) explores the same ones.
pub fn sends_once_claimed(replaced: &effectively_once::Replaced, policy: Policy) -> bool {
    !(replaced.is_takeover() && policy == Policy::AtMostOnce)
}

/// What a failed send does to the marker ([`on_send_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnSendError {
    /// Complete it with [`SendOutcome::Failed`]: the provider refused this message for good.
    RecordFailed,
    /// Complete it with [`SendOutcome::Ambiguous`]: the message may be out, and at most once
    /// never sends it again.
    RecordAmbiguous,
    /// Release it, so the retry sends: nothing went out (or, at least once, a copy may).
    Release,
}

/// The keyed email's other rule: what a send that failed with `kind` does to the marker.
pub fn on_send_error(kind: SendErrorKind, policy: Policy) -> OnSendError {
    match kind {
        SendErrorKind::Rejected => OnSendError::RecordFailed,
        SendErrorKind::Ambiguous if policy == Policy::AtMostOnce => OnSendError::RecordAmbiguous,
        _ => OnSendError::Release,
    }
}

/// A definite send failure whose marker could not be released: the same kind (retryable, as
/// every kind that releases is), so callers branch as before (a `Blocked` account still raises
/// its alert), and a message that says the marker is held, and until when.
///
/// Why not record the failure on the marker instead, so the takeover could resend: the marker's
/// only write besides the release is its completion, and a completed marker replays for its
/// whole dedup window (no claim may take it over), so "not sent" would need a new [`SendOutcome`]
/// kind that every reader (the relay, replays by older code) would have to learn, and a store
/// that refused the delete three times is unlikely to take the update meanwhile.
fn held(error: SendError, lease_end_ms: u64, release: &effectively_once::Error) -> SendError {
    // An ambiguous failure is released only at least once, whose takeover resends anyway.
    let sent = match error.kind {
        SendErrorKind::Ambiguous => "it may have been sent, and",
        _ => "nothing was sent, but",
    };
    SendError::new(
        error.kind,
        format!(
            "{}; {sent} the email marker is still held until {lease_end_ms} ms (release failed: {})",
            error.message,
            ErrorChain(release)
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use effectively_once::{Config, InMemoryStore, ManualClock};

    use super::*;

    fn setup() -> (Idempotency<InMemoryStore>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        let config = Config::default().with_lease(Duration::from_secs(60)).with_clock(clock.clone());
        (Idempotency::new(InMemoryStore::new(), config), clock)
    }

    fn marker(id: &str) -> Key {
        Key::new("email", id).unwrap()
    }

    fn email(to: &str) -> EmailMessage {
        EmailMessage { to: to.into(), subject: "Confirmation".into(), text: "Received.".into() }
    }

    #[tokio::test]
    async fn two_sends_of_one_key_send_once() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        let key = marker("msg_1");
        let first = send_once(&idem, &sender, &key, &email("a@example.com"), Policy::default()).await.unwrap();
        let second = send_once(&idem, &sender, &key, &email("a@example.com"), Policy::default()).await.unwrap();
        assert_eq!(first, Outcome::Fresh(SendOutcome::Sent { message_id: "fake-1".into() }));
        assert_eq!(second, Outcome::Replayed(SendOutcome::Sent { message_id: "fake-1".into() }));
        assert_eq!(sender.sent().len(), 1);
    }

    #[tokio::test]
    async fn throttled_send_releases_and_the_retry_sends_once() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        sender.fail_next(SendError::new(SendErrorKind::Throttled, "slow down"));
        let key = marker("msg_2");
        let err = send_once(&idem, &sender, &key, &email("b@example.com"), Policy::default()).await.unwrap_err();
        assert!(err.is_retryable());
        let retry = send_once(&idem, &sender, &key, &email("b@example.com"), Policy::default()).await.unwrap();
        assert!(matches!(retry, Outcome::Fresh(SendOutcome::Sent { .. })));
        assert_eq!(sender.sent().len(), 1);
    }

    #[tokio::test]
    async fn a_refused_send_is_recorded_and_not_retried() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        sender.fail_next(SendError::new(SendErrorKind::Rejected, "address suppressed"));
        let key = marker("msg_3");
        let first = send_once(&idem, &sender, &key, &email("c@example.com"), Policy::default()).await.unwrap();
        let again = send_once(&idem, &sender, &key, &email("c@example.com"), Policy::default()).await.unwrap();
        let failed = SendOutcome::Failed { reason: "address suppressed".into() };
        assert_eq!((first, again), (Outcome::Fresh(failed.clone()), Outcome::Replayed(failed)));
        assert!(sender.sent().is_empty());
    }

    /// The ambiguous window: the provider took the message, the attempt died before the marker
    /// completed. At most once never resends; at least once resends after the lease.
    #[tokio::test]
    async fn ambiguous_window_follows_the_policy() {
        for (policy, emails, outcome) in [
            (Policy::AtMostOnce, 1, SendOutcome::Ambiguous),
            (Policy::AtLeastOnce, 2, SendOutcome::Sent { message_id: "fake-2".into() }),
        ] {
            let (idem, clock) = setup();
            let sender = RecordingSender::new();
            let key = marker("msg_4");
            let message = email("d@example.com");
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

    /// An ambiguous answer under at most once is recorded ambiguous at once: its fate is known,
    /// so no retry has to wait for the lease (a stream's few retries would run out first).
    #[tokio::test]
    async fn an_ambiguous_error_is_recorded_at_once_under_at_most_once() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        sender.fail_next(SendError::new(SendErrorKind::Ambiguous, "timed out"));
        let key = marker("msg_5");
        let message = email("e@example.com");
        let first = send_once(&idem, &sender, &key, &message, Policy::AtMostOnce).await.unwrap();
        assert_eq!(first, Outcome::Fresh(SendOutcome::Ambiguous));
        let again = send_once(&idem, &sender, &key, &message, Policy::AtMostOnce).await.unwrap();
        assert_eq!(again, Outcome::Replayed(SendOutcome::Ambiguous), "no lease to wait for");
        assert_eq!(sender.sent().len(), 1, "never a second copy");
    }

    #[tokio::test]
    async fn an_ambiguous_error_is_resent_under_at_least_once() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        sender.fail_next(SendError::new(SendErrorKind::Ambiguous, "timed out"));
        let key = marker("msg_6");
        let message = email("f@example.com");
        let err = send_once(&idem, &sender, &key, &message, Policy::AtLeastOnce).await.unwrap_err();
        assert!(err.is_retryable(), "{err}");
        let retry = send_once(&idem, &sender, &key, &message, Policy::AtLeastOnce).await.unwrap();
        assert!(matches!(retry, Outcome::Fresh(SendOutcome::Sent { .. })), "{retry:?}");
        assert_eq!(sender.sent().len(), 2, "the possible copy, then the resend");
    }

    /// The marker hashes the email's identity: a reworded email (a later release) replays,
    /// another recipient under the same key is key reuse, as before.
    #[tokio::test]
    async fn a_reworded_email_replays_another_recipient_is_key_reuse() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        let key = marker("msg_10");
        let first = send_once(&idem, &sender, &key, &email("j@example.com"), Policy::AtMostOnce).await.unwrap();
        let mut reworded = email("j@example.com");
        reworded.text = "Your order has been received.".into();
        let again = send_once(&idem, &sender, &key, &reworded, Policy::AtMostOnce).await.unwrap();
        assert_eq!(again, Outcome::Replayed(first.into_inner()));
        let other = send_once(&idem, &sender, &key, &email("k@example.com"), Policy::AtMostOnce).await.unwrap_err();
        assert!(
            matches!(&other, Error::Idempotency(e) if e.kind() == effectively_once::ErrorKind::KeyReused),
            "{other}"
        );
        assert_eq!(sender.sent().len(), 1);
    }

    /// A marker an earlier release wrote, hashing the whole message, still replays for the same
    /// message.
    #[tokio::test]
    async fn a_marker_hashing_the_whole_message_still_replays() {
        let (idem, _) = setup();
        let sender = RecordingSender::new();
        let key = marker("msg_11");
        let message = email("l@example.com");
        let Begin::Claimed(old) = idem.begin::<_, SendOutcome>(&key, &message).await.unwrap() else {
            panic!("claimed")
        };
        let sent = SendOutcome::Sent { message_id: "old-1".into() };
        idem.complete(old, &sent).await.unwrap();
        let again = send_once(&idem, &sender, &key, &message, Policy::AtMostOnce).await.unwrap();
        assert_eq!(again, Outcome::Replayed(sent));
        assert!(sender.sent().is_empty());
    }

    /// The provider's answer comes after the marker's lease, and nobody took the marker over:
    /// the message id is recorded, and a duplicate replays it.
    #[tokio::test]
    async fn a_send_answered_after_the_lease_is_recorded_sent() {
        for policy in [Policy::AtMostOnce, Policy::AtLeastOnce] {
            let (idem, clock) = setup();
            struct Slow<'a>(&'a RecordingSender, &'a ManualClock);
            impl EmailSender for Slow<'_> {
                async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
                    let id = self.0.send(message).await?;
                    self.1.advance(Duration::from_secs(61));
                    Ok(id)
                }
            }
            let sender = RecordingSender::new();
            let key = marker("msg_12");
            let message = email("m@example.com");
            let first = send_once(&idem, &Slow(&sender, &clock), &key, &message, policy).await.unwrap();
            let sent = SendOutcome::Sent { message_id: "fake-1".into() };
            assert_eq!(first, Outcome::Fresh(sent.clone()), "{policy:?}");
            let again = send_once(&idem, &sender, &key, &message, policy).await.unwrap();
            assert_eq!(again, Outcome::Replayed(sent), "{policy:?}");
            assert_eq!(sender.sent().len(), 1, "{policy:?}");
        }
    }

    /// Past its lease, a marker another attempt took over is not completed by the first: its
    /// late answer is refused, and the marker keeps the taker's outcome.
    #[tokio::test]
    async fn a_late_answer_after_a_takeover_is_refused() {
        let (idem, clock) = setup();
        let key = marker("msg_13");
        let message = email("n@example.com");
        let Begin::Claimed(first) = begin_marker(&idem, &key, &message).await.unwrap() else { panic!("claimed") };
        clock.advance(Duration::from_secs(61));
        let taker = RecordingSender::new();
        let taken = send_once(&idem, &taker, &key, &message, Policy::AtMostOnce).await.unwrap();
        assert_eq!(taken, Outcome::Fresh(SendOutcome::Ambiguous));
        let late =
            idem.complete_while_owned(first, &SendOutcome::Sent { message_id: "late".into() }).await.unwrap_err();
        assert!(late.is_retryable(), "{late}");
        let stored = idem.store().get(key.as_str()).await.unwrap().unwrap();
        assert!(!stored.response.unwrap_or_default().contains("late"));
    }

    mod ses_errors {
        use aws_sdk_sesv2::error::ErrorMetadata;
        use aws_sdk_sesv2::types::error::{
            AccountSuspendedException, BadRequestException, LimitExceededException, MailFromDomainNotVerifiedException,
            MessageRejected, NotFoundException, SendingPausedException, TooManyRequestsException,
        };

        use super::*;

        const FROM: &str = "receipts@example.com";

        fn answer(status: u16, err: SendEmailError) -> SdkError<SendEmailError, HttpResponse> {
            SdkError::service_error(err, HttpResponse::new(status.try_into().unwrap(), "".into()))
        }

        fn unmodeled(status: u16, code: &str) -> SdkError<SendEmailError, HttpResponse> {
            answer(status, SendEmailError::generic(ErrorMetadata::builder().code(code).message("m").build()))
        }

        fn kind(err: SdkError<SendEmailError, HttpResponse>) -> SendErrorKind {
            SendError::from_ses(err, FROM).kind
        }

        fn rejected(message: &str) -> SdkError<SendEmailError, HttpResponse> {
            answer(400, SendEmailError::MessageRejected(MessageRejected::builder().message(message).build()))
        }

        /// A fake SES: each send fails with the next scripted SDK error, classified as SES's
        /// would be; then it accepts.
        struct ScriptedSes {
            errors: Mutex<VecDeque<SdkError<SendEmailError, HttpResponse>>>,
            inner: RecordingSender,
        }

        impl EmailSender for ScriptedSes {
            async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
                let next = self.errors.lock().unwrap().pop_front();
                match next {
                    Some(err) => Err(SendError::from_ses(err, FROM)),
                    None => self.inner.send(message).await,
                }
            }
        }

        #[test]
        fn account_and_configuration_refusals_are_blocked_not_a_verdict_on_the_message() {
            let cases = [
                answer(400, SendEmailError::SendingPausedException(SendingPausedException::builder().build())),
                answer(400, SendEmailError::AccountSuspendedException(AccountSuspendedException::builder().build())),
                answer(
                    400,
                    SendEmailError::MailFromDomainNotVerifiedException(
                        MailFromDomainNotVerifiedException::builder().build(),
                    ),
                ),
                answer(404, SendEmailError::NotFoundException(NotFoundException::builder().build())),
                answer(400, SendEmailError::LimitExceededException(LimitExceededException::builder().build())),
                rejected(&format!("Email address is not verified. The following identities failed the check in region US-EAST-1: {FROM}")),
                rejected(&format!("Email address not verified {FROM}")),
                rejected("Email address is not verified. The following identities failed the check: example.com"),
                answer(400, SendEmailError::generic(
                    ErrorMetadata::builder().code("ThrottlingException").message("Daily message quota exceeded.").build(),
                )),
                unmodeled(403, "AccessDeniedException"),
                unmodeled(400, "UnrecognizedClientException"),
                unmodeled(403, "SomethingNew"),
            ];
            for err in cases {
                let debug = format!("{err:?}");
                assert_eq!(kind(err), SendErrorKind::Blocked, "{debug}");
            }
        }

        #[test]
        fn refusals_of_one_message_are_rejected() {
            let cases = [
                rejected("Email address is not verified. The following identities failed the check in region US-EAST-1: bob@example.com"),
                // The sender's address inside another word is not the sender.
                rejected(&format!("Email address not verified x{FROM}")),
                // A recipient at the sender's domain is not the sender.
                rejected("Email address is not verified. The following identities failed the check: bob@example.com"),
                rejected("Message rejected: content"),
                answer(400, SendEmailError::BadRequestException(BadRequestException::builder().build())),
                unmodeled(400, "InvalidParameterValue"),
            ];
            for err in cases {
                let debug = format!("{err:?}");
                assert_eq!(kind(err), SendErrorKind::Rejected, "{debug}");
            }
        }

        #[test]
        fn server_errors_and_lost_answers_are_ambiguous_throttling_is_not() {
            for code in ["InternalFailure", "ServiceUnavailable", "InternalServerError"] {
                for status in [500, 503] {
                    assert_eq!(kind(unmodeled(status, code)), SendErrorKind::Ambiguous, "{code} {status}");
                }
            }
            let lost = SdkError::dispatch_failure(aws_sdk_sesv2::error::ConnectorError::io("connection reset".into()));
            assert_eq!(kind(lost), SendErrorKind::Ambiguous);
            let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
            let reset = SdkError::dispatch_failure(aws_sdk_sesv2::error::ConnectorError::io(reset.into()));
            assert_eq!(kind(reset), SendErrorKind::Ambiguous, "a reset may follow the request");
            let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            let refused = SdkError::dispatch_failure(aws_sdk_sesv2::error::ConnectorError::io(refused.into()));
            assert_eq!(kind(refused), SendErrorKind::Unavailable, "a refused connection sent nothing");
            // An established connection whose acknowledgements stop reports the route's error on
            // the read: the request may have arrived, so this is no proof nothing was sent.
            for read_error in [
                std::io::ErrorKind::HostUnreachable,
                std::io::ErrorKind::NetworkUnreachable,
                std::io::ErrorKind::AddrNotAvailable,
            ] {
                let err = std::io::Error::from(read_error);
                let err = SdkError::dispatch_failure(aws_sdk_sesv2::error::ConnectorError::io(err.into()));
                assert_eq!(kind(err), SendErrorKind::Ambiguous, "{read_error:?} outside a connect error");
            }
            let throttled =
                answer(429, SendEmailError::TooManyRequestsException(TooManyRequestsException::builder().build()));
            assert_eq!(kind(throttled), SendErrorKind::Throttled);
            assert_eq!(kind(unmodeled(400, "ThrottlingException")), SendErrorKind::Throttled);
            let rate = ErrorMetadata::builder().code("ThrottlingException").message("Maximum sending rate exceeded.");
            assert_eq!(kind(answer(400, SendEmailError::generic(rate.build()))), SendErrorKind::Throttled);
            assert_eq!(kind(unmodeled(429, "SlowDown")), SendErrorKind::Throttled);
            assert_eq!(kind(unmodeled(408, "RequestTimeout")), SendErrorKind::Unavailable);
        }

        #[test]
        fn addresses_ses_echoes_are_redacted() {
            let err = SendError::from_ses(
                rejected("Email address is not verified. The following identities failed the check: bob.smith@example.com, receipts@example.com."),
                FROM,
            );
            for text in [err.message.clone(), err.to_string(), format!("{err:?}")] {
                assert!(!text.contains("bob.smith") && !text.contains("receipts@"), "{text}");
                assert!(text.contains("b***@example.com"), "{text}");
            }
            eprintln!("MSG {}", err.message);
            eprintln!("MSG {}", SendError::from_ses(unmodeled(500, "InternalFailure"), FROM).message);
            let literal = SendError { kind: SendErrorKind::Rejected, message: "refused carol@example.com".into() };
            assert!(!literal.to_string().contains("carol") && !format!("{literal:?}").contains("carol"));
            let message = email("dave@example.com");
            assert!(!format!("{message:?}").contains("dave"), "{message:?}");
        }

        /// Sending paused: not recorded as the message's fate. The marker is released and the
        /// send retried once the account sends again: one email, never a `Failed` outcome.
        #[tokio::test]
        async fn a_paused_account_releases_the_marker_and_the_retry_sends() {
            for blocked in [
                answer(400, SendEmailError::SendingPausedException(SendingPausedException::builder().build())),
                answer(400, SendEmailError::AccountSuspendedException(AccountSuspendedException::builder().build())),
                answer(404, SendEmailError::NotFoundException(NotFoundException::builder().build())),
                rejected(&format!("Email address not verified {FROM}")),
            ] {
                let (idem, _) = setup();
                let ses = ScriptedSes { errors: Mutex::new(VecDeque::from([blocked])), inner: RecordingSender::new() };
                let key = marker("msg_7");
                let message = email("g@example.com");
                let err = send_once(&idem, &ses, &key, &message, Policy::AtMostOnce).await.unwrap_err();
                assert!(err.is_retryable(), "{err}");
                assert!(matches!(&err, Error::Email(e) if e.kind == SendErrorKind::Blocked), "{err}");
                assert!(idem.store().get(key.as_str()).await.unwrap().is_none(), "marker released");
                let retry = send_once(&idem, &ses, &key, &message, Policy::AtMostOnce).await.unwrap();
                assert!(matches!(retry, Outcome::Fresh(SendOutcome::Sent { .. })), "{retry:?}");
                assert_eq!(ses.inner.sent().len(), 1);
            }
        }

        /// A refusal of the recipient stays the message's recorded fate, reason redacted.
        #[tokio::test]
        async fn a_refused_recipient_is_recorded_redacted() {
            let (idem, _) = setup();
            let refused = rejected("Email address is not verified. The following identities failed the check in region US-EAST-1: hank@example.com");
            let ses = ScriptedSes { errors: Mutex::new(VecDeque::from([refused])), inner: RecordingSender::new() };
            let key = marker("msg_8");
            let first = send_once(&idem, &ses, &key, &email("hank@example.com"), Policy::AtMostOnce).await.unwrap();
            let Outcome::Fresh(SendOutcome::Failed { reason }) = &first else { panic!("{first:?}") };
            assert!(reason.contains("h***@example.com") && !reason.contains("hank"), "{reason}");
            let stored = idem.store().get(key.as_str()).await.unwrap().unwrap();
            assert!(!stored.response.unwrap_or_default().contains("hank"), "the stored reason is redacted");
            let again = send_once(&idem, &ses, &key, &email("hank@example.com"), Policy::AtMostOnce).await.unwrap();
            assert!(again.is_replay());
            assert!(ses.inner.sent().is_empty());
        }

        /// A 5xx under at most once: ambiguous, never resent.
        #[tokio::test]
        async fn a_server_error_is_never_resent_at_most_once() {
            let (idem, clock) = setup();
            let ses = ScriptedSes {
                errors: Mutex::new(VecDeque::from([unmodeled(500, "InternalFailure")])),
                inner: RecordingSender::new(),
            };
            let key = marker("msg_9");
            let message = email("i@example.com");
            let first = send_once(&idem, &ses, &key, &message, Policy::AtMostOnce).await.unwrap();
            assert_eq!(first, Outcome::Fresh(SendOutcome::Ambiguous));
            clock.advance(Duration::from_secs(3600));
            let later = send_once(&idem, &ses, &key, &message, Policy::AtMostOnce).await.unwrap();
            assert_eq!(later, Outcome::Replayed(SendOutcome::Ambiguous));
            assert!(ses.inner.sent().is_empty(), "not sent again");
        }
    }
}
