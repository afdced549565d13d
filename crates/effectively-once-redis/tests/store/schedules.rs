//! The core's property tests (`effectively_once::schedules`) against the Redis store on a real
//! server: generated schedules of deliveries, duplicates, reorderings, concurrent consumers,
//! lease expiries, crashes, handlers that outrun their lease and lost completion answers, with
//! the invariants checked after every step. Each run gets a prefix of its own; the runtime has
//! I/O and real time (the lease is on the suite's `ManualClock`; tokio's paused clock would fire
//! the client's response timeout); fewer cases than the core's (`PROPTEST_CASES` overrides).

use effectively_once_redis::RedisStore;

async fn make() -> RedisStore {
    crate::common::fresh_store("schedule").await
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// 64 schedules, or `PROPTEST_CASES`.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64)
}

effectively_once::store_schedule_tests!(make, runtime, cases = cases());
