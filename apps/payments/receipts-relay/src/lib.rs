//! The receipts relay: a DynamoDB Streams record handler that sends each outbox row's receipt
//! email once (fenced by `email#{event_id}`) and marks the row. `main.rs` only wires it. The
//! outbox table, not its stream, is the source of truth: the [`sweep`]er sends, through the same
//! path, the rows still `PENDING` that the stream did not deliver (`src/bin/outbox-sweeper.rs`
//! wires it).
//!
//! Before sending it decides who gets the receipt ([`recipient`]: the account's registered
//! address, else the event's when allowed) and whether the account's receipts fit its rate
//! ([`payments::rate`]); a receipt that does not is not sent, and its row says why
//! (`REFUSED`, `RATE_LIMITED`).
#![warn(missing_docs)]

pub mod alerts;
pub mod recipient;
pub mod sweep;

use effectively_once_lambda::events::Context;
use effectively_once_lambda::Handler;
use std::time::Duration;

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_sesv2::config::{AsyncSleep, SharedAsyncSleep, Sleep};
use effectively_once::{
    Config, ErrorChain, ErrorKind, Idempotency, Key, Outcome, Record, Status, Store, StoreErrorKind,
};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::email::{redact_emails, EmailMessage, SendErrorKind};
use effectively_once_effects::{send_once, EmailSender, Policy, SendOutcome};
use effectively_once_lambda::{Handled, RecordError, RecordResult, Retry};
use payments::{receipt_key, rfc3339, Outbox, Profiles, RateLimit, ReceiptRate, ReceiptRow, RowStatus};

pub use crate::alerts::{Alert, Alerts};
pub use crate::recipient::{AllowList, Recipient};
pub use crate::sweep::{Sweep, Sweeper, Swept};

/// The email markers' lease in [`Receipts::from_env`]; without a known deadline, no longer a
/// wait than this.
pub const MARKER_LEASE: Duration = Duration::from_secs(60);

/// Time kept after waiting out a dead attempt's lease, to take the marker over, complete it and
/// mark the row before the invocation's deadline.
const AFTER_WAIT_MARGIN: Duration = Duration::from_secs(2);

/// How many leases one record waits out before it is left to the stream's retry: more than one
/// only when the attempt waited for was itself taken over by another live one.
const MAX_WAITS: usize = 2;

/// The function's name in metrics where Lambda's `AWS_LAMBDA_FUNCTION_NAME` is absent.
pub const FUNCTION: &str = "receipts-relay";

/// The environment contract.
#[derive(Debug, Clone)]
pub struct Env {
    /// `IDEMPOTENCY_TABLE`: the email markers.
    pub idempotency_table: String,
    /// `OUTBOX_TABLE`: the rows to mark.
    pub outbox_table: String,
    /// `RECEIPT_FROM`: the verified sender address.
    pub receipt_from: String,
    /// `LEDGER_TABLE`, optional: where account profiles are read (`pk = account#{id}`,
    /// `sk = profile`, `receipt_email`); unset or empty, every receipt goes to the event's
    /// address (under the allow-list).
    pub ledger_table: Option<String>,
    /// `RECEIPT_ALLOWED_RECIPIENTS`, optional: the event addresses admitted for accounts
    /// without a registered one ([`AllowList::parse`]); unset, every one is.
    pub allowed: Option<AllowList>,
    /// `RECEIPT_RATE_PER_ACCOUNT` and `RECEIPT_RATE_WINDOW_SECONDS`, optional: at most that
    /// many receipts per account per window ([`RateLimit::from_env_values`]); unset, no limit.
    pub rate: Option<RateLimit>,
    /// `RECEIPT_CONFIGURATION_SET`, optional: the SES configuration set every send names.
    pub configuration_set: Option<String>,
    /// [`Config::from_env_with`]: the disable switch (`POWERTOOLS_IDEMPOTENCY_DISABLED`) is read,
    /// and the email markers ignore it: a receipt keeps its once-only marker whatever the
    /// environment says ([`payments::warn_if_disabled`], which `main` calls at
    /// cold start).
    pub config: Config,
}

impl Env {
    /// Reads the environment; a missing variable is named in the error.
    pub fn from_env() -> Result<Env, String> {
        Env::from_env_with(|name| std::env::var(name).ok())
    }

    /// The same, with the variables read through `var` (`None` for unset): tests pass a map.
    pub fn from_env_with(var: impl Fn(&str) -> Option<String>) -> Result<Env, String> {
        let required = |name: &str| var(name).ok_or_else(|| format!("environment variable {name} is not set"));
        Ok(Env {
            idempotency_table: required("IDEMPOTENCY_TABLE")?,
            outbox_table: required("OUTBOX_TABLE")?,
            receipt_from: required("RECEIPT_FROM")?,
            ledger_table: var("LEDGER_TABLE").filter(|t| !t.is_empty()),
            allowed: AllowList::parse(var(recipient::ALLOWED_VAR).as_deref())?,
            rate: RateLimit::from_env_values(
                var("RECEIPT_RATE_PER_ACCOUNT").as_deref(),
                var("RECEIPT_RATE_WINDOW_SECONDS").as_deref(),
            )?,
            configuration_set: var("RECEIPT_CONFIGURATION_SET").filter(|n| !n.is_empty()),
            config: Config::from_env_with(&var),
        })
    }
}

/// Sends receipts for outbox inserts.
#[derive(Debug, Clone)]
pub struct Receipts<E> {
    markers: Idempotency<DynamoDbStore>,
    sender: E,
    outbox: Outbox,
    policy: Policy,
    sleep: SharedAsyncSleep,
    alerts: Alerts,
    profiles: Option<Profiles>,
    allowed: Option<AllowList>,
    rate: Option<ReceiptRate>,
}

/// Tokio's timer, the relay's default way to wait out a lease.
#[derive(Debug, Default)]
struct TokioSleep;

impl AsyncSleep for TokioSleep {
    fn sleep(&self, duration: Duration) -> Sleep {
        Sleep::new(tokio::time::sleep(duration))
    }
}

impl<E: EmailSender> Receipts<E> {
    /// A relay writing markers through `markers`, sending with `sender`, marking rows in
    /// `outbox_table` (through the markers' client), under `policy` (default at most once).
    pub fn new(
        markers: Idempotency<DynamoDbStore>,
        sender: E,
        outbox_table: impl Into<String>,
        policy: Policy,
    ) -> Self {
        Receipts {
            outbox: Outbox::beside(markers.store(), outbox_table),
            markers,
            sender,
            policy,
            sleep: SharedAsyncSleep::new(TokioSleep),
            alerts: Alerts::from_env(),
            profiles: None,
            allowed: None,
            rate: None,
        }
    }

    /// Sends each account's receipts to the address its profile in the ledger `table` names,
    /// where there is one (read through the markers' client).
    pub fn with_profiles(mut self, ledger_table: impl Into<String>) -> Self {
        self.profiles = Some(Profiles::new(self.markers.store().client().clone(), ledger_table));
        self
    }

    /// Sends to an event's address, for an account without a registered one, only when
    /// `allowed` admits it; `None` admits every one (the default).
    pub fn with_allow_list(mut self, allowed: Option<AllowList>) -> Self {
        self.allowed = allowed;
        self
    }

    /// Admits at most `limit` receipts per account per window, counted in the markers' table;
    /// `None` admits every one (the default).
    pub fn with_rate_limit(mut self, limit: Option<RateLimit>) -> Self {
        self.rate = limit.map(|limit| {
            let store = self.markers.store();
            ReceiptRate::new(store.client().clone(), store.table(), limit)
        });
        self
    }

    /// Waits out leases with `sleep` instead of tokio's timer (tests pass one that moves their
    /// manual clock).
    pub fn with_sleep(mut self, sleep: impl AsyncSleep + 'static) -> Self {
        self.sleep = SharedAsyncSleep::new(sleep);
        self
    }

    /// Raises operator alerts through `alerts` (say, [`Alerts::published`]`(false)` in a local
    /// tool) instead of ones published where the environment says ([`Alerts::from_env`]).
    pub fn with_alerts(mut self, alerts: Alerts) -> Self {
        self.alerts = alerts;
        self
    }

    /// The email sender.
    pub fn sender(&self) -> &E {
        &self.sender
    }

    /// The conditions raised for an operator so far.
    pub fn alerts(&self) -> &Alerts {
        &self.alerts
    }

    /// What to do about the attempt holding `key`'s marker: wait its lease out and claim again,
    /// when the lease ends (with a margin to finish) before this invocation's deadline (without a
    /// known deadline, within [`MARKER_LEASE`]); otherwise wait what this invocation has left and
    /// leave the record to the stream's retry.
    ///
    /// A stream record is handled by one invocation at a time, so the holder is most likely an
    /// attempt that died (its sandbox crashed) after claiming, whose lease (bounded by its own
    /// deadline, earlier than ours) still runs: failing the record at once would spend the
    /// stream's few retries in the lease's first seconds and leave the row `PENDING` for good.
    /// Waiting ends it in this invocation, or spreads the retries over the lease; if the holder
    /// is alive after all, it finishes meanwhile and the claim that follows replays its outcome.
    async fn lease_wait(
        &self,
        markers: &Idempotency<DynamoDbStore>,
        key: &Key,
        deadline_ms: Option<u64>,
    ) -> Result<LeaseWait, RecordError> {
        let record = markers
            .store()
            .get(key.as_str())
            .await
            .map_err(|e| RecordError::retryable(format!("reading the email marker: {}", ErrorChain(&e))))?;
        let now = markers.config().now_ms();
        let lease_end = match record {
            // Completed or released since: claim again at once.
            Some(record) if record.status == Status::InProgress => record.lease_expires_at_ms,
            _ => return Ok(LeaseWait::ThenClaim(Duration::ZERO)),
        };
        // A claim takes over only once `lease_expires_at < now`.
        let wait = Duration::from_millis((lease_end + 1).saturating_sub(now));
        Ok(match deadline_ms {
            Some(deadline) => {
                let budget = Duration::from_millis(deadline.saturating_sub(now)).saturating_sub(AFTER_WAIT_MARGIN);
                if wait <= budget {
                    LeaseWait::ThenClaim(wait)
                } else {
                    LeaseWait::ThenFail(budget)
                }
            }
            None if lease_end <= now + MARKER_LEASE.as_millis() as u64 => LeaseWait::ThenClaim(wait),
            None => LeaseWait::ThenFail(Duration::ZERO),
        })
    }
}

/// What [`Receipts::lease_wait`] decided.
enum LeaseWait {
    /// Sleep this long, then claim the marker again.
    ThenClaim(Duration),
    /// The lease outlives this invocation: sleep this long, then fail the record (in progress).
    ThenFail(Duration),
}

impl Receipts<effectively_once_effects::SesSender> {
    /// A relay on the tables and sender `env` names, with its config; email markers hold a 60 s
    /// lease (bounded by the invocation's deadline). The disable switch in `env.config` is
    /// turned off for the markers: they are the email's once-only condition, and [`send_once`]
    /// keeps it whatever the config says.
    pub fn from_env(dynamodb: aws_sdk_dynamodb::Client, ses: aws_sdk_sesv2::Client, env: &Env) -> Self {
        let store = DynamoDbStore::new(dynamodb, &env.idempotency_table);
        let markers = Idempotency::new(store, env.config.clone().with_disabled(false).with_lease(MARKER_LEASE));
        let sender = effectively_once_effects::SesSender::new(ses, &env.receipt_from)
            .with_configuration_set(env.configuration_set.clone());
        let relay = Receipts::new(markers, sender, &env.outbox_table, Policy::default())
            .with_allow_list(env.allowed.clone())
            .with_rate_limit(env.rate);
        match &env.ledger_table {
            Some(table) => relay.with_profiles(table),
            None => relay,
        }
    }
}

impl<E: EmailSender> Handler<EventRecord> for Receipts<E> {
    /// The receipt's span: its `event_id`, recorded once the row is read.
    fn span(&self, _record: &EventRecord) -> tracing::Span {
        tracing::info_span!("receipt", event_id = tracing::field::Empty)
    }

    async fn handle(&self, record: &EventRecord, context: &Context) -> RecordResult {
        let row =
            ReceiptRow::from_stream_record(record).map_err(|e| RecordError::permanent(ErrorChain(&e).to_string()))?;
        let Some(row) = row else {
            return Ok(Handled::Skipped);
        };
        tracing::Span::current().record("event_id", row.event_id.as_str());
        self.settle(&row, effectively_once::epoch_deadline_ms(context.deadline), MAX_WAITS).await
    }
}

impl<E: EmailSender> Receipts<E> {
    /// Sends `row`'s receipt once and marks the row, waiting out at most `max_waits` leases of
    /// another attempt's marker ([`sweep`] waits none: the holder settles the row); a permanent
    /// failure marks the row `FAILED`. The one path of a receipt, whether the stream delivered
    /// it or the sweeper found it pending: the same marker key, policy and row marking.
    pub(crate) async fn settle(&self, row: &ReceiptRow, deadline_ms: Option<u64>, max_waits: usize) -> RecordResult {
        let result = self.relay(row, deadline_ms, max_waits).await;
        if let Err(error) = &result {
            if error.retry == Retry::Never {
                // No retry changes a permanent answer, and the stream driver goes past it: the
                // row is where its fate stays visible (FAILED, with the reason).
                self.record_failure(&row.event_id, &error.reason).await;
            }
        }
        result
    }

    /// Sends `row`'s receipt once and marks the row.
    async fn relay(&self, row: &ReceiptRow, deadline_ms: Option<u64>, max_waits: usize) -> RecordResult {
        let key =
            receipt_key(&row.event_id).map_err(|e| RecordError::from(effectively_once_effects::Error::from(e)))?;
        let markers = match deadline_ms {
            Some(deadline) => self.markers.with_deadline(deadline),
            None => self.markers.clone(),
        };
        if let Some(settled) = self.row_settled(row).await? {
            return Ok(settled);
        }
        let to = match self.recipient(row).await? {
            Ok(to) => to,
            Err(reason) => return self.hold(&markers, &key, row, RowStatus::Refused, &reason).await,
        };
        if let Some(reason) = self.over_rate(&markers, &key, row).await? {
            return self.hold(&markers, &key, row, RowStatus::RateLimited, &reason).await;
        }
        let message = row.message(to.address());
        let outcome = match self.send(&markers, &key, row, &message, deadline_ms, max_waits).await? {
            Sending::Done(outcome) => outcome,
            Sending::Answered(disposition) => return Ok(disposition),
        };
        self.mark(&markers, row, outcome).await
    }

    /// What settles `row` before anything is sent: deleted (skipped) or already marked (a
    /// duplicate); `None` while it is pending.
    async fn row_settled(&self, row: &ReceiptRow) -> Result<Option<Handled>, RecordError> {
        // Read before sending, not learnt from `mark` after: a row erased after the stream
        // captured it must not be emailed. Consistent, so a row just written is seen.
        let status = self.outbox.status(&row.event_id).await.map_err(|e| {
            let reason = format!("reading the outbox row: {}", ErrorChain(&e));
            // A status the relay does not know (another writer's, say a number): the row's
            // data, which no retry cures, and a retry holds the shard's checkpoint for a day.
            // Nothing is sent over a fate it cannot read; the record fails alone, for good
            // (`Outbox::status` calls that, and only that, `Malformed`; `handle` leaves a row
            // that is not PENDING as it is).
            if e.kind() == StoreErrorKind::Malformed {
                RecordError::permanent(format!("{reason}; not sent"))
            } else {
                RecordError::retryable(reason)
            }
        })?;
        match status {
            None => {
                tracing::warn!("outbox row deleted before its receipt was sent; skipped, nothing sent");
                Ok(Some(Handled::Skipped))
            }
            Some(RowStatus::Pending) => Ok(None),
            // Its fate is recorded (the marker, then the row, or the row alone for a receipt
            // held back): a redelivered insert changes nothing, and must not need the address
            // the row dropped when it was marked.
            Some(status) => {
                tracing::info!(status = status.as_str(), "outbox row already marked; nothing to send");
                Ok(Some(Handled::Duplicate))
            }
        }
    }

    /// Why the account may not have this receipt now (its rate, `RECEIPT_RATE_PER_ACCOUNT`), or
    /// `None` when it may, or no rate is configured.
    async fn over_rate(
        &self,
        markers: &Idempotency<DynamoDbStore>,
        key: &Key,
        row: &ReceiptRow,
    ) -> Result<Option<String>, RecordError> {
        let Some(rate) = &self.rate else { return Ok(None) };
        let now = markers.config().now_ms();
        // Counted only when no live marker exists. A marker completed (`send_once` replays
        // it, sending nothing) or in progress (claimed by an attempt that was admitted
        // before claiming, in its own window) is a receipt already counted: counting the
        // retry again would spend the window it lands in, say the next one, on a receipt
        // that sends nothing there (at least once, a takeover of a dead attempt's marker
        // may send a copy: the receipt's one allowance covers it). Read first rather than
        // counted after the claim: the claim and the send are one step in `send_once`, so
        // counting after the claim would count after the send and break "at most N sent
        // per window". A record is handled by one invocation at a time, so no attempt
        // claims between this read and the claim. One marker read, only when a rate is
        // configured.
        let counted = self.marker(markers, key).await?.is_some_and(|marker| marker.expiration_s >= now / 1000);
        let admitted = counted
            || rate
                .admit(&row.account_id, &row.event_id, now)
                .await
                .map_err(|e| RecordError::retryable(format!("counting the account's receipts: {}", ErrorChain(&e))))?;
        if admitted {
            return Ok(None);
        }
        let limit = rate.limit();
        Ok(Some(format!(
            "the account had its {} receipts of the last {} s window (RECEIPT_RATE_PER_ACCOUNT)",
            limit.per_window,
            limit.window.as_secs()
        )))
    }

    /// Sends the receipt once (`send_once`), waiting out a marker held by an attempt that
    /// likely died, at most `max_waits` times: the outcome, or the answer a marker claimed for
    /// another recipient gives.
    async fn send(
        &self,
        markers: &Idempotency<DynamoDbStore>,
        key: &Key,
        row: &ReceiptRow,
        message: &EmailMessage,
        deadline_ms: Option<u64>,
        max_waits: usize,
    ) -> Result<Sending, RecordError> {
        let mut waits = 0;
        let outcome = loop {
            let error = match send_once(markers, &self.sender, key, message, self.policy).await {
                Ok(outcome) => break outcome,
                Err(error) => error,
            };
            match &error {
                effectively_once_effects::Error::Idempotency(held)
                    if held.kind() == ErrorKind::InProgress && max_waits > 0 =>
                {
                    match self.lease_wait(markers, key, deadline_ms).await? {
                        LeaseWait::ThenClaim(wait) if waits < max_waits => {
                            waits += 1;
                            tracing::warn!(
                                wait_ms = wait.as_millis() as u64,
                                "email marker held by another attempt (likely dead); waiting out its lease"
                            );
                            self.sleep.sleep(wait).await;
                            continue;
                        }
                        LeaseWait::ThenFail(wait) => {
                            tracing::warn!(
                                wait_ms = wait.as_millis() as u64,
                                "email marker held past this invocation's deadline; waiting what is left, then retried"
                            );
                            self.sleep.sleep(wait).await;
                        }
                        LeaseWait::ThenClaim(_) => {}
                    }
                }
                // The marker under `email#{event_id}` is this receipt's (the event id is the
                // business key) but was claimed for another recipient: the registered address was
                // read again on this attempt and changed (or was registered, or removed) since an
                // earlier attempt claimed the marker. The recipient is a decision made once, by the
                // attempt that claimed: its outcome is the receipt's, marked on the row as a
                // replay would (sent → SENT); in progress, retried until it completes. Never
                // FAILED over a receipt that went out, and never a second receipt.
                //
                // The marker's payload keeps hashing the recipient (`send_once`'s identity, a
                // library contract other callers rely on, under which every deployed marker was
                // written: hashing the key alone would make them all `KeyReused`); the relay just
                // does not let that hash decide the receipt's fate.
                effectively_once_effects::Error::Idempotency(reused) if reused.kind() == ErrorKind::KeyReused => {
                    let reason = "an earlier attempt claimed its email marker for another recipient";
                    return match self.answer_from_marker(markers, key, row, reason).await? {
                        Some(disposition) => Ok(Sending::Answered(disposition)),
                        // Gone since the claim met it (released): the retry claims it afresh.
                        None => Err(RecordError::retryable(format!("{reason}, and the marker is gone since: retried"))),
                    };
                }
                effectively_once_effects::Error::Email(blocked) if blocked.kind == SendErrorKind::Blocked => {
                    // Not this message's fate: the marker is released and the stream retries.
                    self.alerts.raise(Alert::EmailBlocked, &blocked.to_string());
                }
                _ => {}
            }
            // In progress elsewhere, retryable, or permanent only for a verdict on the receipt
            // itself (an invalid key): a fault of
            // the store, the provider or the deployment is retried, as a permanent answer would
            // mark the row FAILED and the stream would go past the receipt for good.
            return Err(error.into());
        };
        Ok(Sending::Done(outcome))
    }

    /// Marks `row` with the receipt's `outcome` (raising the alert of an ambiguous one first).
    async fn mark(
        &self,
        markers: &Idempotency<DynamoDbStore>,
        row: &ReceiptRow,
        outcome: Outcome<SendOutcome>,
    ) -> RecordResult {
        if let Outcome::Fresh(SendOutcome::Ambiguous) = &outcome {
            // Raised before the row is marked: if marking fails, the retry replays the marker
            // and would not raise it again.
            self.alerts.raise(
                Alert::EmailAmbiguous,
                "receipt may or may not have been sent; not resent (at most once); row marked AMBIGUOUS",
            );
        }
        let replayed = outcome.is_replay();
        let (status, message_id, disposition) = match outcome.into_inner() {
            SendOutcome::Sent { message_id } => (RowStatus::Sent, Some(message_id), Handled::Applied),
            SendOutcome::Failed { .. } => (RowStatus::Failed, None, Handled::Rejected),
            SendOutcome::Ambiguous => (RowStatus::Ambiguous, None, Handled::Rejected),
        };
        let now = rfc3339(markers.config().now_ms());
        let marked = self.outbox.mark(&row.event_id, status, message_id.as_deref(), &now).await;
        match marked {
            Ok(()) => Ok(if replayed { Handled::Duplicate } else { disposition }),
            // The row was deleted after the stream captured it (an erasure, a cleanup, its
            // TTL): there is nothing left to mark, and failing would hold the records behind it.
            // `mark` reports a missing row, and only that, as `Malformed` (its condition is the
            // row's existence): no read needed, and the relay's role may not read the outbox.
            Err(error) if error.kind() == StoreErrorKind::Malformed => {
                tracing::warn!(error = %ErrorChain(&error), status = status.as_str(), "outbox row deleted before its receipt was marked; skipped");
                Ok(Handled::Skipped)
            }
            // Never permanent, whatever failed: the receipt's fate is known and kept in its
            // marker, and a permanent answer would have `handle` mark the row FAILED ("not
            // sent") over an email that went out. The retry replays the marker and marks again.
            Err(error) => {
                Err(RecordError::retryable(format!("marking the row {}: {}", status.as_str(), ErrorChain(&error))))
            }
        }
    }

    /// The receipt's recipient ([`recipient::choose`]), or why there is none.
    async fn recipient(&self, row: &ReceiptRow) -> Result<Result<Recipient, String>, RecordError> {
        let registered = match &self.profiles {
            Some(profiles) => match profiles.receipt_email(&row.account_id).await {
                Ok(registered) => registered,
                // The profile names something that is not an address (written by a tool other
                // than `Profiles::put`): the owner's data, which no retry cures, and retrying
                // holds the shard for a day. Refused, never sent to the event's address instead
                // (the registered one is meant to override it). The reason names the profile;
                // the value itself is not repeated. A row asking for no receipt gets none anyway.
                Err(e) if e.kind() == StoreErrorKind::Malformed => {
                    if row.receipt_email.is_none() {
                        None
                    } else {
                        return Ok(Err(format!(
                            "the profile of account {} holds a receipt_email that is not an address; \
                             refused, not sent to the event's address",
                            row.account_id
                        )));
                    }
                }
                Err(e) => {
                    return Err(RecordError::retryable(format!("reading the account's profile: {}", ErrorChain(&e))))
                }
            },
            None => None,
        };
        let chosen = recipient::choose(registered, row.receipt_email.as_deref(), self.allowed.as_ref());
        if let Ok(Recipient::Account(_)) = &chosen {
            tracing::info!("receipt goes to the account's registered address");
        }
        Ok(chosen)
    }

    /// Holds a receipt back (`status`, `REFUSED` or `RATE_LIMITED`, with `reason`): nothing
    /// sent, the row marked and its address removed, an alert counted; never retried.
    ///
    /// Unless the email's marker exists: an earlier attempt of this receipt passed the rules
    /// and claimed it (the profile, the allow-list or the window changed since). Its outcome is
    /// the receipt's: a completed marker's is marked on the row, as a replay would; one still
    /// in progress is retried until it completes. Never a receipt sent and marked as held
    /// back. The marker read costs one unit, on this path only.
    async fn hold(
        &self,
        markers: &Idempotency<DynamoDbStore>,
        key: &Key,
        row: &ReceiptRow,
        status: RowStatus,
        reason: &str,
    ) -> RecordResult {
        let would_be = format!("receipt would be {} now", status.as_str());
        if let Some(disposition) = self.answer_from_marker(markers, key, row, &would_be).await? {
            return Ok(disposition);
        }
        let now = rfc3339(markers.config().now_ms());
        let marked =
            self.outbox.mark_held(&row.event_id, status, reason, &now).await.map_err(|e| {
                RecordError::retryable(format!("marking the row {}: {}", status.as_str(), ErrorChain(&e)))
            })?;
        if !marked {
            return Ok(Handled::Duplicate);
        }
        let alert = if status == RowStatus::Refused { Alert::ReceiptRefused } else { Alert::ReceiptRateLimited };
        self.alerts
            .raise(alert, &format!("receipt not sent; row marked {}: {}", status.as_str(), redact_emails(reason)));
        Ok(Handled::Rejected)
    }

    /// The receipt's fate as its email marker records it, marked on the row as a replay would
    /// (`Duplicate`); `None` when there is no marker. A marker not completed (in progress) is
    /// retried until it completes, `why` saying what this attempt met. One marker read.
    async fn answer_from_marker(
        &self,
        markers: &Idempotency<DynamoDbStore>,
        key: &Key,
        row: &ReceiptRow,
        why: &str,
    ) -> Result<Option<Handled>, RecordError> {
        let Some(marker) = self.marker(markers, key).await? else { return Ok(None) };
        let outcome = match (marker.status, marker.response.as_deref()) {
            (Status::Completed, Some(response)) => serde_json::from_str::<SendOutcome>(response).ok(),
            _ => None,
        };
        let Some(outcome) = outcome else {
            return Err(RecordError::retryable(format!(
                "{why}, but an earlier attempt holds its email marker: retried until it completes"
            )));
        };
        let (fate, message_id) = match outcome {
            SendOutcome::Sent { message_id } => (RowStatus::Sent, Some(message_id)),
            SendOutcome::Failed { .. } => (RowStatus::Failed, None),
            SendOutcome::Ambiguous => (RowStatus::Ambiguous, None),
        };
        tracing::info!(status = fate.as_str(), "{why}; the earlier attempt's outcome is the receipt's");
        let now = rfc3339(markers.config().now_ms());
        self.outbox
            .mark(&row.event_id, fate, message_id.as_deref(), &now)
            .await
            .map_err(|e| RecordError::retryable(format!("marking the row {}: {}", fate.as_str(), ErrorChain(&e))))?;
        Ok(Some(Handled::Duplicate))
    }

    /// The receipt's email marker, if any (expired or not); a read that fails is retried.
    async fn marker(&self, markers: &Idempotency<DynamoDbStore>, key: &Key) -> Result<Option<Record>, RecordError> {
        markers
            .store()
            .get(key.as_str())
            .await
            .map_err(|e| RecordError::retryable(format!("reading the email marker: {}", ErrorChain(&e))))
    }

    /// Marks a still-pending row FAILED with `reason` (addresses redacted), for a permanent
    /// failure no retry will change. A row already marked, or gone, is left as it is; a write
    /// that fails is logged, and the failure stays in the stream driver's error log.
    async fn record_failure(&self, event_id: &str, reason: &str) {
        let now = rfc3339(self.markers.config().now_ms());
        match self.outbox.mark_failed(event_id, reason, &now).await {
            Ok(true) => {
                tracing::warn!(reason = %redact_emails(reason), "receipt failed permanently; row marked FAILED")
            }
            Ok(false) => tracing::warn!(
                reason = %redact_emails(reason),
                "receipt failed permanently; its row is no longer PENDING (already marked, or gone): left as it is"
            ),
            Err(error) => tracing::warn!(
                error = %ErrorChain(&error),
                "receipt failed permanently; its row could not be marked FAILED (unreachable)"
            ),
        }
    }
}

/// How a send ended ([`Receipts::send`]): with the email's outcome, to mark on the row, or with the
/// record's answer already decided (a marker claimed for another recipient).
enum Sending {
    Done(Outcome<SendOutcome>),
    Answered(Handled),
}
