//! The ledger's batch path (`Ledger::post_batch`) against posting one by one, on the local AWS:
//! the same answers, balances and entries, in fewer requests.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::Outcome;
use end_to_end::{summary, LedgerHarness, Rng};
use payments::{PaymentEvent, Posting};

async fn balances(h: &LedgerHarness, accounts: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for account in accounts {
        let balance = h.ledger.balance(account).await.unwrap();
        let entries = h.ledger.entries(account).await.unwrap();
        out.insert(account.to_string(), format!("{balance:?} {entries:?}"));
    }
    out
}

/// Ten first deliveries over three accounts: one request, every event applied.
#[tokio::test]
async fn ten_events_are_one_transaction() {
    let h = LedgerHarness::new().await;
    let events: Vec<PaymentEvent> = (0..10)
        .map(|i| LedgerHarness::event(&format!("b10-{i}"), &format!("acct-{}", i % 3), 100 + i, "USD"))
        .collect();
    h.requests.reset();
    let results = h.ledger.post_batch(&events).await;
    assert!(results.iter().all(|r| matches!(r, Ok(Outcome::Fresh(Posting::Applied)))), "{results:?}");
    assert_eq!(h.requests.total(), 1, "one TransactWriteItems for the batch");
    let balance = h.ledger.balance("acct-0").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (100 + 103 + 106 + 109, 4));
    // The same batch again: every event a duplicate, answered from the answers this ledger
    // remembers, with no request.
    h.requests.reset();
    let again = h.ledger.post_batch(&events).await;
    assert!(again.iter().all(|r| matches!(r, Ok(Outcome::Replayed(Posting::Applied)))), "{again:?}");
    assert_eq!(h.requests.total(), 0, "a duplicate batch this sandbox answered before");
    // Another sandbox (a ledger that remembers nothing) answers from the cancellation reasons.
    let other = h.ledger.clone_forgetting();
    h.requests.reset();
    let again = other.post_batch(&events).await;
    assert!(again.iter().all(|r| matches!(r, Ok(Outcome::Replayed(Posting::Applied)))), "{again:?}");
    assert!(h.requests.total() <= 2, "a duplicate batch costs {} requests", h.requests.total());
    // A remembered id with another payload is key reuse, as its record would say.
    let reused = LedgerHarness::event("b10-0", "acct-0", 999, "USD");
    h.requests.reset();
    let answer = h.ledger.post_batch(&[reused]).await;
    assert!(
        matches!(&answer[0], Err(payments::Error::Idempotency(e)) if e.kind() == effectively_once::ErrorKind::KeyReused),
        "{answer:?}"
    );
    assert_eq!(h.requests.total(), 0);
    let balance = h.ledger.balance("acct-0").await.unwrap().unwrap();
    assert_eq!(balance.entry_count, 4, "nothing posted twice");
}

/// An entry with no record (written before records were kept apart, or its record deleted):
/// the ledger answers its event id from the entry itself.
async fn entry_without_record(h: &LedgerHarness, account: &str, event_id: &str, amount_cents: i64) {
    h.ledger
        .client()
        .put_item()
        .table_name(h.ledger.table())
        .item("pk", AttributeValue::S(format!("account#{account}")))
        .item("sk", AttributeValue::S(format!("entry#{event_id}")))
        .item("amount_cents", AttributeValue::N(amount_cents.to_string()))
        .item("currency", AttributeValue::S("USD".into()))
        .item("event_id", AttributeValue::S(event_id.into()))
        .item("posted_at", AttributeValue::S("2026-01-01T00:00:00Z".into()))
        .send()
        .await
        .expect("an entry without its record");
}

/// A duplicate answered from an entry without its record is not remembered under its payload's
/// hash (the entry holds no hash): a later copy with another payload gets the same answer from
/// this sandbox as from any other.
#[tokio::test]
async fn an_entry_without_its_record_is_answered_alike_in_every_sandbox() {
    let h = LedgerHarness::new().await;
    entry_without_record(&h, "acct-bare", "bare-1", 100).await;
    let mut with_receipt = LedgerHarness::event("bare-1", "acct-bare", 100, "USD");
    with_receipt.receipt_email = Some("payer@example.com".into());
    let plain = LedgerHarness::event("bare-1", "acct-bare", 100, "USD");
    for event in [with_receipt, plain] {
        let here = summary(&h.ledger.post_batch(std::slice::from_ref(&event)).await[0]);
        let elsewhere = summary(&h.ledger.clone_forgetting().post_batch(std::slice::from_ref(&event)).await[0]);
        assert_eq!(here, elsewhere, "{event:?}");
    }
    assert_eq!(h.ledger.entries("acct-bare").await.unwrap(), vec![("bare-1".to_owned(), 100)], "posted once");
    assert!(h.outbox_row("bare-1").await.is_none(), "no receipt row for the duplicate");
}

/// In-batch duplicates cost nothing, and another payload under a seen id is key reuse.
#[tokio::test]
async fn in_batch_copies_are_answered_from_the_first() {
    let h = LedgerHarness::new().await;
    let first = LedgerHarness::event("copy-1", "acct-c", 500, "USD");
    let reused = LedgerHarness::event("copy-1", "acct-d", 500, "USD");
    let events = vec![first.clone(), first.clone(), reused, first];
    h.requests.reset();
    let results = h.ledger.post_batch(&events).await;
    let summaries: Vec<String> = results.iter().map(summary).collect();
    assert_eq!(
        summaries,
        ["fresh Applied", "replayed Applied", "error KeyReused", "replayed Applied"].map(String::from).to_vec()
    );
    assert_eq!(h.requests.total(), 1);
    assert_eq!(h.ledger.balance("acct-d").await.unwrap(), None, "the reused id posted nothing");
}

/// Random batches (duplicates, reused ids, overdrafts, a second currency, debits before their
/// credits) posted as batches on one ledger and one by one on another: every answer, balance and
/// entry is the same.
#[tokio::test]
async fn a_batch_answers_as_one_by_one_in_batch_order() {
    let batched = LedgerHarness::new().await;
    let single = LedgerHarness::new().await;
    let accounts = ["acct-a", "acct-b", "acct-c"];
    let mut rng = Rng(0x5eed_1234_abcd_9876);
    for round in 0..30 {
        let size = 1 + rng.below(24) as usize;
        let events: Vec<PaymentEvent> = (0..size)
            .map(|_| {
                // A small pool of ids: copies within and across batches, some with other payloads.
                let id = format!("ev-{}", rng.below(40));
                let account = accounts[rng.below(3) as usize];
                let amount = if rng.below(3) == 0 { -(1 + rng.below(400) as i64) } else { 1 + rng.below(300) as i64 };
                let currency = if rng.below(12) == 0 { "EUR" } else { "USD" };
                // The same id keeps its payload most of the time (a duplicate), not always (reuse).
                if rng.below(5) == 0 {
                    LedgerHarness::event(&id, account, amount, currency)
                } else {
                    let n: u64 = id[3..].parse().unwrap();
                    let amount = if n.is_multiple_of(3) { -(n as i64 * 7 + 1) } else { n as i64 * 11 + 1 };
                    let mut event = LedgerHarness::event(&id, accounts[(n % 3) as usize], amount, "USD");
                    if n.is_multiple_of(5) {
                        event.receipt_email = Some(format!("{id}@example.com"));
                    }
                    event
                }
            })
            .collect();
        let from_batch: Vec<String> = batched.ledger.post_batch(&events).await.iter().map(summary).collect();
        let mut one_by_one = Vec::new();
        for event in &events {
            one_by_one.push(summary(&single.ledger.post(event).await));
        }
        assert_eq!(from_batch, one_by_one, "round {round}: {events:?}");
        assert_eq!(balances(&batched, &accounts).await, balances(&single, &accounts).await, "round {round}");
        for event in &events {
            let rows = (batched.outbox_row(&event.event_id).await, single.outbox_row(&event.event_id).await);
            assert_eq!(
                rows.0.map(|r| r.receipt.event_id),
                rows.1.map(|r| r.receipt.event_id),
                "round {round}: outbox rows"
            );
        }
    }
}

/// Each answer as the payments consumer reports it to SQS: `ack` (applied, rejected or a
/// duplicate), or the consumer's `Retry` for a failure (retryable ones come back, in order).
fn as_reported(results: Vec<Result<Outcome<Posting>, payments::Error>>) -> Vec<String> {
    results
        .into_iter()
        .map(|result| match result {
            Ok(_) => "ack".to_owned(),
            Err(error) => format!("{:?}", effectively_once_lambda::RecordError::from(error).retry),
        })
        .collect()
}

/// A receipt asked of a ledger without an outbox waits for its table (after a fix); the same
/// account's later events wait with it, so SQS redelivers them in order: a debit behind that
/// credit is not rejected for good. Once the outbox is there, the batch applies as one by one.
#[tokio::test]
async fn a_receipt_waiting_for_its_outbox_holds_back_its_accounts_later_events() {
    let h = LedgerHarness::new().await;
    let without_outbox = payments::Ledger::new(h.ledger.store().clone(), h.ledger.table(), None);
    let mut credit = LedgerHarness::event("wait-credit", "acct-wait", 100, "USD");
    credit.receipt_email = Some("payer@example.com".into());
    let events = vec![
        credit,
        LedgerHarness::event("wait-debit", "acct-wait", -60, "USD"),
        LedgerHarness::event("wait-other", "acct-wait-other", 5, "USD"),
    ];
    let posted = without_outbox.post_batch(&events).await;
    let first: Vec<String> = posted.iter().map(summary).collect();
    assert_eq!(first[2], "fresh Applied", "another account goes on: {first:?}");
    // Held back by `commit_batch`, which answers the ledger's own check's failure as given.
    assert_eq!(as_reported(posted)[..2], ["AfterFix", "Now"], "both wait for the outbox: {first:?}");
    assert_eq!(h.ledger.balance("acct-wait").await.unwrap(), None, "nothing posted or recorded: {first:?}");
    // The redelivery, to a ledger with its outbox: the credit, then the debit it covers.
    let again: Vec<String> = h.ledger.post_batch(&events).await.iter().map(summary).collect();
    assert_eq!(again, ["fresh Applied", "fresh Applied", "replayed Applied"]);
    let balance = h.ledger.balance("acct-wait").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (40, 2));
    assert!(h.outbox_row("wait-credit").await.is_some(), "the receipt's row");
}

/// An event whose answer the consumer retries (its record unreadable: the store's fault, not
/// the message's) holds back its account's later events in `commit_batch`, so SQS redelivers
/// them after it: the debit it funds is not rejected for good first.
#[tokio::test]
async fn an_event_the_consumer_retries_holds_back_its_accounts_later_events() {
    let h = LedgerHarness::new().await;
    unreadable_record(&h, "unread-credit").await;
    let events = vec![
        LedgerHarness::event("unread-credit", "acct-unread", 100, "USD"),
        LedgerHarness::event("unread-debit", "acct-unread", -60, "USD"),
    ];
    let reported = as_reported(h.ledger.post_batch(&events).await);
    assert_eq!(reported, ["AfterFix", "Now"], "the debit waits for its credit");
    assert_eq!(h.ledger.balance("acct-unread").await.unwrap(), None, "nothing posted or recorded");
    // An operator repairs the record; the redelivery posts the credit, then the debit.
    h.ledger
        .client()
        .delete_item()
        .table_name(h.ledger.store().table())
        .key(effectively_once_dynamodb::attr::ID, AttributeValue::S("payments#unread-credit".into()))
        .send()
        .await
        .unwrap();
    let again: Vec<String> = h.ledger.clone_forgetting().post_batch(&events).await.iter().map(summary).collect();
    assert_eq!(again, ["fresh Applied", "fresh Applied"]);
    let balance = h.ledger.balance("acct-unread").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (40, 2));
}

/// A record of `event_id` the store cannot read back: a post of it fails, and is retried.
async fn unreadable_record(h: &LedgerHarness, event_id: &str) {
    h.ledger
        .client()
        .put_item()
        .table_name(h.ledger.store().table())
        .item(effectively_once_dynamodb::attr::ID, AttributeValue::S(format!("payments#{event_id}")))
        .send()
        .await
        .unwrap();
}

/// An account may be spelled like an event's record key (`payments#{event_id}`): the event
/// waiting does not hold that account back. The account's events wait for the next pass (a copy
/// of an event id with another payload is among them), and are posted as one by one posts them.
#[tokio::test]
async fn an_account_named_like_a_waiting_events_key_is_not_held_back() {
    let h = LedgerHarness::new().await;
    unreadable_record(&h, "coll-1").await;
    let events = vec![
        LedgerHarness::event("coll-1", "acct-coll-x", 100, "USD"),
        LedgerHarness::event("coll-3", "acct-coll-c", 100, "USD"),
        // Another payload under coll-3: key reuse, after coll-3 is settled, in the next pass.
        LedgerHarness::event("coll-3", "payments#coll-1", 100, "USD"),
        LedgerHarness::event("coll-4", "payments#coll-1", 50, "USD"),
    ];
    let answers: Vec<String> = h.ledger.post_batch(&events).await.iter().map(summary).collect();
    assert_eq!(answers, ["error Store", "fresh Applied", "error KeyReused", "fresh Applied"]);
    let balance = h.ledger.balance("payments#coll-1").await.unwrap().map(|b| (b.balance_cents, b.entry_count));
    assert_eq!(balance, Some((50, 1)));
}

/// A copy of an event id with another payload that waits for its first copy (undecided) holds
/// back its own account's later events too: they are redelivered after it, in order.
#[tokio::test]
async fn a_copy_waiting_for_its_first_copy_holds_back_its_accounts_later_events() {
    let h = LedgerHarness::new().await;
    unreadable_record(&h, "wait-copy").await;
    let events = vec![
        LedgerHarness::event("wait-copy", "acct-copy-a", 100, "USD"),
        LedgerHarness::event("wait-copy", "acct-copy-b", 100, "USD"),
        LedgerHarness::event("wait-copy-later", "acct-copy-b", 5, "USD"),
    ];
    let reported = as_reported(h.ledger.post_batch(&events).await);
    assert_eq!(reported, ["AfterFix", "Now", "Now"]);
    assert_eq!(h.ledger.entries("acct-copy-b").await.unwrap(), vec![], "nothing posted to acct-copy-b");
}

// A batch's pre-check hold-back (`Ledger::admit`) passes on: an event held back because its
// event id (or its account) waits makes its own account (and event id) wait too, so no later
// event overtakes it and is decided for good in an order posting one by one never takes.

/// E1 (id k1, acct A, receipt, ledger without an outbox): retryable, holds account A and id k1.
/// E2 (id k1, acct B, +500): held back by its id, and so holds back account B.
/// E3 (id k3, acct B, -500): held back too, not rejected over an empty account: one by one in
/// batch order, E2 applies first (E1 wrote nothing) and E3's debit is covered.
#[tokio::test]
async fn an_event_held_back_by_its_event_id_holds_back_its_account() {
    let h = LedgerHarness::new().await;
    let no_outbox = payments::Ledger::new(h.ledger.store().clone(), h.ledger.table().to_owned(), None);
    let mut e1 = LedgerHarness::event("atk-k1", "atk-acct-A", 100, "USD");
    e1.receipt_email = Some("payer@example.com".into());
    let e2: PaymentEvent = LedgerHarness::event("atk-k1", "atk-acct-B", 500, "USD");
    let e3: PaymentEvent = LedgerHarness::event("atk-k3", "atk-acct-B", -500, "USD");
    let results = no_outbox.post_batch(&[e1, e2, e3]).await;
    let summaries: Vec<String> = results.iter().map(summary).collect();
    // E3 must not be decided before E2: held back (retryable) like E2, or applied after it.
    assert_ne!(
        summaries[2], "fresh Rejected { reason: InsufficientFunds { balance_cents: 0 } }",
        "E3 overtook E2 in account B and was rejected for good: {summaries:?}"
    );
    assert!(
        !summaries[2].starts_with("fresh Rejected"),
        "E3 overtook E2 in account B and was rejected for good: {summaries:?}"
    );
}

/// The other direction: an event held back by its account holds back its event id.
/// E1 (id k1, acct A, receipt, no outbox): retryable, holds account A and id k1.
/// E2 (id k2, acct A, +700): held back by its account, and so holds back id k2.
/// E3 (id k2, acct C, +700): held back too, not posted to account C: one by one in batch order,
/// E2 credits account A with k2 and E3 is key reuse (DLQ).
#[tokio::test]
async fn an_event_held_back_by_its_account_holds_back_its_event_id() {
    let h = LedgerHarness::new().await;
    let no_outbox = payments::Ledger::new(h.ledger.store().clone(), h.ledger.table().to_owned(), None);
    let mut e1 = LedgerHarness::event("atk2-k1", "atk2-acct-A", 100, "USD");
    e1.receipt_email = Some("payer@example.com".into());
    let e2 = LedgerHarness::event("atk2-k2", "atk2-acct-A", 700, "USD");
    let e3 = LedgerHarness::event("atk2-k2", "atk2-acct-C", 700, "USD");
    let results = no_outbox.post_batch(&[e1, e2.clone(), e3]).await;
    let summaries: Vec<String> = results.iter().map(summary).collect();
    let credited_c = no_outbox.balance("atk2-acct-C").await.unwrap();
    // Redelivered E2 (as SQS would, after E1's fix): key reuse, where one by one applied it.
    let e2_again = summary(&no_outbox.post_batch(&[e2]).await[0]);
    assert!(
        credited_c.is_none(),
        "E3 took event id k2 for account C ahead of E2 (account A): {summaries:?}; C = {credited_c:?}; \
         E2 redelivered: {e2_again}"
    );
}

/// A credit waiting outside lanes (a receipt asked of a ledger with no outbox table) holds a
/// debit of its account in a lane: posted one by one, the debit would wait for the credit, not be
/// rejected for good for want of it. Redelivered once the outbox exists, both apply.
#[tokio::test]
async fn a_credit_waiting_outside_lanes_holds_its_accounts_debit_in_a_lane() {
    let h = LedgerHarness::new().await;
    let no_outbox = payments::Ledger::new(h.ledger.store().clone(), h.ledger.table(), None);
    let mut credit = LedgerHarness::event("mix-credit", "mix-acct", 100, "USD");
    credit.receipt_email = Some("payer@example.com".into());
    let events = vec![credit, LedgerHarness::event("mix-debit", "mix-acct", -60, "USD")];
    let lanes = [None, Some("p-0")];
    let first: Vec<String> =
        no_outbox.post_batch_in_lanes(&events, &lanes, payments::Delivery::Unknown).await.iter().map(summary).collect();
    assert!(!first[1].starts_with("fresh"), "the debit overtook its waiting credit: {first:?}");
    let again: Vec<String> =
        h.ledger.post_batch_in_lanes(&events, &lanes, payments::Delivery::Unknown).await.iter().map(summary).collect();
    assert_eq!(again, ["fresh Applied", "fresh Applied"], "first {first:?}");
    let balance = h.ledger.balance("mix-acct").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (40, 2));
}
