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
//! Also here: [`Key::hashed`] keys on an id the key alphabet refuses (an S3 object key, an
//! email address, a struct of several fields) by the SHA-256 of its canonical JSON;
//! [`Idempotency::wrap`] makes any async function idempotent; `layer::IdempotencyLayer`
//! (feature `tower`) does the same for any tower `Service`, a Lambda handler included;
//! [`CachedStore`] answers duplicates from memory; [`Config::with_payload_fields`] validates selected
//! fields only; [`Config::on_replay`] and [`Outcome::Replayed`] tell replays apart;
//! [`Config::from_env`] reads `POWERTOOLS_IDEMPOTENCY_DISABLED`; [`Idempotency::get`] reads a
//! key's stored answer ([`Lookup`]); [`outbound`] keys downstream calls with the record's own
//! [`Key::idempotency_key`] and says which provider answers to store ([`outbound::disposition`]).
//! Each option of Powertools' idempotency utility and its counterpart here:
//! [Coming from Powertools](https://github.com/effectively-once/effectively-once/blob/main/docs/powertools.md).
//!
//! # The record protocol
//!
//! One [`Record`] per [`Key`], and three steps, each a conditional write that any [`Store`] can
//! do (`effectively-once-dynamodb` documents the DynamoDB condition expressions and the item
//! schema):
//!
//! 1. **Claim** writes the record [`Status::InProgress`] with a fresh owner token, on condition
//!    that no live record holds the key: none at all, one past its dedup window, or one in
//!    progress whose lease has ended (its attempt died). When the condition fails, the store
//!    returns the blocking record with no second request, and it says which case it is:
//!    *completed* with the same payload hash is a replay (its stored response is returned), *in
//!    progress* is a retryable error ([`ErrorKind::InProgress`]), another payload hash is *key
//!    reused* ([`ErrorKind::KeyReused`], permanent). A claim never overwrites a record of its
//!    own owner token: a claim whose answer was lost is sent again and meets its own record,
//!    which keeps, while in progress, what the claim replaced, so the retry is answered as the
//!    lost answer would have been ([`Attempt::what_it_replaced`]). A record in progress whose
//!    attempt had itself taken the key over passes on the record that run of takeovers began
//!    with ([`Replaced::first`]). The steps are pure functions in [`protocol`], which
//!    [`InMemoryStore`] applies and a model checker explores (`apps/payments/model`, docs/model.md).
//! 2. **Run** the handler, bounded by its lease: once the lease ends the handler is dropped at
//!    its next `.await` (as a crash would be) and its result is not recorded; `run` returns
//!    [`ErrorKind::LeaseLost`] (retryable), never a fresh success. So no other attempt runs
//!    while a lease lasts, and a handler's effects must survive being cut off like a crash (what
//!    a handler may assume is under [`Idempotency::run`]).
//! 3. **Complete**: only the attempt that claimed the record (its *owner*), only while the record
//!    is in progress and the lease lasts, stores the response and restarts the dedup window; a
//!    lost completion answer is retried, and a retry that finds its own completed record counts
//!    as done. When the handler fails, **release** deletes the record so a retry runs again, on
//!    the same owner condition: a completed record is never deleted, and an attempt whose key
//!    was taken over is refused (*lease lost*) instead of touching the newer record.
//!
//! Errors say whether to retry without string matching: [`Error::retry`], by [`ErrorKind`],
//! gives the one classification ([`Retry`]: now, in progress elsewhere, after a fix, never)
//! that the store's errors and the drivers' record errors share. A handler's own error releases the record and comes back as
//! [`RunError::Handler`]; a business rejection that duplicates must see again belongs in the
//! `Ok` response, where it is stored like any other.
//!
//! # The disable switch
//!
//! `POWERTOOLS_IDEMPOTENCY_DISABLED` (or `IDEMPOTENCY_DISABLED`) set to `true` turns off
//! [`Idempotency::run`] and what is built on it (`wrap`, the tower layer): handlers run on every
//! delivery. It never turns off a ledger post's or an email marker's once-only condition (the
//! two-phase `begin`/`complete` API and the effects crate ignore it), and the shipped functions,
//! which run only those, warn at cold start that it changes nothing there. See
//! [`Config::with_disabled`].
//!
//! # Rust version
//!
//! Rust 1.85 or newer. No AWS SDK, and no runtime chosen: `tokio` with `sync` and `time` only
//! (feature `contract` adds `macros` and `rt-multi-thread` for its tests). See `docs/packaging.md`
//! in the repository.
// docs.rs (nightly, `--cfg docsrs`): each feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
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
#[cfg(feature = "test-util")]
pub mod local_service;
mod lookup;
mod memory;
pub mod outbound;
pub mod protocol;
mod record;
pub mod redact;
mod store;

#[cfg(any(test, feature = "contract"))]
pub mod contract;
#[cfg(any(test, feature = "contract"))]
pub mod schedules;

pub use crate::cache::{CachedStore, RecordCache, DEFAULT_CAPACITY};
pub use crate::clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use crate::config::{
    Config, PayloadSelector, ReplayHook, DEFAULT_DEDUP_WINDOW, DEFAULT_LEASE, DEFAULT_MAX_RESPONSE_BYTES, DISABLED_VARS,
};
pub use crate::error::{Error, ErrorChain, ErrorKind, Retry, RunError};
pub use crate::function::IdempotentFn;
pub use crate::hash::{HashVersion, PayloadHash, PAYLOAD_HASH_VERSION};
pub use crate::idempotency::{
    epoch_deadline_ms, Attempt, Begin, Idempotency, Outcome, Replaced, PLAUSIBLE_DEADLINE_MS,
};
pub use crate::key::{Key, KeyError, KeyErrorKind, KeyPart};
pub use crate::lookup::Lookup;
pub use crate::memory::InMemoryStore;
pub use crate::record::{Record, Status};
pub use crate::store::{Claim, Completion, Store, StoreError, StoreErrorKind};
