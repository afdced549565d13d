//! The outbox sweeper: the outbox table, not its stream, is the receipts' source of truth. On a
//! schedule it reads the rows still `PENDING` longer than a threshold from the sparse pending
//! index (one shard and one page at a time, within a row budget and the invocation's deadline),
//! and settles each through the relay's own path: the same marker `email#{event_id}`, the same
//! policy, the same row marking. The marker decides, so the relay and the sweeper together send
//! each receipt once, whichever comes first and however often either comes.
//!
//! What it recovers: a receipt the stream gave up on (`MaximumRecordAgeInSeconds`, its record
//! trimmed after 24 h, where no replay reaches it), one behind a shard held for hours, one whose
//! row was written while the mapping was off.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use effectively_once::ErrorChain;
use effectively_once_effects::EmailSender;
use effectively_once_lambda::events::Context;
use effectively_once_lambda::metrics::{Emf, Unit};
use effectively_once_lambda::{Handled, Retry};
use payments::outbox::{Cursor, PendingRow, PENDING_SHARDS};
use payments::rfc3339;
use tracing::Instrument;

use crate::Receipts;

/// The sweeper's name in metrics where Lambda's `AWS_LAMBDA_FUNCTION_NAME` is absent.
pub const SWEEPER: &str = "outbox-sweeper";

/// The environment variable of [`Sweep::after`], in seconds.
pub const AFTER_VAR: &str = "SWEEP_AFTER_SECONDS";
/// The environment variable of [`Sweep::page_size`].
pub const PAGE_SIZE_VAR: &str = "SWEEP_PAGE_SIZE";
/// The environment variable of [`Sweep::max_rows`].
pub const MAX_ROWS_VAR: &str = "SWEEP_MAX_ROWS";

/// No row is started with less than this left before the invocation's deadline: a send and
/// the row's mark take well under it.
const DEADLINE_MARGIN: Duration = Duration::from_secs(10);

/// What one sweep looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sweep {
    /// A row `PENDING` for longer than this is swept. Longer than the relay normally needs
    /// (seconds): below it, the sweep would race the stream for every receipt (harmless, the
    /// marker decides, but twice the reads).
    pub after: Duration,
    /// Rows per query of the index.
    pub page_size: i32,
    /// Rows per sweep; the rest wait for the next.
    pub max_rows: usize,
}

impl Default for Sweep {
    /// 30 minutes, pages of 50, 500 rows.
    fn default() -> Self {
        Sweep { after: Duration::from_secs(1800), page_size: 50, max_rows: 500 }
    }
}

impl Sweep {
    /// Reads [`AFTER_VAR`], [`PAGE_SIZE_VAR`] and [`MAX_ROWS_VAR`] (unset or empty: the
    /// default); a value out of range is an error naming the variable.
    pub fn from_env() -> Result<Sweep, String> {
        Sweep::from_env_with(|name| std::env::var(name).ok())
    }

    /// The same, with the variables read through `var` (`None` for unset).
    ///
    /// ```
    /// use receipts_relay::Sweep;
    /// let sweep = Sweep::from_env_with(|name| (name == "SWEEP_AFTER_SECONDS").then(|| "900".to_owned())).unwrap();
    /// assert_eq!((sweep.after.as_secs(), sweep.page_size), (900, 50));
    /// assert!(Sweep::from_env_with(|_| Some("0".to_owned())).unwrap_err().contains("SWEEP_PAGE_SIZE"));
    /// ```
    pub fn from_env_with(var: impl Fn(&str) -> Option<String>) -> Result<Sweep, String> {
        let number = |name: &str, range: std::ops::RangeInclusive<u64>, default: u64| {
            let Some(text) = var(name).filter(|v| !v.trim().is_empty()) else { return Ok(default) };
            match text.trim().parse::<u64>() {
                Ok(n) if range.contains(&n) => Ok(n),
                _ => Err(format!("{name}: {text:?} is not a whole number from {} to {}", range.start(), range.end())),
            }
        };
        let default = Sweep::default();
        Ok(Sweep {
            after: Duration::from_secs(number(AFTER_VAR, 0..=14 * 86_400, default.after.as_secs())?),
            // DynamoDB's Query returns at most 1 MB; a thousand rows fit.
            page_size: number(PAGE_SIZE_VAR, 1..=1000, default.page_size as u64)? as i32,
            max_rows: number(MAX_ROWS_VAR, 1..=100_000, default.max_rows as u64)? as usize,
        })
    }
}

/// What one sweep found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Rows read from the index: `PENDING` past the threshold when the index was read.
    pub found: usize,
    /// Receipts this sweep sent: the stream had not.
    pub sent: usize,
    /// Rows whose receipt was settled already (the marker, or a mark since the index was read):
    /// marked as the marker says, nothing sent.
    pub settled: usize,
    /// Rows settled now without a send, by the relay's rules (`FAILED` by the provider,
    /// `AMBIGUOUS`, `REFUSED`, `RATE_LIMITED`), or gone from the table.
    pub held: usize,
    /// Rows whose marker another attempt holds (the relay, now): left to it.
    pub busy: usize,
    /// Rows not settled: left `PENDING` for the next sweep (SES blocked or throttling, a store
    /// fault), failed for good (marked `FAILED` with the reason), or not a receipt row.
    pub unsent: usize,
    /// Pages of the index that could not be read.
    pub failed_reads: usize,
    /// Every shard was read to its end within the budget.
    pub complete: bool,
}

impl Swept {
    /// The counts as metrics, by name; `SweepUnsent` is what an alarm watches.
    pub fn metrics(&self) -> [(&'static str, usize); 7] {
        [
            ("SweepFound", self.found),
            ("SweepSent", self.sent),
            ("SweepSettled", self.settled),
            ("SweepHeld", self.held),
            ("SweepBusy", self.busy),
            ("SweepUnsent", self.unsent),
            ("SweepReadFailures", self.failed_reads),
        ]
    }

    /// The invocation's answer (and the local command's report).
    pub fn to_json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for (name, value) in self.metrics() {
            out.insert(name.to_owned(), value.into());
        }
        out.insert("complete".to_owned(), self.complete.into());
        serde_json::Value::Object(out)
    }

    fn count(&mut self, result: &effectively_once_lambda::RecordResult) {
        match result {
            Ok(Handled::Applied) => self.sent += 1,
            Ok(Handled::Duplicate) => self.settled += 1,
            Ok(Handled::Rejected | Handled::Skipped) => self.held += 1,
            Err(error) if error.retry == Retry::InProgressElsewhere => self.busy += 1,
            Err(_) => self.unsent += 1,
        }
    }
}

/// The receipts relay, sweeping the outbox table instead of reading its stream.
#[derive(Debug, Clone)]
pub struct Sweeper<E> {
    receipts: Receipts<E>,
    sweep: Sweep,
    metrics: Option<Emf>,
}

impl<E: EmailSender> Sweeper<E> {
    /// Sweeps with `receipts` (the relay, with its rules, markers and sender) as `sweep` says.
    pub fn new(receipts: Receipts<E>, sweep: Sweep) -> Self {
        Sweeper { receipts, sweep, metrics: None }
    }

    /// Prints each sweep's counts ([`Swept::metrics`]) on one EMF line to `emf`.
    pub fn with_metrics(mut self, emf: Emf) -> Self {
        self.metrics = Some(emf);
        self
    }

    /// The relay it sends through.
    pub fn receipts(&self) -> &Receipts<E> {
        &self.receipts
    }

    /// A scheduled invocation: a sweep now, within the invocation's deadline. An index page
    /// that could not be read fails the invocation (after the counts are printed), so the
    /// function's error alarm says the sweep did not see every row.
    pub async fn handle(&self, context: &Context) -> Result<serde_json::Value, effectively_once_lambda::Error> {
        let swept = self.run(now_ms(), effectively_once::epoch_deadline_ms(context.deadline)).await;
        if swept.failed_reads > 0 {
            return Err(
                format!("{} pages of the pending index could not be read: {swept:?}", swept.failed_reads).into()
            );
        }
        Ok(swept.to_json())
    }

    /// One sweep at `now_ms` (epoch): the rows `PENDING` since before `now_ms - after`, the
    /// shards' pages taken in turn so that a budget spent early leaves no shard unread for good,
    /// until every shard is read, `max_rows` rows are taken, or `deadline_ms` (epoch; `None`:
    /// none) is near.
    pub async fn run(&self, now_ms: u64, deadline_ms: Option<u64>) -> Swept {
        let before = rfc3339(now_ms.saturating_sub(self.sweep.after.as_millis() as u64));
        let mut swept = Swept::default();
        let mut shards: Vec<(u32, Option<Cursor>)> = (0..PENDING_SHARDS).map(|shard| (shard, None)).collect();
        'rounds: while !shards.is_empty() {
            let mut unread = Vec::new();
            for (shard, cursor) in std::mem::take(&mut shards) {
                let budget = self.sweep.max_rows.saturating_sub(swept.found);
                if budget == 0 || near(deadline_ms) {
                    shards.push((shard, cursor));
                    break 'rounds;
                }
                let limit = (self.sweep.page_size as usize).min(budget) as i32;
                let page = match self.receipts.outbox.pending(shard, &before, limit, cursor).await {
                    Ok(page) => page,
                    Err(error) => {
                        tracing::error!(shard, error = %ErrorChain(&error), "reading the pending index failed; shard left for the next sweep");
                        swept.failed_reads += 1;
                        continue;
                    }
                };
                for row in page.rows {
                    // No row is started near the deadline: a sweep killed mid-send leaves its
                    // marker held, and an at-most-once takeover marks that receipt AMBIGUOUS.
                    if near(deadline_ms) {
                        shards.push((shard, None));
                        break 'rounds;
                    }
                    self.sweep_row(row, deadline_ms, &mut swept).await;
                }
                unread.extend(page.next.map(|next| (shard, Some(next))));
            }
            shards = unread;
        }
        swept.complete = shards.is_empty() && swept.failed_reads == 0;
        self.report(&swept);
        swept
    }

    /// Settles one row as the relay would a stream record of it, without waiting out another
    /// attempt's lease (that attempt settles it; a dead one's lease is over by the next sweep).
    async fn sweep_row(&self, row: PendingRow, deadline_ms: Option<u64>, swept: &mut Swept) {
        swept.found += 1;
        let (key, receipt) = match row.receipt {
            Ok(receipt) => (row.key, receipt),
            // Decided on the row as the table holds it, not on the index's copy (eventually
            // consistent, a projection): a row mended or marked since is not set aside.
            Err(_) => match self.receipts.outbox.pending_row_at(&row.key).await {
                Ok(Some(PendingRow { key, receipt: Ok(receipt) })) => (key, receipt),
                Ok(Some(PendingRow { key, receipt: Err(error) })) => return self.set_aside(&key, &error, swept).await,
                Ok(None) => {
                    // Gone, or marked: out of the index if it is still there.
                    self.unindex(&row.key).await;
                    swept.held += 1;
                    return;
                }
                Err(error) => {
                    let error = ErrorChain(&error);
                    tracing::error!(row = %row.key, %error, "reading a pending outbox row failed; left for the next sweep");
                    swept.unsent += 1;
                    return;
                }
            },
        };
        let span = tracing::info_span!("receipt", event_id = receipt.event_id.as_str());
        let result = self.receipts.settle(&receipt, deadline_ms, 0).instrument(span.clone()).await;
        let _entered = span.enter();
        match &result {
            Ok(Handled::Applied) => tracing::warn!("receipt sent by the sweep: the stream had not delivered it"),
            Err(error) if error.retry != Retry::InProgressElsewhere => {
                tracing::error!(reason = %error.reason, "pending receipt not sent by the sweep");
            }
            _ => {}
        }
        // A row the relay found settled (or whose status it cannot read) that is still in the
        // index leaves it here: else every sweep reads it first, and enough of them starve the
        // shard's rows behind. A row the relay marked just now left it with its mark.
        let settled = matches!(result, Ok(Handled::Duplicate | Handled::Skipped));
        if settled || result.as_ref().is_err_and(|error| error.retry == Retry::Never) {
            self.unindex(&key).await;
        }
        swept.count(&result);
    }

    /// Sets aside the `PENDING` row `key` that is not a receipt the relay may send (`FAILED`,
    /// out of the index): no retry mends it, and left `PENDING` it would take a place in every
    /// sweep's budget and raise every sweep's alarm.
    async fn set_aside(&self, key: &str, error: &effectively_once::StoreError, swept: &mut Swept) {
        let reason = ErrorChain(error).to_string();
        match self.receipts.outbox.set_aside(key, &reason, &rfc3339(now_ms())).await {
            Ok(true) => {
                tracing::error!(row = %key, %reason, "pending outbox row is not a receipt row; marked FAILED, not sent")
            }
            Ok(false) => {
                tracing::warn!(row = %key, %reason, "outbox row is not a receipt row, but marked or gone since read; left as it is")
            }
            Err(mark) => {
                let error = ErrorChain(&mark);
                tracing::error!(row = %key, %reason, %error, "pending outbox row is not a receipt row; marking it FAILED failed");
            }
        }
        swept.unsent += 1;
    }

    /// Takes the row `key` out of the pending index if it is there though not `PENDING`.
    async fn unindex(&self, key: &str) {
        if let Err(error) = self.receipts.outbox.unindex(key).await {
            let error = ErrorChain(&error);
            tracing::error!(row = %key, %error, "taking a settled row out of the pending index failed");
        }
    }

    /// The counts, logged and (with [`with_metrics`](Self::with_metrics)) on an EMF line.
    fn report(&self, swept: &Swept) {
        tracing::info!(
            found = swept.found,
            sent = swept.sent,
            settled = swept.settled,
            held = swept.held,
            busy = swept.busy,
            unsent = swept.unsent,
            failed_reads = swept.failed_reads,
            complete = swept.complete,
            "outbox swept"
        );
        if let Some(emf) = &self.metrics {
            let metrics = swept.metrics().map(|(name, value)| (name, value as f64, Unit::Count));
            println!("{}", emf.line(now_ms(), metrics));
        }
    }
}

/// Wall-clock milliseconds since the epoch: Lambda's deadline is one.
fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Whether too little is left before `deadline_ms` to start a row.
fn near(deadline_ms: Option<u64>) -> bool {
    deadline_ms.is_some_and(|deadline| now_ms() + DEADLINE_MARGIN.as_millis() as u64 >= deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_are_read_and_bounded() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        assert_eq!(Sweep::from_env_with(|_| None), Ok(Sweep::default()));
        let sweep = Sweep::from_env_with(env(&[(AFTER_VAR, "600"), (PAGE_SIZE_VAR, "25"), (MAX_ROWS_VAR, " 40 ")]));
        assert_eq!(sweep, Ok(Sweep { after: Duration::from_secs(600), page_size: 25, max_rows: 40 }));
        for (name, bad) in [(AFTER_VAR, "-1"), (AFTER_VAR, "soon"), (PAGE_SIZE_VAR, "1001"), (MAX_ROWS_VAR, "0")] {
            let pairs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([(name, bad)]));
            let err = Sweep::from_env_with(env(pairs)).unwrap_err();
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn each_outcome_is_counted_once_and_in_progress_is_not_unsent() {
        use effectively_once_lambda::RecordError;
        let mut swept = Swept::default();
        for result in [
            Ok(Handled::Applied),
            Ok(Handled::Duplicate),
            Ok(Handled::Rejected),
            Ok(Handled::Skipped),
            Err(RecordError::in_progress_elsewhere("held")),
            Err(RecordError::retryable("blocked")),
            Err(RecordError::permanent("refused")),
        ] {
            swept.count(&result);
        }
        assert_eq!((swept.sent, swept.settled, swept.held, swept.busy, swept.unsent), (1, 1, 2, 1, 2));
        let json = swept.to_json();
        assert_eq!((json["SweepUnsent"].as_u64(), json["complete"].as_bool()), (Some(2), Some(false)));
    }
}
