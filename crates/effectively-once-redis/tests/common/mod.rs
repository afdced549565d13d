//! Shared by the test binaries: a store on the local Redis under a prefix no other test uses,
//! and a claim's record at a fixed time.
#![allow(dead_code)] // each test binary uses its part

use std::sync::atomic::{AtomicU64, Ordering};

use effectively_once::{Key, Record, Status};
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

/// The tests' fixed time of day, in milliseconds since the epoch.
pub const NOW: u64 = 1_800_000_000_000;

/// A claim of `key` by `owner` at `NOW` for a payload hashed `hash`: a 30 s lease, an hour's
/// window.
pub fn claim_record(key: &Key, owner: &str, hash: &str) -> Record {
    Record {
        id: key.as_str().to_owned(),
        status: Status::InProgress,
        lease_expires_at_ms: NOW + 30_000,
        expiration_s: NOW / 1000 + 3600,
        payload_hash: hash.into(),
        owner: owner.into(),
        response: None,
    }
}
