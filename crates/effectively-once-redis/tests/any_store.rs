//! `AnyStore::from_env`: the store a handler runs on is chosen by `IDEMPOTENCY_STORE`.
//! One test, as it sets the process's environment.

mod common;

use effectively_once::{Config, Idempotency, Key, Outcome, Status, Store, StoreErrorKind};
use effectively_once_redis::{test_url, AnyStore};
use serde_json::json;

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

    std::env::set_var("IDEMPOTENCY_STORE", "redis");
    std::env::set_var("IDEMPOTENCY_REDIS_URL", test_url());
    std::env::set_var("IDEMPOTENCY_REDIS_PREFIX", common::unique_prefix("any"));
    let store = AnyStore::from_env(&client).await.unwrap();
    assert!(matches!(run_twice(store).await, AnyStore::Redis(_)));

    std::env::set_var("IDEMPOTENCY_STORE", "dynamodb");
    std::env::set_var("IDEMPOTENCY_TABLE", dynamodb.table());
    let store = AnyStore::from_env(&client).await.unwrap();
    assert!(matches!(run_twice(store).await, AnyStore::DynamoDb(_)));

    std::env::set_var("IDEMPOTENCY_STORE", "memcached");
    assert_eq!(AnyStore::from_env(&client).await.unwrap_err().kind(), StoreErrorKind::Misconfigured);
}
