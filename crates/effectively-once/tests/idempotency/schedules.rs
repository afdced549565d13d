//! Property tests: the schedules suite (`effectively_once::schedules`: deliveries, duplicates,
//! reorderings, concurrent consumers, lease expiries, crashes, handlers that outrun their lease
//! and lost completion answers) against the in-memory store, tokio's time paused.

use effectively_once::InMemoryStore;

async fn make() -> InMemoryStore {
    InMemoryStore::default()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap()
}

effectively_once::store_schedule_tests!(make, runtime, cases = 256);
