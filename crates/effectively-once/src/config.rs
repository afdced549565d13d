//! How records are kept: dedup window, lease, what the payload hash covers, the clock.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, ErrorKind};
use crate::hash::PayloadHash;
use crate::record::Record;

/// Fourteen days: SQS's longest retention, so a replay from a dead-letter queue is still
/// recognised as a duplicate.
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(14 * 24 * 3600);
/// Fifteen minutes, Lambda's longest timeout; within Lambda the deadline shortens it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15 * 60);
/// Room left for the other attributes under DynamoDB's 400 KB item limit.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 380_000;

/// Which part of the payload the hash covers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PayloadSelector {
    /// The whole payload, in its RFC 8785 canonical JSON form.
    #[default]
    Whole,
    /// Only the values at these JSON pointers (`/amount_cents`), missing ones as `null`: a retry
    /// that adds or changes another field is still a duplicate.
    Fields(Vec<String>),
    /// No payload check: any payload under a key is a duplicate.
    Ignore,
}

/// A function called with the stored record whenever a call is answered from it (a replay).
#[derive(Clone)]
pub struct ReplayHook(pub(crate) Arc<dyn Fn(&Record) + Send + Sync>);

impl std::fmt::Debug for ReplayHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplayHook")
    }
}

/// The environment variables that turn [`Idempotency::run`](crate::Idempotency::run) off (for
/// local debugging only; see [`Config::with_disabled`] for what they do not turn off).
pub const DISABLED_VARS: [&str; 2] = ["IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED"];

/// Settings shared by every call of an [`Idempotency`](crate::Idempotency).
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) dedup_window: Duration,
    pub(crate) lease: Duration,
    pub(crate) payload: PayloadSelector,
    pub(crate) max_response_bytes: usize,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) replay_hook: Option<ReplayHook>,
    pub(crate) disabled: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dedup_window: DEFAULT_DEDUP_WINDOW,
            lease: DEFAULT_LEASE,
            payload: PayloadSelector::Whole,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            clock: Arc::new(SystemClock),
            replay_hook: None,
            disabled: false,
        }
    }
}

impl Config {
    /// How long a completed record answers duplicates (default [`DEFAULT_DEDUP_WINDOW`], 14 days).
    /// Also the TTL.
    pub fn with_dedup_window(mut self, window: Duration) -> Self {
        self.dedup_window = window;
        self
    }

    /// How long an attempt holds a key before another may take it over (default
    /// [`DEFAULT_LEASE`], 15 minutes).
    /// A deadline given with [`Idempotency::with_deadline`](crate::Idempotency::with_deadline)
    /// shortens it.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// What the payload hash covers (default: the whole payload).
    pub fn with_payload(mut self, selector: PayloadSelector) -> Self {
        self.payload = selector;
        self
    }

    /// Hash only the values at these JSON pointers.
    pub fn with_payload_fields<I, S>(self, pointers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.with_payload(PayloadSelector::Fields(pointers.into_iter().map(Into::into).collect()))
    }

    /// Largest stored response in bytes of JSON (default 380,000, under DynamoDB's 400 KB item).
    pub fn with_max_response_bytes(mut self, max: usize) -> Self {
        self.max_response_bytes = max;
        self
    }

    /// The clock (default: the system's).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Calls `hook` with the stored record each time a call is answered from it, so a caller can
    /// tell a replayed response from a fresh one where only the response travels (metrics, a
    /// header). [`Outcome`](crate::Outcome) already says it to the caller of `run`.
    pub fn on_replay(mut self, hook: impl Fn(&Record) + Send + Sync + 'static) -> Self {
        self.replay_hook = Some(ReplayHook(Arc::new(hook)));
        self
    }

    /// Turns [`Idempotency::run`](crate::Idempotency::run) off: its handlers run on every
    /// delivery, nothing is stored. For local debugging only;
    /// [`Idempotency::new`](crate::Idempotency::new) logs a warning.
    ///
    /// # What the switch means, and what it never touches
    ///
    /// Only `run`, and what is built on it ([`Idempotency::wrap`](crate::Idempotency::wrap),
    /// the tower layer), honours it: there the record is a cache of a handler's answer, and
    /// running the handler again is what a debugging session wants. The two-phase API
    /// ([`begin`](crate::Idempotency::begin) / [`complete`](crate::Idempotency::complete) /
    /// [`release`](crate::Idempotency::release)) ignores it, and so do the effects built on it
    /// or on a store directly: a keyed email's marker (`effectively_once_effects::send_once`)
    /// and, in the payments showcase, a ledger post (`payments::Ledger::post`, one transaction
    /// whose conditions are the uniqueness of the payment). Their conditions are the business
    /// invariant, not a cache: a variable left set in production must not post a payment twice
    /// or send a receipt twice.
    ///
    /// The shipped functions (`payments-consumer`, `receipts-relay`) build their config with
    /// [`from_env`](Self::from_env), so the switch is read there; as they run nothing but a
    /// ledger post and an email marker, it switches nothing off, and they log a warning at cold
    /// start that says so (`payments::warn_if_disabled`).
    pub fn with_disabled(mut self, disabled: bool) -> Self {
        self.disabled = disabled;
        self
    }

    /// The defaults, [`with_disabled`](Self::with_disabled) when `IDEMPOTENCY_DISABLED` (or Powertools'
    /// `POWERTOOLS_IDEMPOTENCY_DISABLED`) is `1`, `true` or `yes`: [`from_env_with`]
    /// reading the process environment. Disabled turns `run` off, never a ledger post or an
    /// email marker.
    ///
    /// [`from_env_with`]: Self::from_env_with
    pub fn from_env() -> Self {
        Self::from_env_with(|name| std::env::var(name).ok())
    }

    /// The same, with the variables read through `var` (`None` for unset). Tests pass a map
    /// here instead of setting process variables, which other threads of the test binary
    /// read at the same time (`std::env::set_var` is unsound there).
    ///
    /// ```
    /// use effectively_once::Config;
    /// let config = Config::from_env_with(|name| (name == "IDEMPOTENCY_DISABLED").then(|| "true".into()));
    /// assert!(config.is_disabled());
    /// ```
    pub fn from_env_with(var: impl Fn(&str) -> Option<String>) -> Self {
        let on = |v: String| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes");
        let disabled = DISABLED_VARS.iter().any(|name| var(name).is_some_and(on));
        Config::default().with_disabled(disabled)
    }

    /// Whether idempotency is off.
    pub fn is_disabled(&self) -> bool {
        self.disabled
    }

    /// How long a claim holds its key before another attempt may take it over.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The largest response, in bytes of JSON, a record keeps.
    pub fn max_response_bytes(&self) -> usize {
        self.max_response_bytes
    }

    /// The dedup window.
    pub fn dedup_window(&self) -> Duration {
        self.dedup_window
    }

    /// The clock in use.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// [`Config::payload_hash`] of a plain payload: one with no floating-point number, no
    /// integer past ±2^53 and no string that starts with a NUL (a validated event's ids,
    /// amounts in cents and codes, say). The same hash, without building the payload's
    /// `serde_json::Value` tree first: its fields are serialised straight to their RFC 8785
    /// form. Debug builds check it against [`Config::payload_hash`]; a payload that is not
    /// plain may get another hash in release builds. Under a selector other than the whole
    /// payload, this is [`Config::payload_hash`].
    pub fn payload_hash_of_plain<P: Serialize + ?Sized>(&self, payload: &P) -> Result<PayloadHash, Error> {
        match self.payload {
            PayloadSelector::Whole => PayloadHash::of_plain(payload),
            _ => self.payload_hash(payload),
        }
    }

    /// The hash of `payload` under this config's selector: SHA-256 of its RFC 8785 (JSON
    /// Canonicalization Scheme) form, so a producer that re-serialises the payload (`1` as
    /// `1.0`, keys in another order) sends the same payload. Numbers compare as IEEE doubles, as
    /// RFC 8785 has it, except integers within ±2^64 that no double holds: those keep their
    /// exact digits, so two such ids that differ are two payloads. The hash is versioned ([`PayloadHash`]): records written by an
    /// earlier version still match their payload.
    ///
    /// ```
    /// use effectively_once::Config;
    /// let config = Config::default();
    /// let sent = config.payload_hash(&serde_json::json!({"amount": 1, "currency": "USD"})).unwrap();
    /// let resent: serde_json::Value = serde_json::from_str(r#"{"currency": "USD", "amount": 1.0}"#).unwrap();
    /// assert_eq!(sent.as_str(), config.payload_hash(&resent).unwrap().as_str());
    /// ```
    pub fn payload_hash<P: Serialize + ?Sized>(&self, payload: &P) -> Result<PayloadHash, Error> {
        let value = serde_json::to_value(payload)
            .map_err(|e| Error::new(ErrorKind::Serialization, "payload is not serialisable").with_source(e))?;
        let selected = match &self.payload {
            PayloadSelector::Whole => value,
            PayloadSelector::Fields(pointers) => {
                Value::Array(pointers.iter().map(|p| value.pointer(p).cloned().unwrap_or(Value::Null)).collect())
            }
            PayloadSelector::Ignore => Value::Null,
        };
        PayloadHash::of(selected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_payload_hash_ignores_key_order_but_not_values() {
        let c = Config::default();
        let a = c.payload_hash(&json!({"a": 1, "b": {"y": 2, "x": [1, 2]}})).unwrap();
        let b = c.payload_hash(&json!({"b": {"x": [1, 2], "y": 2}, "a": 1})).unwrap();
        let d = c.payload_hash(&json!({"a": 1, "b": {"y": 2, "x": [2, 1]}})).unwrap();
        assert_eq!(a.as_str(), b.as_str());
        assert_ne!(a.as_str(), d.as_str());
        assert_eq!(a.as_str().len(), "v2:".len() + 64);
    }

    #[test]
    fn the_disable_switch_reads_either_variable_and_only_true_values() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        assert!(!Config::from_env_with(env(&[])).is_disabled());
        assert!(Config::from_env_with(env(&[("IDEMPOTENCY_DISABLED", " TRUE ")])).is_disabled());
        assert!(Config::from_env_with(env(&[("POWERTOOLS_IDEMPOTENCY_DISABLED", "1")])).is_disabled());
        assert!(!Config::from_env_with(env(&[("IDEMPOTENCY_DISABLED", "0")])).is_disabled());
        assert!(!Config::from_env_with(env(&[("IDEMPOTENCY_DISABLED", "false")])).is_disabled());
    }

    #[test]
    fn selected_fields_ignore_the_rest() {
        let c = Config::default().with_payload_fields(["/amount_cents", "/currency"]);
        let a = c.payload_hash(&json!({"amount_cents": 5, "currency": "USD", "note": "x"})).unwrap();
        let b = c.payload_hash(&json!({"amount_cents": 5, "currency": "USD", "trace": 7})).unwrap();
        let d = c.payload_hash(&json!({"amount_cents": 6, "currency": "USD"})).unwrap();
        let e = c.payload_hash(&json!({"amount_cents": 5.0, "currency": "USD"})).unwrap();
        assert_eq!(a.as_str(), b.as_str());
        assert_eq!(a.as_str(), e.as_str(), "a selected number re-serialised");
        assert_ne!(a.as_str(), d.as_str());
    }
}
