//! The relay under email provider faults, on the local AWS: what happens to the outbox row, the
//! stream record and the emails the local SES recorded when SES refuses the account, refuses
//! the message, loses its answer, or an earlier attempt died holding the marker.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{verified_ses, Pending};
use aws_sdk_sesv2::config::http::HttpResponse;
use aws_sdk_sesv2::config::{AsyncSleep, Sleep};
use aws_sdk_sesv2::error::SdkError;
use aws_sdk_sesv2::operation::send_email::SendEmailError;
use aws_sdk_sesv2::types::error::{
    AccountSuspendedException, MailFromDomainNotVerifiedException, MessageRejected, NotFoundException,
    SendingPausedException,
};
use effectively_once::{Begin, Idempotency, ManualClock, Store};
use effectively_once_dynamodb::testing::{sdk_config, unique_name};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::email::SendError;
use effectively_once_effects::testing::{emails_to, verify_sender};
use effectively_once_effects::{EmailMessage, EmailSender, Policy, SendOutcome, SesSender};
use effectively_once_lambda::streams::{process, Handler, Options};
use effectively_once_lambda::Retry;
use lambda_runtime::{Context, LambdaEvent};
use payments::receipt_key;
use receipts_relay::{Alert, Receipts, MARKER_LEASE};

/// A payment's outbox row on fresh tables, its stream record, and a relay's parts.
struct Setup {
    pending: Pending,
    markers: Idempotency<DynamoDbStore>,
    clock: Arc<ManualClock>,
}

/// The row's parts (`event_id`, `to`, `event`) read as the setup's own.
impl Deref for Setup {
    type Target = Pending;

    fn deref(&self) -> &Pending {
        &self.pending
    }
}

impl Setup {
    async fn new() -> Setup {
        let pending = Pending::new("customer").await;
        let clock = Arc::new(ManualClock::new());
        let markers = pending.markers_on(clock.clone());
        Setup { pending, markers, clock }
    }

    fn relay<E: EmailSender>(&self, sender: E, policy: Policy) -> Receipts<E> {
        Receipts::new(self.markers.clone(), sender, &self.outbox_table, policy)
            .with_sleep(MovesTheClock { clock: self.clock.clone(), waits: Arc::default() })
    }

    /// One delivery of the stream batch; the sequence numbers reported failed.
    async fn deliver<E: EmailSender>(&self, relay: &Receipts<E>, context: Context) -> Vec<String> {
        let options = Options { emit_metrics: false, ..Options::new("test") };
        let response = process(relay, LambdaEvent::new(self.event.clone(), context), &options).await;
        response.batch_item_failures.into_iter().filter_map(|f| f.item_identifier).collect()
    }

    async fn row_status(&self) -> String {
        self.pending.status().await
    }

    /// The receipt email the relay sends for the row.
    fn message(&self) -> EmailMessage {
        self.receipt().message(&self.pending.to)
    }

    /// An attempt claimed the marker, SES accepted the email, and the attempt died holding it.
    async fn died_after_sending(&self, ses: &SesSender) {
        let key = receipt_key(&self.event_id).unwrap();
        let message = self.message();
        let Begin::Claimed(dead) = self.markers.begin::<_, SendOutcome>(&key, &message).await.unwrap() else {
            panic!("fresh marker")
        };
        ses.send(&message).await.unwrap();
        drop(dead);
    }

    /// The marker's stored response, if any.
    async fn marker(&self) -> Option<effectively_once::Record> {
        self.markers.store().get(receipt_key(&self.event_id).unwrap().as_str()).await.unwrap()
    }
}

/// A context whose deadline is `ms` after the manual clock's now (the relay reads the clock).
fn deadline_in(setup: &Setup, ms: u64) -> Context {
    let mut context = Context::default();
    context.deadline = setup.markers.config().now_ms() + ms;
    context
}

/// Waits by moving the manual clock, and remembers each wait.
#[derive(Debug, Clone)]
struct MovesTheClock {
    clock: Arc<ManualClock>,
    waits: Arc<Mutex<Vec<Duration>>>,
}

impl AsyncSleep for MovesTheClock {
    fn sleep(&self, duration: Duration) -> Sleep {
        self.clock.advance(duration);
        self.waits.lock().unwrap().push(duration);
        Sleep::new(std::future::ready(()))
    }
}

const FROM: &str = "receipts@example.com";

fn answer(status: u16, err: SendEmailError) -> SdkError<SendEmailError, HttpResponse> {
    SdkError::service_error(err, HttpResponse::new(status.try_into().unwrap(), "".into()))
}

/// SES behind scripted faults: each send first meets the next scripted SDK error (classified
/// as SES's own would be), then goes to the local SES.
struct Scripted {
    errors: Mutex<VecDeque<SdkError<SendEmailError, HttpResponse>>>,
    inner: SesSender,
}

impl Scripted {
    fn new(inner: SesSender, errors: impl IntoIterator<Item = SdkError<SendEmailError, HttpResponse>>) -> Self {
        Scripted { errors: Mutex::new(errors.into_iter().collect()), inner }
    }
}

impl EmailSender for Scripted {
    async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
        let next = self.errors.lock().unwrap().pop_front();
        match next {
            Some(err) => Err(SendError::from_ses(err, FROM)),
            None => self.inner.send(message).await,
        }
    }
}

/// SES accepts the message, and its answer is lost on the way back (the connection breaks).
struct AnswerLost(SesSender);

impl EmailSender for AnswerLost {
    async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
        self.0.send(message).await?;
        let lost = SdkError::dispatch_failure(aws_sdk_sesv2::error::ConnectorError::io("connection reset".into()));
        Err(SendError::from_ses(lost, FROM))
    }
}

/// A sender never verified: the local SES answers MessageRejected naming the sender, which is
/// the configuration's fault. The receipt waits (the row stays PENDING, the record is retried,
/// the condition raised); once the identity is verified, the retry sends exactly one.
#[tokio::test]
async fn an_unverified_sender_holds_receipts_back_until_it_is_verified() {
    let s = Setup::new().await;
    let from = format!("receipts@{}.example.com", unique_name("unverified"));
    let client = aws_sdk_sesv2::Client::new(&sdk_config().await);
    let relay = s.relay(SesSender::new(client.clone(), &from), Policy::AtMostOnce);

    // The record's failure, as the driver logs it: SES's message names the sender, redacted.
    let err = relay.handle(&s.event.records[0], &Default::default()).await.unwrap_err();
    assert_eq!(err.retry, Retry::AfterFix, "{err}");
    assert!(err.reason.contains("r***@") && !err.reason.contains("receipts@"), "{err}");

    let failed = s.deliver(&relay, Context::default()).await;
    assert_eq!(failed.len(), 1, "the record is retried, not acked as the message's fate");
    assert_eq!(s.row_status().await, "PENDING");
    assert!(s.marker().await.is_none(), "marker released for the retry");
    assert_eq!(relay.alerts().count(Alert::EmailBlocked), 2);
    assert!(emails_to(&s.to).is_empty());

    verify_sender(&client, &from).await;
    assert!(s.deliver(&relay, Context::default()).await.is_empty());
    assert_eq!(s.row_status().await, "SENT");
    assert_eq!(emails_to(&s.to).len(), 1);
}

/// Account- and configuration-level refusals, as the SDK builds them: each holds the receipt
/// back and raises the condition; the retry after it clears sends one.
#[tokio::test]
async fn account_level_refusals_are_retried_not_recorded() {
    let blocked = [
        answer(400, SendEmailError::SendingPausedException(SendingPausedException::builder().build())),
        answer(400, SendEmailError::AccountSuspendedException(AccountSuspendedException::builder().build())),
        answer(
            400,
            SendEmailError::MailFromDomainNotVerifiedException(MailFromDomainNotVerifiedException::builder().build()),
        ),
        answer(404, SendEmailError::NotFoundException(NotFoundException::builder().message("config set").build())),
    ];
    for err in blocked {
        let what = format!("{err:?}");
        let s = Setup::new().await;
        let relay = s.relay(Scripted::new(verified_ses(FROM).await, [err]), Policy::AtMostOnce);
        assert_eq!(s.deliver(&relay, Context::default()).await.len(), 1, "{what}");
        assert_eq!(s.row_status().await, "PENDING", "{what}");
        assert_eq!(relay.alerts().count(Alert::EmailBlocked), 1, "{what}");
        assert!(emails_to(&s.to).is_empty(), "{what}");
        assert!(s.deliver(&relay, Context::default()).await.is_empty(), "{what}");
        assert_eq!(s.row_status().await, "SENT", "{what}");
        assert_eq!(emails_to(&s.to).len(), 1, "{what}");
    }
}

/// A refusal of this recipient is the message's fate: the row ends FAILED, the record is acked,
/// nothing is sent on redelivery, and the stored reason holds no address.
#[tokio::test]
async fn a_refused_recipient_ends_the_row_failed_and_the_reason_holds_no_address() {
    let s = Setup::new().await;
    let refused = answer(
        400,
        SendEmailError::MessageRejected(
            MessageRejected::builder()
                .message(format!(
                    "Email address is not verified. The following identities failed the check in region US-EAST-1: {}",
                    s.to
                ))
                .build(),
        ),
    );
    let relay = s.relay(Scripted::new(verified_ses(FROM).await, [refused]), Policy::AtMostOnce);
    for _ in 0..2 {
        assert!(s.deliver(&relay, Context::default()).await.is_empty());
        assert_eq!(s.row_status().await, "FAILED");
    }
    let stored = s.marker().await.unwrap().response.unwrap();
    let local = s.to.split('@').next().unwrap();
    assert!(stored.contains("not verified") && !stored.contains(local), "{stored}");
    assert!(emails_to(&s.to).is_empty());
    assert_eq!(relay.alerts().count(Alert::EmailBlocked), 0);
}

/// SES accepted the message and its answer was lost: under at most once the row ends AMBIGUOUS
/// in that delivery, visibly, and the record is acked, instead of failing until the stream gives
/// up with the row PENDING. Never a second email.
#[tokio::test]
async fn a_lost_answer_ends_the_row_ambiguous_and_acks_the_record() {
    let s = Setup::new().await;
    let relay = s.relay(AnswerLost(verified_ses(FROM).await), Policy::AtMostOnce);
    for _ in 0..3 {
        assert!(s.deliver(&relay, Context::default()).await.is_empty(), "acked");
        assert_eq!(s.row_status().await, "AMBIGUOUS");
    }
    assert_eq!(emails_to(&s.to).len(), 1, "SES took one copy; none resent");
    assert_eq!(relay.alerts().count(Alert::EmailAmbiguous), 1, "raised once, not on replays");
    let marker = s.marker().await.unwrap();
    let receipt: SendOutcome = serde_json::from_str(&marker.response.unwrap()).unwrap();
    assert_eq!(receipt, SendOutcome::Ambiguous);
}

/// An attempt claimed the marker, SES accepted the email, and the attempt died (its sandbox
/// crashed). The stream's retry comes at once, inside the dead attempt's lease: the relay waits
/// the lease out within its invocation, then the policy decides (ambiguous without a resend, or
/// a resend), and the record is acked: no stream retry is spent, the row does not stay PENDING.
#[tokio::test]
async fn a_dead_attempts_lease_is_waited_out_in_one_delivery() {
    for (policy, status, emails) in [(Policy::AtMostOnce, "AMBIGUOUS", 1), (Policy::AtLeastOnce, "SENT", 2)] {
        let s = Setup::new().await;
        let ses = verified_ses(FROM).await;
        s.died_after_sending(&ses).await;

        let relay = s.relay(ses, policy);
        let sleep = MovesTheClock { clock: s.clock.clone(), waits: Arc::default() };
        let relay = relay.with_sleep(sleep.clone());
        let failed = s.deliver(&relay, deadline_in(&s, 15 * 60 * 1000)).await;
        assert!(failed.is_empty(), "{policy:?}: acked in one delivery");
        assert_eq!(s.row_status().await, status, "{policy:?}");
        assert_eq!(emails_to(&s.to).len(), emails, "{policy:?}");
        let waits = sleep.waits.lock().unwrap().clone();
        assert_eq!(waits, vec![MARKER_LEASE + Duration::from_millis(1)], "{policy:?}: one wait, the lease");
        let ambiguous = relay.alerts().count(Alert::EmailAmbiguous);
        assert_eq!(ambiguous, u64::from(policy == Policy::AtMostOnce), "{policy:?}");
    }
}

/// A lease that ends after this invocation's deadline cannot be waited out here: the record is
/// in progress and left to the stream's retry, after waiting what the invocation has left (so
/// the retries spread over the lease rather than all meet it in its first seconds). The retry
/// after the lease finds it ended and ends the row AMBIGUOUS for good.
#[tokio::test]
async fn a_lease_past_the_deadline_is_left_to_the_retry() {
    let s = Setup::new().await;
    let ses = verified_ses(FROM).await;
    s.died_after_sending(&ses).await;

    let sleep = MovesTheClock { clock: s.clock.clone(), waits: Arc::default() };
    let relay = s.relay(ses, Policy::AtMostOnce).with_sleep(sleep.clone());
    let failed = s.deliver(&relay, deadline_in(&s, 10_000)).await;
    assert_eq!(failed.len(), 1, "in progress: retried later");
    let waits = sleep.waits.lock().unwrap().clone();
    assert_eq!(waits, vec![Duration::from_secs(8)], "the 10 s left, less the 2 s kept to finish");
    assert_eq!(s.row_status().await, "PENDING");

    s.clock.advance(MARKER_LEASE);
    assert!(s.deliver(&relay, deadline_in(&s, 10_000)).await.is_empty());
    assert_eq!(s.row_status().await, "AMBIGUOUS");
    assert_eq!(emails_to(&s.to).len(), 1, "never resent");
    assert_eq!(relay.alerts().count(Alert::EmailAmbiguous), 1);
}
