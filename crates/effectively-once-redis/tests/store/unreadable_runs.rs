//! An unreadable record stays unknown through a run of takeovers: the successor of a claim
//! over it, once that claim's attempt died, is answered `AcquiredOverUnreadable` (the payments
//! API keeps the key held), as on DynamoDB
//! (`effectively-once-dynamodb/tests/store/beyond_contract.rs`).

use effectively_once::{Claim, Record, Status, Store};

fn record(id: &str, owner: &str, hash: &str, lease: u64) -> Record {
    Record {
        id: id.into(),
        status: Status::InProgress,
        lease_expires_at_ms: lease,
        expiration_s: 4_000_000_000,
        payload_hash: hash.into(),
        owner: owner.into(),
        response: None,
    }
}

#[tokio::test]
async fn redis_keeps_an_unreadable_first_through_a_dead_holder() {
    let store = crate::common::fresh_store("attack-unreadable").await;
    let id = "api#garbled_then_crash";
    let _: () = redis::cmd("HSET")
        .arg(store.key(id))
        .arg("status")
        .arg("HALF_WRITTEN")
        .arg("expiration")
        .arg("1")
        .query_async(&mut store.connection())
        .await
        .unwrap();
    let x = record(id, "x", "hx", 11_000);
    assert_eq!(store.claim(&x, 10_000).await.unwrap(), Claim::AcquiredOverUnreadable);
    let y = record(id, "y", "hx", 30_000);
    assert_eq!(store.claim(&y, 20_000).await.unwrap(), Claim::AcquiredOverUnreadable);
}
