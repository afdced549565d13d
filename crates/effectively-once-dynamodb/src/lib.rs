//! DynamoDB store for the `effectively-once` crate: one conditional `PutItem` claims a key and, when
//! it fails, returns the blocking record (`ALL_OLD`), so a duplicate costs one request.
//!
//! ```no_run
//! use effectively_once::{Config, Idempotency, Key};
//! use effectively_once_dynamodb::DynamoDbStore;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
//! let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), "idempotency");
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
//! # The record protocol on DynamoDB
//!
//! [`DynamoDbStore`] carries out the core crate's
//! [claim, run, complete](mod@effectively_once#the-record-protocol) as three conditional writes on
//! one item per key:
//!
//! 1. **Claim**: `PutItem` of the record `IN_PROGRESS` with a fresh owner token, on condition
//!    `attribute_not_exists(id)`, with `ReturnValuesOnConditionCheckFailure=ALL_OLD`: a failed
//!    claim returns the record that blocked it, so replay, in progress and key reuse are told
//!    apart with no second request. A record past its dedup window, or in progress past its
//!    lease (`expiration < :now_s OR (status = IN_PROGRESS AND lease_expires_at < :now_ms)`), is
//!    taken over by a second `PutItem` on condition that the item is still the one read (its
//!    `owner` and `status`) and still claimable. The claimed item keeps what it replaced
//!    (`replaced_*`, NULL for a free key) and the record its run of takeovers began with
//!    (`first_*`) until completion: a claim whose answer was lost is sent again by the SDK,
//!    meets its own record, and learns from them what its first write replaced, so a takeover
//!    stays visible.
//! 2. **Complete**: `UpdateItem` on condition
//!    `owner = :owner AND status = IN_PROGRESS AND lease_expires_at >= :now_ms`, storing the
//!    response and restarting the dedup window.
//! 3. **Release** (the handler failed): `DeleteItem` on condition
//!    `attribute_not_exists(id) OR (owner = :owner AND status = IN_PROGRESS)`.
//!
//! What that costs per message, as [`RequestCounter`] counts it in the tests, is under
//! [`DynamoDbStore`]. [`CommitOnce::commit_once`] goes further for effects that are DynamoDB
//! items themselves: the record is written completed in the effect's own `TransactWriteItems`
//! (the writes typed, built in a closure: [`Tx`]), so a first delivery is one request and there
//! is no window between the effect and its record; [`CommitOnce::commit_batch`] does it for a
//! whole batch in one transaction. [`raw::Commit`] is the same at the level of SDK actions, sent
//! by [`DynamoDbStore::transact`].
//!
//! # When a write's condition fails
//!
//! A write's own condition (stock to take, funds to debit, an item that must not exist yet) is
//! how a handler refuses: the transaction is cancelled, nothing is written, and
//! [`Tx::otherwise`] says what that means for the write:
//!
//! - [`Otherwise::Answer`]: a business answer, recorded as the key's outcome, so a duplicate
//!   gets the same refusal even once the condition would pass;
//! - [`Otherwise::AnswerWith`]: the same, with writes of its own ([`Fallback`]: a backordered
//!   reservation beside the refused one) recorded in the answer's transaction, both or neither,
//!   and never again for a duplicate. Like `Answer`, two requests: the cancelled transaction
//!   decides, one more records;
//! - [`Otherwise::AlreadyApplied`], [`Otherwise::Recorded`]: the item shows the effect already.
//!
//! A write refused with no `otherwise` is an error of kind
//! [`ErrorKind::ConditionFailed`](effectively_once::ErrorKind::ConditionFailed) whose message
//! names the write (numbered from 0 in the order it was added), what it is and its table:
//! `the condition of write 1 (an Update of table stock) failed for reserve#o-1: no
//! Tx::otherwise answers it; nothing was written`. Permanent: each delivery meets it until the
//! code gives the condition an answer.
//!
//! ```no_run
//! use aws_sdk_dynamodb::types::AttributeValue;
//! use effectively_once::{Config, Idempotency, Key};
//! use effectively_once_dynamodb::{CommitOnce, DynamoDbStore, Fallback, Otherwise, Table};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! enum Reserved { Reserved, Backordered }
//! #[derive(Serialize)]
//! struct Row<'a> { id: &'a str, quantity: i64 }
//!
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let idempotency = Idempotency::new(DynamoDbStore::new(client, "idempotency"), Config::default());
//! let stock = Table::new("stock", "id");
//! let key = Key::new("reserve", "o-1")?;
//! idempotency
//!     .commit_once(&key, "o-1", |tx| {
//!         let take = tx.update(&stock, &serde_json::json!({"id": "sku#1"}), |u| {
//!             u.update_expression("SET available = available - :q")
//!                 .condition_expression("available >= :q")
//!                 .expression_attribute_values(":q", AttributeValue::N("3".into()))
//!         })?;
//!         tx.put(&stock, &Row { id: "reservation#o-1", quantity: 3 })?;
//!         let backorders = stock.clone();
//!         tx.otherwise(take, move |_| Otherwise::AnswerWith {
//!             answer: Reserved::Backordered,
//!             fallback: Fallback::new().put(&backorders, &Row { id: "backorder#o-1", quantity: 3 }),
//!         });
//!         Ok(Reserved::Reserved)
//!     })
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The item
//!
//! The table has the partition key `id` (S) and TTL on `expiration` ([`create_table`] for tests
//! and the local AWS; `apps/payments/template.json` deploys it). The attribute names are in [`attr`].
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `id` | S, partition key | `{prefix}#{business key}` ([`Key`](effectively_once::Key)); the prefix names the handler or effect |
//! | `status` | S | `IN_PROGRESS` or `COMPLETED` (a rejected business outcome is a completed record too) |
//! | `lease_expires_at` | N, ms since epoch | end of the in-progress lease: `min(now + lease, Lambda deadline)`; default lease 15 min |
//! | `expiration` | N, s since epoch | the table's TTL attribute and the dedup window: default 14 days, SQS's longest retention, so a DLQ replay is still a duplicate |
//! | `payload_hash` | S | `v2:` and the SHA-256 (hex) of the payload's RFC 8785 canonical JSON (JSON Canonicalization Scheme: `1`, `1.0` and `1e0`, key order, whitespace and escapes hash the same), or of selected JSON pointers; compared under the version the record carries, so bare hex (version 1, written before versions were tagged) still matches its payload ([`HashVersion`](effectively_once::HashVersion)) |
//! | `owner` | S | the claiming attempt's token; only it may complete or release |
//! | `response` | S | the stored response as JSON; kept up to 380,000 bytes (DynamoDB items stop at 400 KB) |
//! | `replaced_status`, `replaced_lease_expires_at`, `replaced_expiration`, `replaced_payload_hash`, `replaced_owner`, `replaced_response` | as above | while in progress only: the record the claim replaced (`replaced_status` NULL when the key was free); removed at completion |
//! | `first_status`, `first_lease_expires_at`, ... `first_response` | as above | while in progress only, after a run of takeovers: the record the run began with; removed at completion |
//!
//! # Rust version and your Cargo.toml
//!
//! Rust 1.94.1 or newer (the AWS SDK's). This crate turns on no SDK behaviour version, HTTP client
//! or async runtime: your program does, on its `aws-config` and `aws-sdk-dynamodb` (`features =
//! ["behavior-version-latest", "default-https-client", "rt-tokio"]` with `default-features =
//! false`, or the SDK's default features and `BehaviorVersion::latest()` passed to
//! `aws_config::load_defaults`). See `docs/packaging.md` in the repository.
// docs.rs (nightly, `--cfg docsrs`): each feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod batch;
mod commit_once;
mod counter;
mod error;
mod item;
mod otherwise;
pub mod raw;
mod read;
mod stalled;
mod store;
mod sweep;
#[cfg(feature = "test-util")]
pub mod testing;
mod transaction;
mod tx;

pub use crate::batch::{BatchWrites, Decided, Member, Observed, MAX_ROUNDS};
pub use crate::commit_once::CommitOnce;
pub use crate::counter::RequestCounter;
pub use crate::error::store_error as classify_sdk_error;
pub use crate::item::{attr, carried, record_carried_by, NEVER_EXPIRES};
pub use crate::otherwise::{Fallback, Otherwise};
pub use crate::read::{Consistency, MAX_BATCH_GET_KEYS};
#[cfg(feature = "sdk-defaults")]
pub use crate::stalled::sdk_defaults;
pub use crate::stalled::stalled_stream_protection;
pub use crate::store::{create_table, wait_until_active, DynamoDbStore, TABLE_ACTIVE_WAIT};
pub use crate::transaction::WriteUnits;
pub use crate::tx::{Item, Table, Tx, WriteId};
