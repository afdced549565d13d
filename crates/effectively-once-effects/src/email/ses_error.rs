//! SES's errors read once, into a [`SendErrorKind`]: what a failed send means for its marker
//! (released and retried, recorded as the message's fate, or ambiguous).

use aws_sdk_sesv2::config::http::HttpResponse;
use aws_sdk_sesv2::error::{ConnectorError, SdkError};
use aws_sdk_sesv2::operation::send_email::SendEmailError;

use super::ses::Transmit;
use super::{SendError, SendErrorKind};

impl SendError {
    /// An SES v2 `SendEmail` failure for a send from `from`, classified: the one place SES's
    /// errors are read, public for senders that call SES their own way (and for tests, which
    /// build the SDK's errors).
    ///
    /// A dispatch failure is read down its source chain: a failed connection (DNS, TCP refused
    /// or unreachable, TLS, connect timeout) sent nothing and is
    /// [`Unavailable`](SendErrorKind::Unavailable); any other (a reset or timeout after the
    /// request was written, a lost answer) is [`Ambiguous`](SendErrorKind::Ambiguous).
    /// [`SesSender`](crate::email::SesSender) knows one thing more, whether the SDK ever handed
    /// the request to its HTTP client, and so also tells a credentials, auth scheme or endpoint failure (nothing sent:
    /// [`Blocked`](SendErrorKind::Blocked)) from a lost answer.
    pub fn from_ses(err: SdkError<SendEmailError, HttpResponse>, from: &str) -> Self {
        send_error_from_sdk(err, from, Transmit::Unknown)
    }
}

/// SES errors into send errors, in one place. `from` is the sender, to tell a refusal of the
/// sender (configuration) from a refusal of the recipient (this message); `transmit`, whether
/// the request reached the HTTP client.
pub(super) fn send_error_from_sdk(
    err: SdkError<SendEmailError, HttpResponse>,
    from: &str,
    transmit: Transmit,
) -> SendError {
    let kind = match &err {
        SdkError::ConstructionFailure(_) => SendErrorKind::Rejected,
        // Failed before the HTTP client had it (credentials, auth scheme, endpoint, signing):
        // nothing was sent, and it is the function's configuration, not this message, at fault.
        SdkError::DispatchFailure(_) if transmit == Transmit::Never => SendErrorKind::Blocked,
        // The operation timed out before transmitting (a credentials provider that hangs).
        SdkError::TimeoutError(_) if transmit == Transmit::Never => SendErrorKind::Unavailable,
        SdkError::DispatchFailure(failure) => match failure.as_connector_error() {
            Some(connector) => dispatch_failure_kind(connector),
            None => SendErrorKind::Ambiguous,
        },
        // Timed out or lost after the request went out: SES may have accepted it; the policy
        // decides.
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => SendErrorKind::Ambiguous,
        SdkError::ServiceError(service) => answer_kind(service.err(), service.raw().status().as_u16(), from),
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
fn dispatch_failure_kind(err: &ConnectorError) -> SendErrorKind {
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
fn answer_kind(err: &SendEmailError, status: u16, from: &str) -> SendErrorKind {
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

#[cfg(test)]
mod tests {
    use aws_sdk_sesv2::error::ErrorMetadata;
    use aws_sdk_sesv2::types::error::{
        AccountSuspendedException, BadRequestException, LimitExceededException, MailFromDomainNotVerifiedException,
        MessageRejected, NotFoundException, SendingPausedException, TooManyRequestsException,
    };
    use effectively_once::{Outcome, Retry, Store};

    use super::*;
    use crate::email::send_once::tests::{email, marker, setup};
    use crate::email::{send_once, EmailMessage, EmailSender, Policy, RecordingSender, SendOutcome};
    use crate::Error;
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::time::Duration;

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
            rejected(&format!(
                "Email address is not verified. The following identities failed the check in region US-EAST-1: {FROM}"
            )),
            rejected(&format!("Email address not verified {FROM}")),
            rejected("Email address is not verified. The following identities failed the check: example.com"),
            answer(
                400,
                SendEmailError::generic(
                    ErrorMetadata::builder()
                        .code("ThrottlingException")
                        .message("Daily message quota exceeded.")
                        .build(),
                ),
            ),
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
            assert_eq!(err.retry(), Retry::AfterFix, "{err}");
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
