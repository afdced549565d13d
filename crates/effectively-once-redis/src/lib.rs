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
#[cfg(feature = "test-util")]
pub mod testing;

#[cfg(feature = "dynamodb")]
pub use crate::any::{AnyStore, STORE_ENV, TABLE_ENV};
pub use crate::error::store_error_kind;
pub use crate::store::{Builder, RedisStore, DEFAULT_EXPIRY_GRACE, DEFAULT_KEY_PREFIX, PREFIX_ENV, URL_ENV};

/// The local Redis the project's scripts start (`infra/local/redis.sh`, `make local-redis-up`)
/// on its default port. It asks for a password: connect with the URL `infra/local/redis.sh url`
/// prints, which is this one with `default:PASSWORD@` in it.
pub const LOCAL_URL: &str = "redis://127.0.0.1:6380";
