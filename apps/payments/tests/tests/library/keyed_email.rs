//! Keyed receipt emails through SES v2 on the local AWS: what the emulator recorded as sent.

use std::sync::Arc;
use std::time::Duration;

use effectively_once::{Config, Idempotency, ManualClock, Outcome, Store};
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::email::{SendError, SendErrorKind};
use effectively_once_effects::{send_once, EmailMessage, EmailSender, Policy, SendOutcome};
use end_to_end::{emails_to, ses_sender};
use payments::receipt_key;

async fn markers() -> (Idempotency<DynamoDbStore>, Arc<ManualClock>) {
    let (store, _) = fresh_store().await;
    let clock = Arc::new(ManualClock::new());
    (Idempotency::new(store, Config::default().with_lease(Duration::from_secs(60)).with_clock(clock.clone())), clock)
}

fn receipt_to(to: &str) -> EmailMessage {
    EmailMessage { to: to.into(), subject: "Receipt for payment".into(), text: "Account credited 12.50 USD.".into() }
}

fn recipient() -> String {
    format!("{}@example.com", unique_name("customer"))
}

#[tokio::test]
async fn two_sends_of_one_key_deliver_one_email() {
    let (idem, _) = markers().await;
    let ses = ses_sender("receipts@example.com").await;
    let to = recipient();
    let key = receipt_key(&unique_name("pay")).unwrap();
    let first = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap();
    let second = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap();
    let Outcome::Fresh(SendOutcome::Sent { message_id }) = first else { panic!("{first:?}") };
    assert_eq!(second, Outcome::Replayed(SendOutcome::Sent { message_id: message_id.clone() }));
    let sent = emails_to(&to);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["id"], message_id.as_str());
}

/// SES with one scripted throttle before the real call.
struct ThrottledOnce<E> {
    inner: E,
    throttled: std::sync::atomic::AtomicBool,
}

impl<E: EmailSender> EmailSender for ThrottledOnce<E> {
    async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
        if !self.throttled.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(SendError::new(SendErrorKind::Throttled, "TooManyRequestsException"));
        }
        self.inner.send(message).await
    }
}

#[tokio::test]
async fn a_throttled_send_then_a_retry_delivers_one_email() {
    let (idem, _) = markers().await;
    let ses = ThrottledOnce { inner: ses_sender("receipts@example.com").await, throttled: Default::default() };
    let to = recipient();
    let key = receipt_key(&unique_name("pay")).unwrap();
    let err = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap_err();
    assert_eq!(err.retry(), effectively_once::Retry::Now, "{err}");
    assert!(emails_to(&to).is_empty());
    let retry = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap();
    assert!(matches!(retry, Outcome::Fresh(SendOutcome::Sent { .. })));
    assert_eq!(emails_to(&to).len(), 1);
}

/// A sender never verified is the configuration's fault, not this message's: nothing is
/// recorded, the marker is released, and once the identity is verified the retry sends one.
#[tokio::test]
async fn an_unverified_sender_is_retried_not_recorded_as_the_messages_fate() {
    let (idem, _) = markers().await;
    // Never verified: SES answers MessageRejected naming the sender.
    let from = format!("{}@unverified.example.com", unique_name("nobody"));
    let client = aws_sdk_sesv2::Client::new(&effectively_once_dynamodb::testing::sdk_config().await);
    let ses = effectively_once_effects::SesSender::new(client.clone(), &from);
    let to = recipient();
    let key = receipt_key(&unique_name("pay")).unwrap();
    let err = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap_err();
    assert!(matches!(&err, effectively_once_effects::Error::Email(e) if e.kind == SendErrorKind::Blocked), "{err}");
    assert_eq!(err.retry(), effectively_once::Retry::AfterFix);
    let local = from.split('@').next().unwrap();
    assert!(!err.to_string().contains(local), "the echoed address is redacted: {err}");
    assert!(idem.store().get(key.as_str()).await.unwrap().is_none(), "marker released");
    assert!(emails_to(&to).is_empty());

    effectively_once_effects::testing::verify_sender(&client, &from).await;
    let retry = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap();
    assert!(matches!(retry, Outcome::Fresh(SendOutcome::Sent { .. })), "{retry:?}");
    assert_eq!(emails_to(&to).len(), 1);
}

/// A recipient SES refuses (here an address without a domain, which the local SES answers with
/// a 400) is this message's fate: recorded, and a duplicate does not resend.
#[tokio::test]
async fn a_refused_recipient_is_recorded_and_a_duplicate_does_not_resend() {
    let (idem, _) = markers().await;
    let ses = ses_sender("receipts@example.com").await;
    let to = unique_name("no-domain");
    let key = receipt_key(&unique_name("pay")).unwrap();
    let first = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap();
    assert!(matches!(&first, Outcome::Fresh(SendOutcome::Failed { .. })), "{first:?}");
    let again = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap();
    assert!(again.is_replay());
    assert!(emails_to(&to).is_empty());
}

/// SES accepts the message, then the attempt dies before its marker completes.
struct AcceptThenDie<E>(E);

impl<E: EmailSender> EmailSender for AcceptThenDie<E> {
    async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
        self.0.send(message).await?;
        std::future::pending().await
    }
}

#[tokio::test]
async fn the_ambiguous_window_under_each_policy() {
    for (policy, emails, outcome) in [(Policy::AtMostOnce, 1, "ambiguous"), (Policy::AtLeastOnce, 2, "sent")] {
        let (idem, clock) = markers().await;
        let ses = ses_sender("receipts@example.com").await;
        let to = recipient();
        let key = receipt_key(&unique_name("pay")).unwrap();
        let message = receipt_to(&to);
        let dying_sender = AcceptThenDie(ses.clone());
        let dying = send_once(&idem, &dying_sender, &key, &message, policy);
        assert!(tokio::time::timeout(Duration::from_millis(500), dying).await.is_err());
        assert_eq!(emails_to(&to).len(), 1, "SES accepted the first copy");
        let early = send_once(&idem, &ses, &key, &message, policy).await.unwrap_err();
        assert_eq!(
            early.retry(),
            effectively_once::Retry::InProgressElsewhere,
            "in progress until the lease ends: {early}"
        );
        clock.advance(Duration::from_secs(61));
        let later = send_once(&idem, &ses, &key, &message, policy).await.unwrap();
        let got = match later.response() {
            SendOutcome::Ambiguous => "ambiguous",
            SendOutcome::Sent { .. } => "sent",
            SendOutcome::Failed { .. } => "failed",
        };
        assert_eq!(got, outcome, "{policy:?}");
        assert_eq!(emails_to(&to).len(), emails, "{policy:?}: emails the emulator recorded");
        println!("{policy:?}: after the attempt died post-SES, outcome {got}, emails sent {emails}");
    }
}

/// The disable switch does not reach the email's marker: `send_once` claims and completes its
/// marker whatever the config says, so even markers on a config the environment turned off
/// (`POWERTOOLS_IDEMPOTENCY_DISABLED=true`) send one email for two sends of one key. (The relay
/// goes further and turns the switch off for its markers; the binaries warn at cold start.)
#[tokio::test]
async fn with_the_disable_switch_set_two_sends_of_one_key_still_deliver_one_email() {
    let (store, _) = fresh_store().await;
    let config = Config::from_env_with(|name| (name == "POWERTOOLS_IDEMPOTENCY_DISABLED").then(|| "true".to_owned()));
    assert!(config.is_disabled());
    let idem = Idempotency::new(store, config.with_lease(Duration::from_secs(60)));
    let ses = ses_sender("receipts@example.com").await;
    let to = recipient();
    let key = receipt_key(&unique_name("pay")).unwrap();
    let first = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap();
    let second = send_once(&idem, &ses, &key, &receipt_to(&to), Policy::default()).await.unwrap();
    assert!(matches!(first, Outcome::Fresh(SendOutcome::Sent { .. })), "{first:?}");
    assert!(second.is_replay(), "{second:?}");
    assert_eq!(emails_to(&to).len(), 1);
}
