//! `DynamoDbStore` cases beyond the store contract, against DynamoDB (the local AWS, or
//! `AWS_ENDPOINT_URL`): a claim over an item it cannot read (and the run of takeovers after it),
//! and commit once under a lease that would have ended mid-handler.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use effectively_once::{
    Begin, Claim, Clock, Config, ErrorKind, Idempotency, Key, ManualClock, Outcome, Record, RunError, Status, Store,
};
use effectively_once_dynamodb::raw::{Commit, Committed, Placement, Write};
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use effectively_once_dynamodb::{attr, create_table, DynamoDbStore};

/// A claim whose write landed over an item that does not parse (here: an expired item with an
/// unknown status) is a claim: the attempt holds the record and must know it, and must assume
/// it took over from an attempt that died mid-effect.
#[tokio::test]
async fn a_claim_over_an_unreadable_item_is_still_a_claim() {
    let (store, _) = fresh_store().await;
    let id = "payments#pay_garbled";
    put_half_written(&store, id).await;
    let idem = Idempotency::new(store, Config::default());
    let key = Key::new("payments", "pay_garbled").unwrap();
    let attempt = match idem.begin::<_, u64>(&key, &serde_json::json!({"n": 1})).await {
        Ok(Begin::Claimed(attempt)) => attempt,
        other => panic!("the claim landed, so it is a claim: {other:?}"),
    };
    assert!(attempt.took_over(), "what it replaced is unknown: assume a takeover");
    let held = idem.store().get(id).await.unwrap().unwrap();
    assert_eq!((held.status, held.owner.as_str()), (Status::InProgress, attempt.owner()));
    idem.complete(attempt, &5u64).await.unwrap();
    let done = idem.store().get(id).await.unwrap().unwrap();
    assert_eq!((done.status, done.response.as_deref()), (Status::Completed, Some("5")));
}

/// An item no record decodes from: an unknown status, its window long over.
async fn put_half_written(store: &DynamoDbStore, id: &str) {
    put_damaged(store, id, AttributeValue::S("HALF_WRITTEN".into())).await;
}

/// An item with this `status` and a window long over.
async fn put_damaged(store: &DynamoDbStore, id: &str, status: AttributeValue) {
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item(attr::ID, AttributeValue::S(id.into()))
        .item(attr::STATUS, status)
        .item(attr::EXPIRATION, AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
}

/// What a claim over an unreadable item replaced stays unknown through a run of takeovers: if
/// its attempt dies (before the payments API stores its `503 key_held`, say), the claim after its
/// lease is answered `AcquiredOverUnreadable` too, not as if the dead attempt began the run (the
/// API would then send that attempt's body), as the Redis store answers. Whatever the damaged
/// status: an unknown string, or a NULL (the mark a claim over a free key leaves).
#[tokio::test]
async fn a_claim_over_an_unreadable_item_stays_unknown_when_its_attempt_dies() {
    let (store, _) = fresh_store().await;
    for (id, status) in [
        ("api#garbled_then_crash", AttributeValue::S("HALF_WRITTEN".into())),
        ("api#null_status_then_crash", AttributeValue::Null(true)),
    ] {
        put_damaged(&store, id, status).await;
        let in_progress = |owner: &str, lease_expires_at_ms: u64| Record {
            id: id.into(),
            status: Status::InProgress,
            lease_expires_at_ms,
            expiration_s: 4_000_000_000,
            payload_hash: "hx".into(),
            owner: owner.into(),
            response: None,
        };
        let x = store.claim(&in_progress("x", 11_000), 10_000).await.unwrap();
        assert_eq!(x, Claim::AcquiredOverUnreadable, "{id}");
        let y = store.claim(&in_progress("y", 30_000), 20_000).await.unwrap();
        assert_eq!(y, Claim::AcquiredOverUnreadable, "{id}: x died; what its run began with is still unknown");
    }
}

/// Commit once holds no lease, so there is none to outrun: an attempt that starts, stalls for
/// an hour (far past any lease) while a second delivery commits, then commits its own
/// transaction, is told the event exists and writes nothing. The effect is an unconditional
/// counter increment in the same transaction, so a second commit would show.
#[tokio::test]
async fn commit_once_is_immune_to_a_handler_outrunning_any_lease() {
    let (store, _) = fresh_store().await;
    let effects = unique_name("effects");
    create_table(store.client(), &effects).await.unwrap();
    let clock = ManualClock::new();
    let counter_key = |event: &str| AttributeValue::S(format!("applied#{event}"));
    for placement in [Placement::Own, Placement::Carried { write: "entry".into(), key_attribute: attr::ID.into() }] {
        let event = unique_name("pay");
        let commit = |response: &str| {
            let entry = aws_sdk_dynamodb::types::Put::builder()
                .table_name(&effects)
                .item(attr::ID, AttributeValue::S(format!("entry#{event}")))
                .build()
                .unwrap();
            let increment = Update::builder()
                .table_name(&effects)
                .key(attr::ID, counter_key(&event))
                .update_expression("ADD #applied :one")
                .expression_attribute_names("#applied", "applied")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .build()
                .unwrap();
            Commit::new(format!("payments#{event}"), "hash", response)
                .placement(placement.clone())
                .expiration_s(clock.now_ms() / 1000 + 14 * 24 * 3600)
                .write(Write::new("entry", TransactWriteItem::builder().put(entry).build()))
                .write(Write::new("increment", TransactWriteItem::builder().update(increment).build()))
        };
        // The slow attempt builds its transaction, then stalls far past any lease.
        let slow = commit("\"slow\"");
        clock.advance(Duration::from_secs(3600));
        // A second delivery commits meanwhile.
        assert_eq!(store.transact(&commit("\"fast\""), clock.now_ms()).await.unwrap(), Committed::Fresh);
        clock.advance(Duration::from_secs(3600));
        // The slow one wakes and commits: the event exists, nothing is written.
        match store.transact(&slow, clock.now_ms()).await.unwrap() {
            Committed::Exists(record) => assert_eq!(record.response.as_deref(), Some("\"fast\"")),
            other => panic!("{placement:?}: the stalled commit must meet the first one: {other:?}"),
        }
        let counter = store
            .client()
            .get_item()
            .table_name(&effects)
            .key(attr::ID, counter_key(&event))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        let applied = counter.item().and_then(|i| i.get("applied")).and_then(|v| v.as_n().ok()).cloned();
        assert_eq!(applied.as_deref(), Some("1"), "{placement:?}: the effect was applied once");
    }
}

/// A record written before the payload hash was versioned (an item whose `payload_hash` is bare
/// version 1 hex) still answers a duplicate of its payload through DynamoDB, inside the dedup
/// window; another payload is key reuse. New records carry the version tag, and answer a
/// re-serialised payload (`1250.0`) too (a version 1 record cannot: version 1 told them apart).
#[tokio::test]
async fn a_record_with_a_version_1_hash_still_answers_its_duplicate() {
    let (store, _) = fresh_store().await;
    let config = Config::default();
    let payload = serde_json::json!({"amount_cents": 1250, "currency": "USD"});
    let hash = config.payload_hash(&payload).unwrap();
    let now_s = config.now_ms() / 1000;
    let id = "payments#pay_v1";
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item(attr::ID, AttributeValue::S(id.into()))
        .item(attr::STATUS, AttributeValue::S("COMPLETED".into()))
        .item(attr::LEASE_EXPIRES_AT, AttributeValue::N("0".into()))
        .item(attr::EXPIRATION, AttributeValue::N((now_s + 3600).to_string()))
        .item(attr::PAYLOAD_HASH, AttributeValue::S(hash.v1().to_owned()))
        .item(attr::OWNER, AttributeValue::S("earlier-build".into()))
        .item(attr::RESPONSE, AttributeValue::S("7".into()))
        .send()
        .await
        .unwrap();
    let idem = Idempotency::new(store, config);
    let key = Key::new("payments", "pay_v1").unwrap();
    let again = idem.run(&key, &payload, || async { Ok::<u64, ()>(8) }).await.unwrap();
    assert_eq!(again, Outcome::Replayed(7));
    let other = serde_json::json!({"amount_cents": 1251, "currency": "USD"});
    let reused = idem.run(&key, &other, || async { Ok::<u64, ()>(8) }).await.unwrap_err();
    assert!(matches!(&reused, RunError::Idempotency(e) if e.kind() == ErrorKind::KeyReused), "{reused:?}");

    let fresh = Key::new("payments", "pay_v2").unwrap();
    assert_eq!(idem.run(&fresh, &payload, || async { Ok::<u64, ()>(9) }).await.unwrap(), Outcome::Fresh(9));
    let stored = idem.store().get(fresh.as_str()).await.unwrap().unwrap();
    assert_eq!(stored.payload_hash, hash.as_str());
    assert!(stored.payload_hash.starts_with("v2:"), "{}", stored.payload_hash);
    let resent: serde_json::Value = serde_json::from_str(r#"{"currency": "USD", "amount_cents": 1250.0}"#).unwrap();
    assert_eq!(idem.run(&fresh, &resent, || async { Ok::<u64, ()>(10) }).await.unwrap(), Outcome::Replayed(9));
}
