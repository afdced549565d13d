//! Review findings (issue 11): SES faults where nothing was sent, yet the email is recorded
//! `Ambiguous` (never sent, never retried) or `Failed`. (The addresses that survived redaction
//! are in the payments crate's tests: the payment contract decides which addresses arrive.)

use std::time::Duration;

use aws_sdk_sesv2::config::{Credentials, Region};
use effectively_once::{Config, Idempotency, InMemoryStore, Outcome, Store};
use effectively_once_effects::{send_once, EmailMessage, Key, Policy, SendErrorKind, SendOutcome, SesSender};

fn markers() -> Idempotency<InMemoryStore> {
    Idempotency::new(InMemoryStore::new(), Config::default().with_lease(Duration::from_secs(60)))
}

fn message() -> EmailMessage {
    EmailMessage { to: "alice@example.com".into(), subject: "Receipt".into(), text: "paid".into() }
}

/// An SES client whose endpoint refuses every connection: the request never leaves the host.
fn ses(endpoint: &str, credentials: bool) -> SesSender {
    let mut config = aws_sdk_sesv2::Config::builder()
        .behavior_version_latest()
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint);
    if credentials {
        config = config.credentials_provider(Credentials::new("test", "test", None, None, "review"));
    }
    SesSender::new(aws_sdk_sesv2::Client::from_conf(config.build()), "receipts@example.com")
}

/// A refused connection (nothing listens on port 1) means SES was never reached: nothing can
/// have been sent, so the marker should be released and the receipt retried. Today every
/// dispatch failure is `Ambiguous`, so under at most once the receipt is recorded AMBIGUOUS at
/// once and never sent: an SES endpoint that is unreachable for a minute (VPC without a route,
/// DNS failure, connect timeout) turns every receipt of that minute into a lost one.
#[tokio::test]
async fn review_a_refused_connection_is_not_ambiguous() {
    let idem = markers();
    let key = Key::new("email", "msg_refused").unwrap();
    let sender = ses("http://127.0.0.1:1", true);
    let outcome = send_once(&idem, &sender, &key, &message(), Policy::AtMostOnce).await;
    match outcome {
        Err(effectively_once_effects::Error::Email(e)) => {
            assert!(e.is_retryable(), "{e}");
            assert!(idem.store().get(key.as_str()).await.unwrap().is_none(), "marker released for the retry");
        }
        other => panic!("SES was never reached, yet the receipt's fate is recorded: {other:?}"),
    }
}

/// Credentials that cannot be resolved (an expired role session, a broken credentials
/// endpoint) are a configuration fault, `Blocked` by the crate's own rules (AccessDenied,
/// ExpiredToken... are Blocked): retried and raised, never the message's recorded fate.
#[tokio::test]
async fn review_missing_credentials_are_blocked_not_the_messages_fate() {
    let idem = markers();
    let key = Key::new("email", "msg_nocreds").unwrap();
    let sender = ses("http://127.0.0.1:1", false);
    let outcome = send_once(&idem, &sender, &key, &message(), Policy::AtMostOnce).await;
    match outcome {
        Err(effectively_once_effects::Error::Email(e)) => assert_eq!(e.kind, SendErrorKind::Blocked, "{e}"),
        Ok(Outcome::Fresh(r @ (SendOutcome::Ambiguous | SendOutcome::Failed { .. }))) => {
            panic!("no request was ever signed, yet the receipt is recorded {r:?}")
        }
        other => panic!("{other:?}"),
    }
}
