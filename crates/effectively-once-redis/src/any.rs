//! [`AnyStore`]: DynamoDB or Redis, chosen by configuration at start-up (feature `dynamodb`).

use effectively_once::{Claim, Completion, Record, Store, StoreError, StoreErrorKind};
use effectively_once_dynamodb::DynamoDbStore;

use crate::{RedisStore, PREFIX_ENV, URL_ENV};

/// The environment variable that chooses the store: `dynamodb` (the default) or `redis`.
pub const STORE_ENV: &str = "IDEMPOTENCY_STORE";
/// The environment variable naming the DynamoDB table (the binaries' `IDEMPOTENCY_TABLE`).
pub const TABLE_ENV: &str = "IDEMPOTENCY_TABLE";

/// Either store, so one handler binary runs on the one its configuration names.
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// Records in a DynamoDB table.
    DynamoDb(DynamoDbStore),
    /// Records in Valkey or Redis.
    Redis(RedisStore),
}

impl AnyStore {
    /// The store [`STORE_ENV`] names: `dynamodb` (or unset) is a [`DynamoDbStore`] on `client`
    /// and the table in [`TABLE_ENV`]; `redis` (or `valkey`, in any case) is
    /// [`RedisStore::from_env`]. Anything else (empty, or not UTF-8, included), or a missing
    /// table or URL, is `Misconfigured`; so is [`STORE_ENV`] unset while [`URL_ENV`] or
    /// [`PREFIX_ENV`] is set: a configuration half done for Redis must not run on DynamoDB.
    pub async fn from_env(client: &aws_sdk_dynamodb::Client) -> Result<AnyStore, StoreError> {
        let misconfigured = |message: String| StoreError::new(StoreErrorKind::Misconfigured, message);
        // Every value is read strictly: functions that read one setting differently keep their
        // records in two stores, and each claims the same message once.
        let choice = match std::env::var_os(STORE_ENV) {
            None => {
                if let Some(set) = [URL_ENV, PREFIX_ENV].into_iter().find(|name| std::env::var_os(name).is_some()) {
                    return Err(misconfigured(format!(
                        "{set} is set but {STORE_ENV} is not: set {STORE_ENV}=redis to keep records in Redis, \
                         or unset {set} to keep them in DynamoDB"
                    )));
                }
                String::from("dynamodb")
            }
            Some(value) => value.into_string().map_err(|value| {
                misconfigured(format!("{STORE_ENV}={value:?} is not UTF-8: expected dynamodb or redis"))
            })?,
        };
        match choice.to_ascii_lowercase().as_str() {
            "dynamodb" => {
                let table = std::env::var(TABLE_ENV)
                    .map_err(|_| misconfigured(format!("{TABLE_ENV} is not set, or not UTF-8")))?;
                Ok(AnyStore::DynamoDb(DynamoDbStore::new(client.clone(), table)))
            }
            "redis" | "valkey" => Ok(AnyStore::Redis(RedisStore::from_env().await?)),
            _ => Err(misconfigured(format!("{STORE_ENV}={choice:?}: expected dynamodb or redis"))),
        }
    }
}

impl Store for AnyStore {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        match self {
            AnyStore::DynamoDb(store) => store.claim(record, now_ms).await,
            AnyStore::Redis(store) => store.claim(record, now_ms).await,
        }
    }
    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        match self {
            AnyStore::DynamoDb(store) => store.complete(id, owner, completion).await,
            AnyStore::Redis(store) => store.complete(id, owner, completion).await,
        }
    }
    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        match self {
            AnyStore::DynamoDb(store) => store.release(id, owner).await,
            AnyStore::Redis(store) => store.release(id, owner).await,
        }
    }
    async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
        match self {
            AnyStore::DynamoDb(store) => store.get(id).await,
            AnyStore::Redis(store) => store.get(id).await,
        }
    }
}
