//! A definite send failure (SES throttled, unreachable, or the account `Blocked`) releases the
//! email marker so the retry sends. A release left undone keeps the marker in progress, and
//! the attempt that takes it over after the lease cannot tell "knew nothing was sent" from
//! "died mid-send": under at most once it records `Ambiguous` and never sends.
//! So a release whose answer is lost is sent again, a retry that finds the marker gone or
//! claimed afresh counts as done only when that is safe, and a release that still fails says
//! the marker is held.
//!
//! SES faults where nothing can have been sent (a refused connection, credentials that do not
//! resolve) are definite too: the marker is released, or the fault raised, never recorded as the
//! email's fate (`ses_never_reached` below).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use effectively_once::{
    Claim, Completion, Config, Idempotency, InMemoryStore, ManualClock, Outcome, Record, Retry, Status, Store,
    StoreError, StoreErrorKind,
};
use effectively_once_effects::{
    send_once, EmailMessage, Error, Key, Policy, RecordingSender, SendError, SendErrorKind, SendOutcome,
};

const LEASE: Duration = Duration::from_secs(60);

/// What the fake store does to the next release.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The request fails before the delete: the marker stays.
    NotLanded,
    /// The delete lands, its answer is lost.
    AnswerLost,
    /// The delete lands, its answer is lost, and another delivery claims the marker afresh
    /// before the retry.
    AnswerLostThenClaimed,
    /// The request fails before the delete, and the marker's lease ends before the retry
    /// (a slow store, a paused sandbox): another delivery takes it over.
    NotLandedThenTakenOver,
}

/// An in-memory store whose releases fail as scripted, one fault per release.
struct FaultyReleases {
    inner: InMemoryStore,
    clock: Arc<ManualClock>,
    faults: Mutex<VecDeque<Fault>>,
    releases: Mutex<u32>,
}

impl FaultyReleases {
    fn new(clock: Arc<ManualClock>, faults: impl IntoIterator<Item = Fault>) -> Self {
        FaultyReleases {
            inner: InMemoryStore::new(),
            clock,
            faults: Mutex::new(faults.into_iter().collect()),
            releases: Mutex::new(0),
        }
    }

    /// Another delivery claims `id` with owner `owner`, as its own claim would.
    async fn claim_as(&self, id: &str, owner: &str, payload_hash: String) {
        let now_ms = self.clock_now();
        let record = Record {
            id: id.into(),
            status: Status::InProgress,
            lease_expires_at_ms: now_ms + LEASE.as_millis() as u64,
            expiration_s: now_ms / 1000 + 86_400,
            payload_hash,
            owner: owner.into(),
            response: None,
        };
        let claim = self.inner.claim(&record, now_ms).await.unwrap();
        assert!(matches!(claim, Claim::Acquired { .. }), "{claim:?}");
    }

    fn clock_now(&self) -> u64 {
        use effectively_once::Clock;
        self.clock.now_ms()
    }

    fn releases(&self) -> u32 {
        *self.releases.lock().unwrap()
    }
}

fn lost() -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, "connection reset")
}

impl Store for FaultyReleases {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        self.inner.claim(record, now_ms).await
    }
    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        self.inner.complete(id, owner, completion).await
    }
    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        *self.releases.lock().unwrap() += 1;
        let fault = self.faults.lock().unwrap().pop_front();
        let Some(fault) = fault else { return self.inner.release(id, owner).await };
        let hash = self.inner.get(id).await.unwrap().map(|r| r.payload_hash);
        match fault {
            Fault::NotLanded => {}
            Fault::AnswerLost => self.inner.release(id, owner).await?,
            Fault::AnswerLostThenClaimed => {
                self.inner.release(id, owner).await?;
                self.claim_as(id, "next-delivery", hash.unwrap()).await;
            }
            Fault::NotLandedThenTakenOver => {
                self.clock.advance(LEASE + Duration::from_secs(1));
                self.claim_as(id, "taker", hash.unwrap()).await;
            }
        }
        Err(lost())
    }
    async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
        self.inner.get(id).await
    }
}

fn setup(faults: impl IntoIterator<Item = Fault>) -> (Idempotency<FaultyReleases>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let store = FaultyReleases::new(clock.clone(), faults);
    (Idempotency::new(store, Config::default().with_lease(LEASE).with_clock(clock.clone())), clock)
}

fn receipt() -> EmailMessage {
    EmailMessage { to: "r@example.com".into(), subject: "Receipt".into(), text: "Paid.".into() }
}

fn throttled() -> SendError {
    SendError::new(SendErrorKind::Throttled, "Maximum sending rate exceeded.")
}

/// The finding: a release that fails once is sent again, so the marker is gone and the retry
/// sends (before the fix: held, taken over after the lease, recorded `Ambiguous`, never sent).
/// Paused time: the release's backoff sleeps are tokio's, and pass at once.
#[tokio::test(start_paused = true)]
async fn a_failed_release_after_a_definite_failure_still_sends() {
    for fault in [Fault::NotLanded, Fault::AnswerLost] {
        let (idem, clock) = setup([fault]);
        let sender = RecordingSender::new();
        sender.fail_next(throttled());
        let key = Key::new("email", "msg_r2").unwrap();

        let first = send_once(&idem, &sender, &key, &receipt(), Policy::AtMostOnce).await.unwrap_err();
        assert!(matches!(&first, Error::Email(e) if e.kind == SendErrorKind::Throttled), "{fault:?}: {first}");
        assert!(!first.to_string().contains("held"), "{fault:?}: released, not held: {first}");
        assert!(sender.sent().is_empty(), "SES took nothing");
        assert_eq!(idem.store().releases(), 2, "{fault:?}: the release was sent again");
        assert_eq!(idem.store().get(key.as_str()).await.unwrap(), None, "{fault:?}: marker released");

        // The stream retries, even after the lease: the marker is gone, nothing to take over.
        clock.advance(LEASE + Duration::from_secs(1));
        let retry = send_once(&idem, &sender, &key, &receipt(), Policy::AtMostOnce).await.unwrap();
        assert_eq!(
            (sender.sent().len(), &retry),
            (1, &Outcome::Fresh(SendOutcome::Sent { message_id: "fake-1".into() })),
            "{fault:?}: a receipt SES never took is sent on retry"
        );
    }
}

/// A retried release that finds the marker claimed by another delivery, while this attempt's
/// lease still runs, knows its first try landed (no claim takes a live lease over): done, and
/// the other delivery's marker is left alone.
#[tokio::test(start_paused = true)]
async fn a_retry_that_finds_the_marker_claimed_afresh_within_the_lease_is_done() {
    let (idem, _) = setup([Fault::AnswerLostThenClaimed]);
    let sender = RecordingSender::new();
    sender.fail_next(throttled());
    let key = Key::new("email", "msg_r3").unwrap();
    let err = send_once(&idem, &sender, &key, &receipt(), Policy::AtMostOnce).await.unwrap_err();
    assert!(matches!(&err, Error::Email(e) if e.kind == SendErrorKind::Throttled), "{err}");
    assert!(!err.to_string().contains("held"), "released: {err}");
    let marker = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!((marker.owner.as_str(), marker.status), ("next-delivery", Status::InProgress));
    assert!(sender.sent().is_empty());
}

/// Past the lease, a retried release that finds another owner cannot tell "my delete landed,
/// then a fresh claim" from "taken over from me, unreleased": not counted as done; the error
/// says the marker was held.
#[tokio::test(start_paused = true)]
async fn a_retry_that_finds_the_marker_taken_over_after_the_lease_reports_it_held() {
    let (idem, _) = setup([Fault::NotLandedThenTakenOver]);
    let sender = RecordingSender::new();
    sender.fail_next(throttled());
    let key = Key::new("email", "msg_r4").unwrap();
    let err = send_once(&idem, &sender, &key, &receipt(), Policy::AtMostOnce).await.unwrap_err();
    assert_eq!(err.retry(), Retry::Now, "{err}");
    assert!(matches!(&err, Error::Email(e) if e.kind == SendErrorKind::Throttled), "{err}");
    assert!(err.to_string().contains("marker is still held"), "{err}");
    let marker = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(marker.owner, "taker", "the taker's marker is left alone");
}

/// A release that fails on every try: the error keeps the send error's kind (a blocked account
/// still raises its alert), is retryable, says the marker is held and until when, and names no
/// address; the marker is indeed still in progress.
#[tokio::test(start_paused = true)]
async fn a_release_that_keeps_failing_says_the_marker_is_held() {
    let (idem, clock) = setup([Fault::NotLanded, Fault::NotLanded, Fault::NotLanded]);
    let sender = RecordingSender::new();
    sender.fail_next(SendError::new(SendErrorKind::Blocked, "Sending paused for r@example.com"));
    let key = Key::new("email", "msg_r5").unwrap();
    let err = send_once(&idem, &sender, &key, &receipt(), Policy::AtMostOnce).await.unwrap_err();
    assert_eq!(idem.store().releases(), 3, "three tries");
    assert_eq!(err.retry(), Retry::AfterFix, "{err}");
    assert!(matches!(&err, Error::Email(e) if e.kind == SendErrorKind::Blocked), "{err}");
    let marker = idem.store().get(key.as_str()).await.unwrap().unwrap();
    assert_eq!(marker.status, Status::InProgress);
    let text = err.to_string();
    assert!(text.contains(&format!("marker is still held until {} ms", marker.lease_expires_at_ms)), "{text}");
    assert!(!text.contains("r@example.com"), "no address: {text}");
    assert!(sender.sent().is_empty());

    // Visible, not silent: until the lease ends the marker is in progress; the takeover then
    // follows the policy (at most once: ambiguous, for an operator, as after a crash).
    let early = send_once(&idem, &sender, &key, &receipt(), Policy::AtMostOnce).await.unwrap_err();
    assert!(matches!(&early, Error::Idempotency(e) if e.kind() == effectively_once::ErrorKind::InProgress), "{early}");
    clock.advance(LEASE + Duration::from_secs(1));
    let later = send_once(&idem, &sender, &key, &receipt(), Policy::AtMostOnce).await.unwrap();
    assert_eq!(later, Outcome::Fresh(SendOutcome::Ambiguous));
    assert!(sender.sent().is_empty());
}

/// SES clients whose endpoint refuses every connection: the request never leaves the host.
mod ses_never_reached {
    use aws_sdk_sesv2::config::{Credentials, Region};
    use effectively_once::{Config, Idempotency, InMemoryStore, Outcome, Retry, Store};
    use effectively_once_effects::{send_once, EmailMessage, Key, Policy, SendErrorKind, SendOutcome, SesSender};

    use super::LEASE;

    fn markers() -> Idempotency<InMemoryStore> {
        Idempotency::new(InMemoryStore::new(), Config::default().with_lease(LEASE))
    }

    fn message() -> EmailMessage {
        EmailMessage { to: "alice@example.com".into(), subject: "Receipt".into(), text: "paid".into() }
    }

    fn ses(endpoint: &str, credentials: bool) -> SesSender {
        let mut config = aws_sdk_sesv2::Config::builder()
            .behavior_version_latest()
            .region(Region::new("us-east-1"))
            .endpoint_url(endpoint);
        if credentials {
            config = config.credentials_provider(Credentials::new("test", "test", None, None, "unreachable"));
        }
        SesSender::new(aws_sdk_sesv2::Client::from_conf(config.build()), "receipts@example.com")
    }

    /// A refused connection (nothing listens on port 1) means SES was never reached: nothing can
    /// have been sent, so the marker is released and the receipt retried. Were it `Ambiguous`,
    /// at most once would record the receipt AMBIGUOUS at once and never send it, and an SES
    /// endpoint unreachable for a minute (VPC without a route, DNS failure, connect timeout)
    /// would lose every receipt of that minute.
    #[tokio::test]
    async fn a_refused_connection_releases_the_marker_for_the_retry() {
        let idem = markers();
        let key = Key::new("email", "msg_refused").unwrap();
        let sender = ses("http://127.0.0.1:1", true);
        let outcome = send_once(&idem, &sender, &key, &message(), Policy::AtMostOnce).await;
        match outcome {
            Err(effectively_once_effects::Error::Email(e)) => {
                assert_eq!(e.retry(), Retry::Now, "{e}");
                assert!(idem.store().get(key.as_str()).await.unwrap().is_none(), "marker released for the retry");
            }
            other => panic!("SES was never reached, yet the receipt's fate is recorded: {other:?}"),
        }
    }

    /// Credentials that cannot be resolved (an expired role session, a broken credentials
    /// endpoint) are a configuration fault, `Blocked` like AccessDenied or ExpiredToken: retried
    /// and raised, never the message's recorded fate.
    #[tokio::test]
    async fn missing_credentials_are_blocked_not_the_messages_fate() {
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
}
