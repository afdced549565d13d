//! `Idempotency::get` on DynamoDB (the local AWS, or `AWS_ENDPOINT_URL`): a key read through its
//! life, from the items `DynamoDbStore` writes.

use std::sync::Arc;
use std::time::Duration;

use effectively_once::{
    Begin, Config, Idempotency, Key, Lookup, ManualClock, Store as _, DEFAULT_DEDUP_WINDOW, DEFAULT_LEASE,
};
use effectively_once_dynamodb::testing::fresh_store;

/// The stored answer, typed: a tuple stands in for a user's struct.
type Confirmation = (String, i64);

#[tokio::test]
async fn get_reads_absent_in_progress_completed_stalled_and_expired() {
    let (store, requests) = fresh_store().await;
    let clock = Arc::new(ManualClock::new());
    let idem = Idempotency::new(store, Config::default().with_clock(clock.clone()));
    let key = Key::new("orders", "ord_1").unwrap();
    let payload = serde_json::json!({"order_id": "ord_1", "total_cents": 4200});

    assert_eq!(idem.get::<Confirmation>(&key).await.unwrap(), Lookup::Absent);
    assert_eq!(requests.total(), 1, "one read, nothing written");

    let Begin::Claimed(attempt) = idem.begin::<_, Confirmation>(&key, &payload).await.unwrap() else {
        panic!("a first delivery claims")
    };
    let lease_end = attempt.lease_expires_at_ms();
    assert_eq!(idem.get::<Confirmation>(&key).await.unwrap(), Lookup::InProgress { lease_expires_at_ms: lease_end });

    let confirmation: Confirmation = ("ord_1".into(), 4200);
    idem.complete(attempt, &confirmation).await.unwrap();
    assert_eq!(idem.get::<Confirmation>(&key).await.unwrap(), Lookup::Completed(confirmation));

    // Past the dedup window the item is still in the table (TTL deletes it later), yet absent.
    clock.advance(DEFAULT_DEDUP_WINDOW + Duration::from_secs(1));
    assert_eq!(idem.get::<Confirmation>(&key).await.unwrap(), Lookup::Absent);
    assert!(idem.store().get(key.as_str()).await.unwrap().is_some(), "the item is still stored");

    // A claim whose attempt died: stalled once its lease has ended.
    let died = Key::new("orders", "ord_2").unwrap();
    let Begin::Claimed(attempt) = idem.begin::<_, Confirmation>(&died, &payload).await.unwrap() else {
        panic!("claimed")
    };
    let lease_end = attempt.lease_expires_at_ms();
    drop(attempt);
    clock.advance(DEFAULT_LEASE + Duration::from_millis(1));
    let stalled = idem.get::<Confirmation>(&died).await.unwrap();
    assert_eq!(stalled, Lookup::Stalled { lease_expired_at_ms: lease_end });
    assert!(stalled.would_run());
}
