//! [`SesSender`]: SES v2's `SendEmail`, one attempt per send, and whether the request ever left
//! the host, which the error mapping (`ses_error`) needs to tell "nothing sent" from "lost".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use aws_sdk_sesv2::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_sesv2::config::retry::RetryConfig;
use aws_sdk_sesv2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sesv2::error::BoxError;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message};

use super::ses_error::send_error_from_sdk;
use super::{EmailMessage, EmailSender, SendError, SendErrorKind};

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
                send_error_from_sdk(e, &self.from, transmit)
            })?;
        out.message_id()
            .map(str::to_owned)
            .ok_or_else(|| SendError::new(SendErrorKind::Ambiguous, "SES returned no message id"))
    }
}

/// Whether the SDK handed a send's request to its HTTP client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transmit {
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
