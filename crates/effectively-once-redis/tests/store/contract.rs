//! The store contract suite, against a real Redis (the local one, or `REDIS_URL`).

async fn make() -> effectively_once_redis::RedisStore {
    crate::common::fresh_store("contract").await
}

effectively_once::store_contract_tests!(make);
