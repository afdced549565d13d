//! `AnyStore::from_env`: the store a handler runs on is chosen by `IDEMPOTENCY_STORE`.
//! The tests set the process's environment, so each holds `ENV` while it runs.

use effectively_once::{Config, Idempotency, Key, Outcome, Status, Store, StoreErrorKind};
use effectively_once_redis::testing::url as test_url;
use effectively_once_redis::AnyStore;
use serde_json::json;

/// Held by each test while it sets and reads the environment: tests run on parallel threads.
static ENV: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn run_twice(store: AnyStore) -> AnyStore {
    let idem = Idempotency::new(store, Config::default());
    let key = Key::new("any", &uuid::Uuid::new_v4().to_string()).unwrap();
    let first = idem.run(&key, &json!(1), || async { Ok::<_, std::io::Error>(1u32) }).await.unwrap();
    let second = idem.run(&key, &json!(1), || async { Ok::<_, std::io::Error>(2u32) }).await.unwrap();
    assert_eq!((first, second), (Outcome::Fresh(1), Outcome::Replayed(1)));
    assert_eq!(idem.store().get(key.as_str()).await.unwrap().unwrap().status, Status::Completed);
    idem.store().clone()
}

#[tokio::test]
async fn the_store_is_chosen_by_configuration() {
    let (dynamodb, _) = effectively_once_dynamodb::testing::fresh_store().await;
    let client = dynamodb.client().clone();
    let _env = ENV.lock().await;

    std::env::set_var("IDEMPOTENCY_STORE", "redis");
    std::env::set_var("IDEMPOTENCY_REDIS_URL", test_url());
    std::env::set_var("IDEMPOTENCY_REDIS_PREFIX", crate::common::unique_prefix("any"));
    let store = AnyStore::from_env(&client).await.unwrap();
    assert!(matches!(run_twice(store).await, AnyStore::Redis(_)));

    std::env::set_var("IDEMPOTENCY_STORE", "dynamodb");
    std::env::set_var("IDEMPOTENCY_TABLE", dynamodb.table());
    let store = AnyStore::from_env(&client).await.unwrap();
    assert!(matches!(run_twice(store).await, AnyStore::DynamoDb(_)));

    std::env::set_var("IDEMPOTENCY_STORE", "memcached");
    assert_eq!(AnyStore::from_env(&client).await.unwrap_err().kind(), StoreErrorKind::Misconfigured);
}

/// A configuration half done for Redis (its URL or prefix set, `IDEMPOTENCY_STORE` not) is
/// `Misconfigured`, saying what to set, and does not run on DynamoDB while other functions,
/// configured in full, keep their records in Redis. An empty choice is no choice either.
#[tokio::test]
async fn a_redis_url_without_the_store_choice_is_misconfigured() {
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build(),
    );
    let _env = ENV.lock().await;
    std::env::set_var("IDEMPOTENCY_TABLE", "a-table");
    std::env::remove_var("IDEMPOTENCY_STORE");
    std::env::remove_var("IDEMPOTENCY_REDIS_PREFIX");
    std::env::set_var("IDEMPOTENCY_REDIS_URL", test_url());
    let error = AnyStore::from_env(&client).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Misconfigured, "{error}");
    assert!(error.to_string().contains("set IDEMPOTENCY_STORE=redis"), "{error}");

    std::env::remove_var("IDEMPOTENCY_REDIS_URL");
    std::env::set_var("IDEMPOTENCY_REDIS_PREFIX", "payments");
    let error = AnyStore::from_env(&client).await.unwrap_err();
    assert!(error.to_string().contains("IDEMPOTENCY_REDIS_PREFIX is set"), "{error}");

    std::env::remove_var("IDEMPOTENCY_REDIS_PREFIX");
    std::env::set_var("IDEMPOTENCY_STORE", "");
    assert_eq!(AnyStore::from_env(&client).await.unwrap_err().kind(), StoreErrorKind::Misconfigured);

    // Unset, with no Redis setting: DynamoDB, on the table named.
    std::env::remove_var("IDEMPOTENCY_STORE");
    let store = AnyStore::from_env(&client).await.unwrap();
    assert!(matches!(&store, AnyStore::DynamoDb(table) if table.table() == "a-table"), "{store:?}");
}

/// An `IDEMPOTENCY_STORE` that is not UTF-8 is `Misconfigured`, like anything but
/// `dynamodb`/`redis`/unset: read as unset, the handler would silently run on DynamoDB while the
/// functions that read `redis` keep their records in Redis, so the same message would be
/// claimed once in each store.
#[cfg(unix)]
#[tokio::test]
async fn a_store_choice_that_is_not_utf8_is_misconfigured() {
    use std::os::unix::ffi::OsStrExt;

    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    let _env = ENV.lock().await;
    std::env::set_var("IDEMPOTENCY_TABLE", "a-table");
    std::env::set_var("IDEMPOTENCY_STORE", std::ffi::OsStr::from_bytes(b"redis\xff"));
    let chosen = AnyStore::from_env(&client).await;
    assert!(matches!(&chosen, Err(error) if error.kind() == StoreErrorKind::Misconfigured), "{chosen:?}");
}
