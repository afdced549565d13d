//! Valkey/Redis store for the `effectively-once` crate: claim, complete and release are each one
//! Lua script the server runs atomically, with the DynamoDB store's semantics, held to the same
//! store contract suite.
//!
//! ```no_run
//! use effectively_once::{Config, Idempotency, Key};
//! use effectively_once_redis::RedisStore;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // ElastiCache with in-transit encryption and an AUTH user: rediss://user:password@host:6379
//! let store = RedisStore::connect("redis://127.0.0.1:6380", "idempotency").await?;
//! let idempotency = Idempotency::new(store, Config::default());
//! let key = Key::new("payments", "pay_0001")?;
//! let outcome = idempotency
//!     .run(&key, &serde_json::json!({"amount_cents": 1250}), || async {
//!         Ok::<_, std::io::Error>(String::from("posted"))
//!     })
//!     .await?;
//! println!("replayed: {}", outcome.is_replay());
//! # Ok(())
//! # }
//! ```
//!
//! # The record protocol on Redis
//!
//! 1. **Claim** (`lua/claim.lua`): `HGETALL`; a claim by an owner that released its record (a
//!    late copy of its claim) writes nothing; if a record blocks at the caller's clock (its
//!    window not ended, and completed or in progress within its lease) return it; else replace
//!    it (`HDEL`, `HSET`, `PEXPIRE`) and return the record it replaced.
//! 2. **Complete** (`lua/complete.lua`): only the owner, only in progress, only within the lease
//!    (`lease_expires_at >= now`); a record the owner already completed answers success
//!    unchanged; a missing record is never recreated.
//! 3. **Release** (`lua/release.lua`): deletes the owner's in-progress record, leaving a fence of
//!    that owner until its lease's end plus the grace; a missing one is released already; a
//!    completed one is never deleted.
//!
//! What Redis does not give, next to DynamoDB (no transaction with DynamoDB effects, durability
//! on failover), is in `docs/redis.md`.
//!
//! # Rust version and your Cargo.toml
//!
//! Rust 1.85 or newer; with the `dynamodb` feature, 1.94.1 (the AWS SDK's), and your program turns
//! on the SDK's behaviour version, HTTP client and runtime, as for `effectively-once-dynamodb`. See
//! `docs/packaging.md` in the repository.
// docs.rs (nightly, `--cfg docsrs`): each feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

#[cfg(feature = "dynamodb")]
mod any;
mod error;
mod store;

#[cfg(feature = "dynamodb")]
pub use crate::any::{AnyStore, STORE_ENV, TABLE_ENV};
pub use crate::error::store_error_kind;
pub use crate::store::{Builder, RedisStore, DEFAULT_EXPIRY_GRACE, DEFAULT_KEY_PREFIX, PREFIX_ENV, URL_ENV};

/// The local Redis the project's scripts start (`infra/local/redis.sh`, `make local-redis-up`)
/// on its default port.
pub const LOCAL_URL: &str = "redis://127.0.0.1:6380";

/// The URL tests and the bench use: `REDIS_URL` as given, else the project's local Redis on
/// `127.0.0.1:$LOCAL_REDIS_PORT` (6380).
///
/// When nothing listens on that port, the first call in the process starts it with the
/// checkout's `infra/local/redis.sh ensure` (a lock per port, so test binaries running at once
/// start one server), and leaves it running for the next test binary and the next run
/// (`make local-redis-down` stops it).
///
/// # Panics
///
/// With one line naming the command to run, when no local Redis answers and none can be
/// started (the script failed, or this crate was not built from a checkout of the project).
pub fn test_url() -> String {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return url;
    }
    static LOCAL: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    match LOCAL.get_or_init(start_local_redis) {
        Ok(url) => url.clone(),
        Err(line) => panic!("{line}"),
    }
}

/// The local Redis's URL once something listens on its port, starting it when nothing does.
fn start_local_redis() -> Result<String, String> {
    let port: u16 = match std::env::var("LOCAL_REDIS_PORT") {
        Ok(port) => port.parse().map_err(|_| format!("LOCAL_REDIS_PORT={port} is not a port"))?,
        Err(_) => 6380,
    };
    let url = format!("redis://127.0.0.1:{port}");
    let timeout = std::time::Duration::from_secs(2);
    let listening = || std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout);
    if listening().is_ok() {
        return Ok(url);
    }
    // Present when this crate is built from a checkout (a path dependency), not from crates.io.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/local/redis.sh");
    if !script.is_file() {
        return Err(format!(
            "no local Redis at {url}: start one (`make local-redis-up` in an effectively-once checkout) or set REDIS_URL"
        ));
    }
    // Its progress (an install, the log's path) goes to the test's stderr.
    let status = std::process::Command::new(&script)
        .arg("ensure")
        .env("LOCAL_REDIS_PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .status();
    let failed = match status {
        Ok(status) if status.success() && listening().is_ok() => return Ok(url),
        Ok(status) => format!("`{} ensure` failed ({status})", script.display()),
        Err(error) => format!("{} did not run ({error})", script.display()),
    };
    Err(format!(
        "no local Redis at {url} and {failed}: run `make local-redis-up` (LOCAL_REDIS_PORT={port}) or set REDIS_URL"
    ))
}
