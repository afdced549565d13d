//! `Ledger::migrate` makes "every recorded payment outcome with a finite expiration" permanent,
//! including a rejection whose 14-day window has passed while DynamoDB's TTL has not yet deleted
//! it (TTL deletes "typically within a few days"). The claim condition treats such a record as
//! absent, so left as it is, the rejected event id would be posted when sent again: an event id
//! both rejected (recorded) and applied, against the contract's "an event id already applied or
//! rejected, sent again ... is key reuse" and the never-expiring records the migration exists for.

use effectively_once::{Outcome, Record, Status};
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use payments::{Ledger, PaymentEvent, Posting};

#[tokio::test]
async fn a_lapsed_rejection_still_in_the_table_is_made_permanent() {
    let (store, _) = fresh_store().await;
    let ledger_table = unique_name("ledger");
    payments::tables::create_ledger_table(store.client(), &ledger_table).await.unwrap();
    let ledger = Ledger::new(store.clone(), ledger_table, None);
    let account = unique_name("acct");
    let debit_id = unique_name("debit");
    let debit = PaymentEvent::parse(&format!(
        r#"{{"event_id": "{debit_id}", "account_id": "{account}", "amount_cents": -300, "currency": "USD"}}"#
    ))
    .unwrap();
    // The rejection a 0.1.0 consumer recorded 15 days ago (14-day window), not yet deleted by TTL.
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    // 0.1.0 hashed payloads under version 1 (bare hex).
    let hash = effectively_once::Config::default().payload_hash(&debit).unwrap().v1().to_owned();
    let rejected = Posting::Rejected { reason: payments::Rejection::InsufficientFunds { balance_cents: 0 } };
    let record = Record {
        id: format!("payments#{debit_id}"),
        status: Status::Completed,
        lease_expires_at_ms: 0,
        expiration_s: now_s - 86_400,
        payload_hash: hash,
        owner: String::new(),
        response: Some(serde_json::to_string(&rejected).unwrap()),
    };
    assert!(store.record_outcome(&record, now_s * 1000 - 15 * 86_400_000, None).await.unwrap().is_none());

    let report = ledger.migrate().await.unwrap();
    // Funds arrive; the rejected debit is sent again (a producer replay, an edited redrive).
    let credit = PaymentEvent::parse(&format!(
        r#"{{"event_id": "{}", "account_id": "{account}", "amount_cents": 500, "currency": "USD"}}"#,
        unique_name("credit")
    ))
    .unwrap();
    ledger.post(&credit).await.unwrap();
    let again = ledger.post(&debit).await.unwrap();
    assert_eq!(
        again,
        Outcome::Replayed(rejected),
        "migration report {report:?}: the rejected event id was posted after the migration"
    );
}
