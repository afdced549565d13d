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
#![warn(missing_docs)]

mod commit;
mod counter;
mod error;
mod item;
mod store;
#[cfg(feature = "test-util")]
pub mod testing;

pub use crate::commit::{
    carried, carried_from_item, item_size, Commit, Committed, Placement, Write, WriteUnits, NEVER_EXPIRES,
};
pub use crate::counter::RequestCounter;
pub use crate::error::classify;
pub use crate::item::{attr, from_item, to_item};
pub use crate::store::{create_table, wait_until_active, DynamoDbStore, TABLE_ACTIVE_WAIT};
