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
    configuration_set: Option<String>,
}

impl SesSender {
    /// Sends from `from`, a verified SES identity.
    pub fn new(client: aws_sdk_sesv2::Client, from: impl Into<String>) -> Self {
        SesSender { client, from: from.into(), configuration_set: None }
    }

    /// Sends every email under the SES configuration set `name` (its event destinations and
    /// reputation metrics: bounce and complaint rates an alarm can watch); `None` or an empty
    /// name sends without one.
    pub fn with_configuration_set(mut self, name: Option<String>) -> Self {
        self.configuration_set = name.filter(|n| !n.is_empty());
        self
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
            .set_configuration_set_name(self.configuration_set.clone())
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use aws_sdk_sesv2::config::interceptors::BeforeTransmitInterceptorContextRef;

    use super::*;

    /// Keeps the body of the request about to be sent, then fails it: nothing leaves the host.
    #[derive(Debug, Clone, Default)]
    struct Capture(Arc<Mutex<Option<String>>>);

    impl Intercept for Capture {
        fn name(&self) -> &'static str {
            "Capture"
        }

        fn read_before_transmit(
            &self,
            context: &BeforeTransmitInterceptorContextRef<'_>,
            _runtime_components: &RuntimeComponents,
            _cfg: &mut ConfigBag,
        ) -> Result<(), BoxError> {
            let body = context.request().body().bytes().map(|b| String::from_utf8_lossy(b).into_owned());
            *self.0.lock().unwrap() = body;
            Err("captured".into())
        }
    }

    /// The JSON body of the `SendEmail` request `sender` makes (compared as text: the test
    /// build has no JSON parser of its own).
    async fn request_body(sender: impl Fn(aws_sdk_sesv2::Client) -> SesSender) -> String {
        let capture = Capture::default();
        let conf = aws_sdk_sesv2::Config::builder()
            .behavior_version_latest()
            .region(aws_sdk_sesv2::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sesv2::config::Credentials::new("test", "test", None, None, "test"))
            .endpoint_url("http://127.0.0.1:9")
            .interceptor(capture.clone())
            .build();
        let message = EmailMessage { to: "a@example.com".into(), subject: "s".into(), text: "t".into() };
        assert!(sender(aws_sdk_sesv2::Client::from_conf(conf)).send(&message).await.is_err());
        let body = capture.0.lock().unwrap().clone().expect("the request reached transmit");
        body
    }

    #[tokio::test]
    async fn the_configuration_set_is_named_on_every_send_when_set() {
        let with =
            request_body(|c| SesSender::new(c, "r@example.com").with_configuration_set(Some("receipts-prod".into())))
                .await;
        assert!(with.contains(r#""ConfigurationSetName":"receipts-prod""#), "{with}");
        assert!(with.contains(r#""FromEmailAddress":"r@example.com""#), "{with}");
        let without =
            request_body(|c| SesSender::new(c, "r@example.com").with_configuration_set(Some(String::new()))).await;
        assert!(!without.contains("ConfigurationSetName"), "{without}");
    }
}
