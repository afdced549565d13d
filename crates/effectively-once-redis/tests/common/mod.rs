//! Shared by the tests: a store on the local Redis under a prefix no other test uses.
#![allow(dead_code)] // each test binary uses its part

use std::sync::atomic::{AtomicU64, Ordering};

use effectively_once_redis::testing::url as test_url;
use effectively_once_redis::RedisStore;

/// A prefix no other test in any process uses: tests share one server and run in parallel.
/// `name` is from the prefix's character set, `[A-Za-z0-9._-]`.
pub fn unique_prefix(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let sequence = NEXT.fetch_add(1, Ordering::SeqCst);
    format!("test.{name}.{}.{}.{sequence}", std::process::id(), uuid::Uuid::new_v4().simple())
}

/// A store on the test server (`REDIS_URL`, else the local one). Panics with the way out when
/// the server does not answer: under `make test` a missing server is a failure, not a skip.
pub async fn fresh_store(name: &str) -> RedisStore {
    let url = test_url();
    match RedisStore::connect(&url, &unique_prefix(name)).await {
        Ok(store) => store,
        Err(error) => panic!(
            "cannot reach Redis at {url}: {error} (is the local Redis up? `make local-redis-up`, or set REDIS_URL)"
        ),
    }
}

/// `url` with `user:password` as its credentials, in place of any it has.
pub fn with_credentials(url: &str, credentials: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let address = rest.rsplit_once('@').map_or(rest, |(_, address)| address);
    format!("{scheme}://{credentials}@{address}")
}
