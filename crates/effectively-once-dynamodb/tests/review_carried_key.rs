//! Review (issue 14): a carried record found on the carrier is replayed without comparing its
//! key to the committing key, so a carrier keyed by something coarser than the business key
//! answers another event's record: an event that never took effect is acked as a duplicate.
#![cfg(feature = "test-util")]

use effectively_once::{Config, Idempotency, Key, Outcome};
use effectively_once_dynamodb::testing::fresh_store_and_table;
use effectively_once_dynamodb::{CommitOnce, Tx};
use serde::Serialize;

/// A customer's latest-order item: keyed by the customer, not by the order (the mistake
/// `carry_record`'s docs warn of, which nothing refuses).
#[derive(Serialize)]
struct Latest<'a> {
    id: &'a str,
    total_cents: i64,
}

/// Orders o-1 and o-2 of customer c-1, with the same total (the payload hashed is the total):
/// the second commit meets the first's carried record, `__once_key` = `orders#o-1`, and
/// answers `Replayed`. Nothing of o-2 was written; the caller acks it as a duplicate.
#[tokio::test]
async fn a_carried_record_of_another_key_is_not_a_replay() {
    let (store, latest) = fresh_store_and_table("review-latest").await;
    let idempotency = Idempotency::new(store.clone(), Config::default());
    let build = |tx: &mut Tx<String>| {
        let put = tx.put(&latest, &Latest { id: "customer#c-1", total_cents: 500 })?;
        tx.carry_record(put)?;
        Ok("stored".to_owned())
    };
    let first = idempotency.commit_once(&Key::new("orders", "o-1").unwrap(), &500, build).await.unwrap();
    assert_eq!(first, Outcome::Fresh("stored".to_owned()));
    let second = idempotency.commit_once(&Key::new("orders", "o-2").unwrap(), &500, build).await;
    assert!(
        !matches!(second, Ok(Outcome::Replayed(_))),
        "orders#o-2 answered as a duplicate of orders#o-1's record: {second:?}"
    );
}
