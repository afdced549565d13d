//! [`send_once`]: the keyed email's protocol on the marker (claim, send, complete or release),
//! what it stores ([`SendOutcome`]), the [`Policy`] for the ambiguous window, and its two rules
//! as pure functions ([`sends_once_claimed`], [`on_send_error`]) the protocol model shares.

use effectively_once::{Begin, ErrorChain, Idempotency, Key, Outcome, Store};
use serde::{Deserialize, Serialize};

use super::{redact_email, redact_emails, EmailMessage, EmailSender, SendError, SendErrorKind};
use crate::error::Error;

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
/// prefix and the event's business id (see [the module docs](crate::email)).
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
        Err(error) => Err(release_for_retry(idempotency, attempt, effect_key, &to, error, policy).await),
    }
}

/// A send that failed in a way a retry may undo, with nothing out: the marker released so the
/// retry sends; the error to return (the send's, or, when the release failed, one saying the
/// marker is held until its lease ends).
async fn release_for_retry<S: Store>(
    idempotency: &Idempotency<S>,
    attempt: effectively_once::Attempt,
    effect_key: &Key,
    to: &str,
    error: SendError,
    policy: Policy,
) -> Error {
    if error.kind == SendErrorKind::Blocked {
        tracing::error!(key = %effect_key, error = %error, "the email provider refuses this account or configuration; marker released for the retry: operator check");
    } else {
        tracing::warn!(key = %effect_key, to = %to, error = %error, "email not sent; marker released for the retry");
    }
    // A release whose answer is lost is sent again (`Idempotency::release`): a marker left in
    // progress is, to the attempt that takes it over after the lease, a crash mid-send, which at
    // most once records ambiguous and never sends.
    let lease_end_ms = attempt.lease_expires_at_ms();
    if let Err(release) = idempotency.release(attempt).await {
        tracing::error!(
            key = %effect_key,
            error = %ErrorChain(&release),
            lease_end_ms,
            ?policy,
            "email not sent, but its marker could not be released: held until its lease ends, then taken over as a possible crash mid-send (at most once: recorded ambiguous, not sent): operator check"
        );
        return Error::Email(held(error, lease_end_ms, &release));
    }
    Error::Email(error)
}

/// Whether an attempt that claimed the marker sends: not under at most once when its claim
/// may have taken the marker over from an attempt that died mid-send
/// ([`Replaced::is_takeover`](effectively_once::Replaced::is_takeover)); it records the email
/// ambiguous instead. One of the keyed email's two rules, pure so the protocol model
/// (`apps/payments/model`) explores the same ones.
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
pub(super) mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use effectively_once::{Config, InMemoryStore, ManualClock, Retry};

    use super::*;
    use crate::email::{EmailSender, RecordingSender, SendError};

    pub(crate) fn setup() -> (Idempotency<InMemoryStore>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        let config = Config::default().with_lease(Duration::from_secs(60)).with_clock(clock.clone());
        (Idempotency::new(InMemoryStore::new(), config), clock)
    }

    pub(crate) fn marker(id: &str) -> Key {
        Key::new("email", id).unwrap()
    }

    pub(crate) fn email(to: &str) -> EmailMessage {
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
        assert_eq!(err.retry(), Retry::Now);
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
            assert_eq!(early.retry(), Retry::InProgressElsewhere, "in progress until the lease ends");
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
        assert_eq!(err.retry(), Retry::Now, "{err}");
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
        assert_eq!(late.retry(), Retry::Now, "{late}");
        let stored = idem.store().get(key.as_str()).await.unwrap().unwrap();
        assert!(!stored.response.unwrap_or_default().contains("late"));
    }
}
