//! [`RedisStore`]: records as Redis hashes, each change one Lua script run atomically by the server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use effectively_once::StoreError;
use redis::aio::ConnectionManager;

// The store itself and its accessors are here; how one is made (the builder, the key prefix's
// rules) is in `builder`, and the `Store` implementation (the scripts, their arguments and
// answers) in `scripts`.
mod builder;
mod scripts;

use builder::check_prefix;
pub use builder::Builder;

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

impl RedisStore {
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
}
