//! A ledger written by a build that carried each applied event's record on its entry (0.1.0's
//! layout): without `Ledger::migrate` its events could post again for another account, and its
//! rejections lapse after 14 days.

use std::collections::HashMap;
use std::time::Duration;

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Clock as _, Config, ErrorKind, ManualClock, Outcome, Record, Status};
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use end_to_end::LedgerHarness;
use payments::Error;
use payments::{Posting, Rejection};

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A ledger on fresh tables, with its table name and clock (the shared harness hides the name).
struct Legacy {
    ledger: payments::Ledger,
    table: String,
    clock: Arc<ManualClock>,
}

async fn legacy() -> Legacy {
    let (store, _) = fresh_store().await;
    let table = unique_name("ledger");
    payments::tables::create_ledger_table(store.client(), &table).await.expect("ledger table");
    let clock = Arc::new(ManualClock::new());
    let ledger =
        payments::Ledger::new(store, table.clone(), None).with_config(Config::default().with_clock(clock.clone()));
    Legacy { ledger, table, clock }
}

/// What 0.1.0 (`Placement::Carried { write: "entry", key_attribute: "pk" }`) left in the ledger
/// table for an applied payment: the entry, carrying the record, and the balance. No item
/// `payments#{event_id}` in the idempotency table: 0.1.0 never wrote one for an applied event.
async fn write_as_0_1_0(l: &Legacy, event: &payments::PaymentEvent) {
    // 0.1.0 hashed payloads under version 1 (bare hex, no tag).
    let hash = Config::default().payload_hash(event).unwrap().v1().to_owned();
    let entry = HashMap::from([
        ("pk".to_owned(), s(&format!("account#{}", event.account_id))),
        ("sk".to_owned(), s(&format!("entry#{}", event.event_id))),
        ("amount_cents".to_owned(), n(event.amount_cents)),
        ("currency".to_owned(), s(&event.currency)),
        ("event_id".to_owned(), s(&event.event_id)),
        ("posted_at".to_owned(), s("2026-10-01T00:00:00Z")),
        // The carried record (effectively_once_dynamodb::carried::{KEY, PAYLOAD_HASH, RESPONSE}).
        ("idempotency_key".to_owned(), s(&format!("payments#{}", event.event_id))),
        ("payload_hash".to_owned(), s(&hash)),
        ("response".to_owned(), s(r#"{"outcome":"applied"}"#)),
    ]);
    let balance = HashMap::from([
        ("pk".to_owned(), s(&format!("account#{}", event.account_id))),
        ("sk".to_owned(), s("balance")),
        ("balance_cents".to_owned(), n(event.amount_cents)),
        ("entry_count".to_owned(), n(1)),
        ("currency".to_owned(), s(&event.currency)),
    ]);
    for item in [entry, balance] {
        l.ledger.client().put_item().table_name(&l.table).set_item(Some(item)).send().await.unwrap();
    }
}

fn assert_key_reused(result: &Result<Outcome<Posting>, Error>) {
    match result {
        Err(Error::Idempotency(e)) if e.kind() == ErrorKind::KeyReused => {}
        other => panic!("expected KeyReused, got {other:?}"),
    }
}

/// An event applied before the upgrade is key reuse when sent again for another account.
/// 0.1.0 carried the record on the entry (keyed by account); 0.2 looks for `payments#{id}`
/// only, and for a missing record falls back to the entry of the *same* account
/// (ledger.rs:137). The same event id sent for another account (a DLQ message edited and
/// redriven, a producer bug) would find neither and, unmigrated, be posted a second time.
#[tokio::test]
async fn after_the_migration_an_event_applied_by_0_1_0_is_key_reuse_for_another_account() {
    let l = legacy().await;
    let old = LedgerHarness::event("pay_legacy", "acct_old", 500, "USD");
    write_as_0_1_0(&l, &old).await;
    let report = l.ledger.migrate().await.unwrap();
    assert_eq!((report.carried_entries, report.records_written), (1, 1));
    assert_eq!(l.ledger.migrate().await.unwrap().records_written, 0, "a second run writes nothing");
    // The same id applied for a second account under the old layout: reported, not hidden.
    write_as_0_1_0(&l, &LedgerHarness::event("pay_legacy", "acct_twice", 500, "USD")).await;
    assert_eq!(l.ledger.migrate().await.unwrap().conflicts, 1);
    // Sanity: the same account's duplicate is answered from the carried record.
    assert_eq!(l.ledger.post(&old).await.unwrap(), Outcome::Replayed(Posting::Applied));

    let reused = LedgerHarness::event("pay_legacy", "acct_other", 500, "USD");
    let result = l.ledger.post(&reused).await;
    let other_entries = l.ledger.entries("acct_other").await.unwrap();
    assert!(
        other_entries.is_empty(),
        "event pay_legacy posted a second time, for acct_other: {other_entries:?} (post answered {result:?})"
    );
    assert_key_reused(&result);
}

/// Finding 1, second half: 0.1.0 recorded rejections with a 14-day expiration; the new code's
/// claim condition (`expiration < :now_s`) lets a commit replace such a record once it ends,
/// so a duplicate of a debit rejected under 0.1.0 is applied after the window (a resent DLQ
/// message, an edited redrive), when the code now promises rejections last as long as the
/// ledger.
#[tokio::test]
async fn after_the_migration_a_debit_rejected_by_0_1_0_stays_rejected_after_fourteen_days() {
    let p = legacy().await;
    let debit = LedgerHarness::event("pay_old_rej", "acct_r", -500, "USD");
    let hash = Config::default().payload_hash(&debit).unwrap().v1().to_owned();
    let now_ms = p.clock.now_ms();
    let rejected = Posting::Rejected { reason: Rejection::InsufficientFunds { balance_cents: 0 } };
    // As 0.1.0's `record_rejection` wrote it: expiration = now + the 14-day window.
    let record = Record {
        id: "payments#pay_old_rej".into(),
        status: Status::Completed,
        lease_expires_at_ms: 0,
        expiration_s: now_ms / 1000 + 14 * 24 * 3600,
        payload_hash: hash,
        owner: String::new(),
        response: Some(serde_json::to_string(&rejected).unwrap()),
    };
    p.ledger.store().record_outcome(&record, now_ms, None).await.unwrap();
    assert_eq!(p.ledger.post(&debit).await.unwrap(), Outcome::Replayed(rejected.clone()));
    p.ledger.post(&LedgerHarness::event("pay_fund_r", "acct_r", 1000, "USD")).await.unwrap();
    assert_eq!(p.ledger.migrate().await.unwrap().records_made_permanent, 1, "the rejection, not the applied credit");
    p.clock.advance(Duration::from_secs(15 * 24 * 3600));
    let later = p.ledger.post(&debit).await.unwrap();
    let balance = p.ledger.balance("acct_r").await.unwrap().unwrap().balance_cents;
    assert_eq!(balance, 1000, "the rejected debit was applied: {later:?}");
    assert_eq!(later, Outcome::Replayed(rejected));
}
