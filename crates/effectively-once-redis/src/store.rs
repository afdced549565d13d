//! [`RedisStore`]: records as Redis hashes, each change one Lua script run atomically by the server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use effectively_once::{Claim, Completion, Record, Status, Store, StoreError, StoreErrorKind};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use crate::error::store_error;

/// The environment variable [`RedisStore::from_env`] reads the URL from:
/// `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS.
pub const URL_ENV: &str = "IDEMPOTENCY_REDIS_URL";
/// The environment variable [`RedisStore::from_env`] reads the key prefix from.
pub const PREFIX_ENV: &str = "IDEMPOTENCY_REDIS_PREFIX";
/// The key prefix when none is configured: a record of id `payments#pay_1` is the hash
/// `idempotency:payments#pay_1`.
///
/// A prefix is one or more characters from `[A-Za-z0-9._-]`, and the store puts a `:` between
/// it and the record's id. No prefix holds a `:`, so a key splits one way only: two stores with
/// different prefixes never share a key, whatever their ids hold (`app` + `2orders#1` and `app2`
/// + `orders#1` are `app:2orders#1` and `app2:orders#1`).
pub const DEFAULT_KEY_PREFIX: &str = "idempotency";
/// How long a key outlives the end of its record's window (or lease), by the writer's clock and
/// by the server's; the largest clock difference from the server's a caller may have. See
/// [`RedisStore`] on expiry.
pub const DEFAULT_EXPIRY_GRACE: Duration = Duration::from_secs(300);
/// A key's longest time to live, about 100 years: a record that "never expires" (the DynamoDB
/// crate's `NEVER_EXPIRES`) lives this long, as `PEXPIRE` takes no larger value safely. The
/// scripts' `MAX_TTL_MS` (`lua/common.lua`) is the same.
const MAX_TTL_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

// Each script is the shared helpers followed by its body; `Script` sends EVALSHA and falls back
// to loading the script on NOSCRIPT (a restarted or failed-over server has an empty cache).
static CLAIM: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("lua/common.lua"), include_str!("lua/claim.lua"))));
static COMPLETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("lua/common.lua"), include_str!("lua/complete.lua"))));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("lua/common.lua"), include_str!("lua/release.lua"))));

/// Idempotency records on Valkey or Redis (ElastiCache, MemoryDB, a server of your own).
///
/// One hash per record at `{key_prefix}:{id}` (see [`DEFAULT_KEY_PREFIX`] on prefixes), with
/// the fields of the DynamoDB item: `status`, `lease_expires_at` (ms), `expiration` (s),
/// `payload_hash`, `owner` and, once completed, `response`; while in progress also `replaced` (`0`:
/// the key was free, `1`: the `replaced_*` fields copy the record the claim replaced, and
/// `first_*` the one its run of takeovers began with, if another), so a resent claim that
/// meets its own record learns what its first write replaced. Beside the record (or without
/// one), a release leaves a fence of the released owner, `released:{owner}`, with
/// `released_until`: see [`RedisStore`] on resends. Claim, complete and release are each one
/// Lua script, which the server runs atomically, so each costs one round trip; `get` is one
/// `HGETALL`. A first delivery is two round trips (claim, complete), a duplicate one (the claim
/// returns the blocking record).
///
/// # Clocks and expiry
///
/// Every condition uses the caller's clock (`now_ms` as the core passes it), as the DynamoDB
/// store does, never the server's `TIME`. The key's time to live is the longer of two, each
/// plus a grace ([`DEFAULT_EXPIRY_GRACE`]): the end of the record's window (or its lease, if
/// later) minus the writer's now, and that same end minus the server's `TIME`, read by the
/// script. The end is an absolute time stated in the writer's clock, and every other caller
/// judges it on its own: counted on the writer's clock alone, a writer whose clock runs ahead
/// of the others' by more than the grace would have Redis delete the record before its window
/// ends by theirs, and a duplicate would then find the key free and run again. With both, the
/// key outlives the window's end as the writer counts it (so a caller whose clock runs behind
/// the server's, or a test clock set in the past, never sees its record vanish early) and as any
/// caller whose clock is within the grace of the server's counts it. The bound: a caller whose
/// clock runs *behind* the server's by more than the grace may still see a key go while it
/// counts the window open; keep clocks synchronised, or raise the grace past the largest
/// difference. Keeping a key past its window is harmless, as the claim script reads the window
/// from the record. A record is never written already expired: the grace is a floor.
///
/// # Resends
///
/// A script whose connection died before its answer is sent once more (see `invoke`), and the
/// first send may still run on the server later, after the resend was answered and the attempt
/// went on. Complete and release are conditional on the record as it then is. A claim would not
/// be: after its attempt failed and released the record, a late first send would write the
/// record in progress again, blocking the key until that lease ends and then making the next
/// taker believe it took over a crashed attempt (at most once, an effect it would have run is
/// then held back as ambiguous). So a release leaves a fence of its owner in the hash, until the
/// released lease's end plus the grace on the server's clock (at least the grace from the
/// release): a claim by a fenced owner writes nothing and is answered `Fenced`. Owners are unique
/// per attempt, so a fence never stops another claim; `get` does not see it, and the key lives
/// at least as long as its fences. Not fenced: a first send later still than that, and a late
/// claim of an attempt that was taken over rather than released (judged as any claim is).
///
/// Cloning is cheap: clones share one multiplexed, self-reconnecting connection.
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    key_prefix: Arc<str>,
    expiry_grace: Duration,
    requests: Arc<AtomicU64>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("key_prefix", &self.key_prefix).finish_non_exhaustive()
    }
}

/// Options for [`RedisStore`], from [`RedisStore::builder`]. Its `Debug` hides the URL's password.
#[derive(Clone)]
pub struct Builder {
    url: String,
    key_prefix: String,
    connection_timeout: Duration,
    response_timeout: Duration,
    reconnect_tries: usize,
    expiry_grace: Duration,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("url", &redacted(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("connection_timeout", &self.connection_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("reconnect_tries", &self.reconnect_tries)
            .field("expiry_grace", &self.expiry_grace)
            .finish()
    }
}

/// `url` with its password hidden, for `Debug`: the password in the userinfo
/// (`redis://user:password@host`) and a `pass` or `password` query parameter (`redis+unix://`
/// URLs carry it there). The user name stays, as it names an identity, not a secret, and helps
/// to read a `WRONGPASS`. A URL that does not parse is hidden whole: where its password sits is
/// not known.
fn redacted(url: &str) -> String {
    const HIDDEN: &str = "REDACTED";
    let Some(mut parsed) = redis::parse_redis_url(url) else {
        return "<unparseable URL, hidden>".to_owned();
    };
    if parsed.password().is_some() && parsed.set_password(Some(HIDDEN)).is_err() {
        return "<URL hidden>".to_owned();
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(name, value)| {
                let secret = matches!(name.as_ref(), "pass" | "password");
                (name.into_owned(), if secret { HIDDEN.to_owned() } else { value.into_owned() })
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.into()
}

/// `Ok` if `prefix` may prefix keys: one or more characters from `[A-Za-z0-9._-]`. Without `:`
/// (the delimiter the store adds), a key names one prefix and one id; see [`DEFAULT_KEY_PREFIX`].
fn check_prefix(prefix: &str) -> Result<(), StoreError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if !prefix.is_empty() && prefix.chars().all(allowed) {
        return Ok(());
    }
    let hint = match prefix.strip_suffix(':') {
        Some(bare) if !bare.is_empty() && bare.chars().all(allowed) => {
            format!(" (write it `{bare}`: the store adds the `:` itself, so its keys stay the same)")
        }
        _ => String::new(),
    };
    Err(StoreError::new(
        StoreErrorKind::Misconfigured,
        format!(
            "key prefix {prefix:?}: expected one or more characters from [A-Za-z0-9._-]{hint}; keys are \
             `{{prefix}}:{{id}}`, so a prefix without `:` keeps every store's keys apart"
        ),
    ))
}

impl Builder {
    /// The prefix of every key (default [`DEFAULT_KEY_PREFIX`]): one per application sharing a
    /// server; one or more characters from `[A-Za-z0-9._-]`, else [`Builder::connect`] fails
    /// with `Misconfigured`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The longest a connection attempt waits (default 1 s).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// The longest a call waits for its answer (default 1 s). A call that times out may have
    /// been carried out: the core treats it as a lost answer (a retried claim finds its own
    /// record, a retried completion its own completed record).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Reconnection attempts after the connection drops (default 3, backing off from 100 ms).
    pub fn reconnect_tries(mut self, tries: usize) -> Self {
        self.reconnect_tries = tries;
        self
    }

    /// How long a key outlives the end of its record's window, by the writer's clock and by
    /// the server's (default [`DEFAULT_EXPIRY_GRACE`]); covers the clock differences between
    /// callers and the server (see [`RedisStore`] on expiry).
    pub fn expiry_grace(mut self, grace: Duration) -> Self {
        self.expiry_grace = grace;
        self
    }

    /// Connects (eagerly: a wrong host, password or TLS set-up fails here, at start-up). An
    /// invalid key prefix is `Misconfigured`, before any connection.
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        check_prefix(&self.key_prefix)?;
        #[cfg(feature = "tls")]
        if self.url.starts_with("rediss://") {
            // The process-wide crypto provider for rustls; an error means one is installed.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        }
        let client = redis::Client::open(self.url.as_str()).map_err(|e| store_error("url", e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(self.reconnect_tries);
        let connection =
            ConnectionManager::new_with_config(client, config).await.map_err(|e| store_error("connect", e))?;
        Ok(RedisStore {
            connection,
            key_prefix: self.key_prefix.into(),
            expiry_grace: self.expiry_grace,
            requests: Arc::default(),
        })
    }
}

impl RedisStore {
    /// Options for a store at `url`: `redis://[user:password@]host:port[/db]`, or `rediss://`
    /// for TLS (feature `tls`, on by default).
    pub fn builder(url: impl Into<String>) -> Builder {
        Builder {
            url: url.into(),
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            reconnect_tries: 3,
            expiry_grace: DEFAULT_EXPIRY_GRACE,
        }
    }

    /// Connects to `url` with keys under `key_prefix` and the default options.
    pub async fn connect(url: &str, key_prefix: &str) -> Result<RedisStore, StoreError> {
        Self::builder(url).key_prefix(key_prefix).connect().await
    }

    /// Connects with the URL from [`URL_ENV`] (required) and the prefix from [`PREFIX_ENV`]
    /// (default [`DEFAULT_KEY_PREFIX`]). A missing URL, a value that is not UTF-8, or an invalid
    /// prefix is `Misconfigured`.
    pub async fn from_env() -> Result<RedisStore, StoreError> {
        let url = std::env::var(URL_ENV).map_err(|_| {
            StoreError::new(StoreErrorKind::Misconfigured, format!("{URL_ENV} is not set, or not UTF-8"))
        })?;
        let prefix = match std::env::var(PREFIX_ENV) {
            Ok(prefix) => prefix,
            Err(std::env::VarError::NotPresent) => DEFAULT_KEY_PREFIX.to_owned(),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(StoreError::new(StoreErrorKind::Misconfigured, format!("{PREFIX_ENV} is not UTF-8")))
            }
        };
        Self::builder(url).key_prefix(prefix).connect().await
    }

    /// The same server and connection, keys under another prefix; an invalid prefix (see
    /// [`Builder::key_prefix`]) is `Misconfigured`.
    pub fn with_key_prefix(&self, prefix: &str) -> Result<RedisStore, StoreError> {
        check_prefix(prefix)?;
        Ok(RedisStore { key_prefix: prefix.into(), requests: Arc::default(), ..self.clone() })
    }

    /// The prefix of every key.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// Store calls sent so far by this store and its clones, a resend after a dropped connection
    /// included (one round trip each, but for a script's one-time load after the server lost
    /// its script cache).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// A handle on the shared connection, for commands of your own.
    pub fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// The Redis key of record `id`: `{prefix}:{id}`.
    pub fn key(&self, id: &str) -> String {
        format!("{}:{id}", self.key_prefix)
    }

    /// The expiry arguments of a key whose record matters until `end_ms`, stated in the
    /// writer's clock: its time to live counted from the writer's `now_ms`, and the server time
    /// (`end_ms` plus the grace) until which the script keeps it at least (see `expire` in
    /// `lua/common.lua`, and [`RedisStore`] on expiry).
    fn expiry(&self, end_ms: u64, now_ms: u64) -> (u64, u64) {
        let grace = u64::try_from(self.expiry_grace.as_millis()).unwrap_or(u64::MAX);
        let ttl = end_ms.saturating_sub(now_ms).saturating_add(grace).clamp(1, MAX_TTL_MS);
        (ttl, end_ms.saturating_add(grace))
    }

    /// Runs `script`, sending it once more if the connection turned out dead before an answer
    /// (after a Lambda sandbox was frozen, a failover, an idle timeout): the client reconnects
    /// on such an error but does not resend. Resending is safe because each script is
    /// idempotent for its owner: a claim that landed meets its own record, a completion its own
    /// completed record, a release the record gone; and a first send that runs late, after its
    /// attempt released its record, meets its owner's fence (see [`RedisStore`] on resends).
    /// Answers whether the answer is a resend's.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        what: &str,
        script: &redis::ScriptInvocation<'_>,
    ) -> Result<(T, bool), StoreError> {
        let mut tries = 0;
        loop {
            tries += 1;
            self.requests.fetch_add(1, Ordering::Relaxed);
            match script.invoke_async(&mut self.connection.clone()).await {
                Ok(value) => return Ok((value, tries > 1)),
                Err(e) if tries == 1 && (e.is_connection_dropped() || e.is_io_error()) => {
                    tracing::debug!(error = %e, "redis {what}: connection lost; sending once more");
                }
                Err(e) => return Err(store_error(what, e)),
            }
        }
    }
}

/// The first millisecond at which a record with this window no longer blocks a claim:
/// `expiration_s < now_ms / 1000` holds from `(expiration_s + 1) * 1000` on.
fn window_end_ms(expiration_s: u64) -> u64 {
    expiration_s.saturating_add(1).saturating_mul(1000)
}

/// Whether a hash field is a released owner's fence (`released:{owner}`, `released_until`; see
/// `lua/common.lua`), kept beside a record, not part of it.
fn is_fence(name: &[u8]) -> bool {
    name == b"released_until" || name.starts_with(b"released:")
}

/// A record from the flat field list `HGETALL` answers (or a script passes back).
fn parse(id: &str, fields: Vec<Vec<u8>>) -> Result<Record, StoreError> {
    let malformed = |what: &str| StoreError::new(StoreErrorKind::Malformed, format!("record {id}: {what}"));
    let (mut status, mut lease, mut expiration, mut hash, mut owner, mut response) =
        (None, None, None, None, None, None);
    let mut fields = fields.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        let value = String::from_utf8(value).map_err(|_| malformed("a field is not UTF-8"))?;
        match name.as_slice() {
            b"status" => status = Some(value),
            b"lease_expires_at" => lease = Some(value),
            b"expiration" => expiration = Some(value),
            b"payload_hash" => hash = Some(value),
            b"owner" => owner = Some(value),
            b"response" => response = Some(value),
            _ => {}
        }
    }
    let number = |field: Option<String>, name: &str| {
        field.and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| malformed(&format!("{name} missing or not a number")))
    };
    Ok(Record {
        id: id.to_owned(),
        status: status.as_deref().and_then(Status::parse).ok_or_else(|| malformed("status missing or unknown"))?,
        lease_expires_at_ms: number(lease, "lease_expires_at")?,
        expiration_s: number(expiration, "expiration")?,
        payload_hash: hash.ok_or_else(|| malformed("payload_hash missing"))?,
        owner: owner.ok_or_else(|| malformed("owner missing"))?,
        response,
    })
}

/// The claim script's answer: its code, the replaced (or blocking) record's fields, and those of
/// the record a run of takeovers began with.
type ClaimAnswer = (i64, Vec<Vec<u8>>, Vec<Vec<u8>>);

/// What the complete and release scripts answer, as a result.
fn verdict(id: &str, code: i64) -> Result<(), StoreError> {
    let fenced = |why: &str| Err(StoreError::new(StoreErrorKind::Fenced, format!("{id}: {why}")));
    match code {
        0 => Ok(()),
        1 => fenced("no record (released, or its key expired); not recreated"),
        2 => fenced("owned by another attempt"),
        3 => fenced("the lease ended; not completed"),
        5 => fenced("completed; a completed record is never released"),
        4 => Err(StoreError::new(StoreErrorKind::Malformed, format!("record {id}: unknown status or lease"))),
        other => Err(StoreError::new(StoreErrorKind::Other, format!("{id}: unexpected script answer {other}"))),
    }
}

impl Store for RedisStore {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        let end_ms = window_end_ms(record.expiration_s).max(record.lease_expires_at_ms);
        let (ttl, deadline) = self.expiry(end_ms, now_ms);
        let mut script = CLAIM.key(self.key(&record.id));
        script
            .arg(now_ms)
            .arg(now_ms / 1000)
            .arg(ttl)
            .arg(record.lease_expires_at_ms)
            .arg(record.expiration_s)
            .arg(&record.payload_hash)
            .arg(&record.owner)
            .arg(deadline);
        let ((code, old, first), _): (ClaimAnswer, _) = self.invoke("claim", &script).await?;
        if code == 3 {
            // A late copy of a claim whose attempt has released its record: nothing written.
            // No live caller sends one (owners are unique per attempt); its answer goes to a
            // connection given up on, and says the record is gone, as a release would leave it.
            return Err(StoreError::new(
                StoreErrorKind::Fenced,
                format!("{}: this owner released its record; a late copy of its claim writes nothing", record.id),
            ));
        }
        if code != 1 && code != 2 {
            return Ok(Claim::Exists(parse(&record.id, old)?));
        }
        // Written, or a resent claim that met its own record: what the write replaced.
        if old.is_empty() {
            return Ok(Claim::Acquired { replaced: None });
        }
        let first = if first.is_empty() { None } else { Some(parse(&record.id, first)) };
        match (parse(&record.id, old), first.transpose()) {
            (Ok(replaced), Ok(first)) => {
                let first = first.unwrap_or_else(|| replaced.clone());
                Ok(effectively_once::protocol::acquired(Some(replaced), Some(first)))
            }
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(id = %record.id, %error, "claimed over an unreadable record");
                Ok(Claim::AcquiredOverUnreadable)
            }
        }
    }

    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        let (ttl, deadline) = self.expiry(window_end_ms(completion.expiration_s), completion.now_ms);
        let mut script = COMPLETE.key(self.key(id));
        script
            .arg(owner)
            .arg(completion.now_ms)
            .arg(ttl)
            .arg(completion.expiration_s)
            .arg(if completion.response.is_some() { "1" } else { "0" })
            .arg(completion.response.unwrap_or(""))
            .arg(deadline);
        verdict(id, self.invoke("complete", &script).await?.0)
    }

    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        let grace = u64::try_from(self.expiry_grace.as_millis()).unwrap_or(u64::MAX);
        let mut script = RELEASE.key(self.key(id));
        script.arg(owner).arg(grace);
        let (code, resent): (i64, bool) = self.invoke("release", &script).await?;
        // The release script says 3 for a completed record; complete's 3 is a lease ended.
        match verdict(id, if code == 3 { 5 } else { code }) {
            // A resend that finds the record another attempt's, or completed, follows a first
            // send that may have landed (deleted the record, the answer lost with the connection)
            // before another delivery claimed the free key. The store cannot tell whether it did,
            // and need not: a release follows a failed handler, whose message is retried either
            // way, and this answer changes no record (the resend touched nothing, as the script
            // deletes only this owner's record). So it is success, as "already gone" is. The core
            // makes the same call for its own retries; this resend is hidden from it, which
            // would make it a first try's `Fenced`, `LeaseLost` for a release that landed.
            // Claim and complete resends need no such rule: each meets its own record.
            Err(error) if resent && error.kind() == StoreErrorKind::Fenced => {
                tracing::info!(key = %id, "a resent release found the record not ours: the first send may have landed");
                Ok(())
            }
            answer => answer,
        }
    }

    async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let fields: Vec<Vec<u8>> = redis::cmd("HGETALL")
            .arg(self.key(id))
            .query_async(&mut self.connection.clone())
            .await
            .map_err(|e| store_error("get", e))?;
        // A key that holds only the fences of released owners holds no record.
        if !fields.chunks(2).any(|field| !is_fence(&field[0])) {
            return Ok(None);
        }
        parse(id, fields).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_hides_passwords_only() {
        for (url, shown) in [
            ("rediss://user:hunter2@cache.example:6379", "rediss://user:REDACTED@cache.example:6379"),
            ("redis://:hunter2@127.0.0.1:6380/2", "redis://:REDACTED@127.0.0.1:6380/2"),
            ("redis://user@127.0.0.1:6380", "redis://user@127.0.0.1:6380"),
            ("redis://127.0.0.1:6380?protocol=resp3", "redis://127.0.0.1:6380?protocol=resp3"),
            ("redis+unix:///tmp/r.sock?user=u&pass=hunter2", "redis+unix:///tmp/r.sock?user=u&pass=REDACTED"),
            ("redis://u:hunter2@host:notaport", "<unparseable URL, hidden>"),
            ("hunter2", "<unparseable URL, hidden>"),
        ] {
            assert_eq!(redacted(url), shown, "{url}");
        }
    }

    #[test]
    fn prefixes_without_the_delimiter_only() {
        for good in ["idempotency", "a", "App-2_v1.x", "0"] {
            check_prefix(good).unwrap();
        }
        for bad in ["", ":", "idempotency:", "a:b", "a#b", "{tag}", "a b", "caf\u{e9}"] {
            assert_eq!(check_prefix(bad).unwrap_err().kind(), StoreErrorKind::Misconfigured, "{bad:?}");
        }
    }

    #[test]
    fn the_scripts_cap_the_ttl_as_the_store_does() {
        let line = format!("local MAX_TTL_MS = {MAX_TTL_MS}\n");
        assert!(include_str!("lua/common.lua").contains(&line), "{line}");
    }

    #[test]
    fn window_end_matches_the_claim_predicate() {
        let record = |expiration_s| Record {
            id: "a".into(),
            status: Status::Completed,
            lease_expires_at_ms: 0,
            expiration_s,
            payload_hash: "h".into(),
            owner: "o".into(),
            response: None,
        };
        let end = window_end_ms(100);
        assert!(record(100).blocks_claim_at(end - 1));
        assert!(!record(100).blocks_claim_at(end));
        assert_eq!(window_end_ms(u64::MAX / 2), u64::MAX);
    }

    #[test]
    fn parse_reads_every_field_and_refuses_a_malformed_one() {
        let fields = |pairs: &[(&str, &str)]| {
            pairs.iter().flat_map(|(k, v)| [k.as_bytes().to_vec(), v.as_bytes().to_vec()]).collect::<Vec<_>>()
        };
        let full = [
            ("status", "COMPLETED"),
            ("lease_expires_at", "5"),
            ("expiration", "6"),
            ("payload_hash", "v2:ab"),
            ("owner", "o"),
            ("response", "1"),
        ];
        let record = parse("x", fields(&full)).unwrap();
        assert_eq!((record.lease_expires_at_ms, record.expiration_s, record.response.as_deref()), (5, 6, Some("1")));
        let bad = parse("x", fields(&[("status", "DONE"), ("owner", "o")])).unwrap_err();
        assert_eq!(bad.kind(), StoreErrorKind::Malformed);
    }
}
