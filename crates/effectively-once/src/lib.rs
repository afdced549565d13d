//! Run a handler, and each of its side effects, once per business event.
//!
//! Brokers deliver at least once. This crate turns a duplicate delivery into a replay of the
//! first delivery's stored result, using one idempotency [`Record`] per business key in a
//! pluggable [`Store`]. It knows nothing of AWS: `effectively-once-dynamodb` supplies the DynamoDB
//! store, and [`InMemoryStore`] serves tests and single-process use.
//!
//! ```
//! use effectively_once::{Config, Idempotency, InMemoryStore, Key, Outcome};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let idempotency = Idempotency::new(InMemoryStore::new(), Config::default());
//! let key = Key::new("payments", "pay_0001")?;
//! let payload = serde_json::json!({"event_id": "pay_0001", "amount_cents": 1250});
//!
//! let first = idempotency
//!     .run(&key, &payload, || async { Ok::<_, std::io::Error>(1250) })
//!     .await?;
//! assert!(matches!(first, Outcome::Fresh(1250)));
//!
//! // A duplicate delivery: the handler does not run, the stored response comes back.
//! let again = idempotency
//!     .run(&key, &payload, || async { Ok::<_, std::io::Error>(unreachable!()) })
//!     .await?;
//! assert!(matches!(again, Outcome::Replayed(1250)));
//! # Ok(())
//! # }
//! ```
//!
//! The protocol is *claim, run, complete*: one conditional write claims the key (or reports the
//! existing record, which tells replay, in progress and key reuse apart), the handler runs, and
//! an owner-fenced write completes the record, or deletes it when the handler fails so a retry
//! runs again. Only the attempt that claimed a record (its *owner*) may complete or release it,
//! and it completes only within its lease: a handler that outruns its lease is cut off and its
//! result is not recorded, as if it had crashed (what a handler may assume is under
//! [`Idempotency::run`]).
//!
//! Also here: [`Idempotency::wrap`] makes any async function idempotent; `layer::IdempotencyLayer`
//! (feature `tower`) does the same for any tower `Service`, a Lambda handler included;
//! [`CachedStore`] answers duplicates from memory; [`Config::payload_fields`] validates selected
//! fields only; [`Config::on_replay`] and [`Outcome::Replayed`] tell replays apart;
//! [`Config::from_env`] reads `POWERTOOLS_IDEMPOTENCY_DISABLED`; [`outbound`] keys downstream
//! calls.
//!
//! # The disable switch
//!
//! `POWERTOOLS_IDEMPOTENCY_DISABLED` (or `IDEMPOTENCY_DISABLED`) set to `true` turns off
//! [`Idempotency::run`] and what is built on it (`wrap`, the tower layer): handlers run on every
//! delivery. It never turns off a ledger post's or an email marker's once-only condition (the
//! two-phase `begin`/`complete` API and the effects crate ignore it), and the shipped functions,
//! which run only those, warn at cold start that it changes nothing there. See
//! [`Config::disabled`].
#![warn(missing_docs)]

mod cache;
mod clock;
mod config;
mod error;
mod function;
mod hash;
mod idempotency;
mod key;
#[cfg(feature = "tower")]
pub mod layer;
mod memory;
pub mod outbound;
mod record;
mod store;

#[cfg(any(test, feature = "contract"))]
pub mod contract;

pub use crate::cache::{CachedStore, DEFAULT_CAPACITY};
pub use crate::clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use crate::config::{Config, PayloadSelector, ReplayHook, DISABLED_VARS};
pub use crate::error::{Error, ErrorKind, RunError};
pub use crate::function::Idempotent;
pub use crate::hash::{HashVersion, PayloadHash, PAYLOAD_HASH_VERSION};
pub use crate::idempotency::{Attempt, Begin, Idempotency, Outcome};
pub use crate::key::{Key, KeyError, KeyErrorKind, KeyPart};
pub use crate::memory::InMemoryStore;
pub use crate::record::{Record, Status};
pub use crate::store::{Claim, Completion, Store, StoreError, StoreErrorKind};
