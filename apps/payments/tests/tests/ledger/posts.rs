//! Exactly-once ledger posts against the local AWS: entries, balances and outbox rows as the
//! tables hold them, and the DynamoDB requests each delivery sends.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{ErrorKind, Outcome, Retry};
use effectively_once_dynamodb::attr;
use end_to_end::LedgerHarness;
use payments::Error;
use payments::{PaymentEvent, Posting, Rejection};

#[tokio::test]
async fn two_deliveries_of_one_payment_post_once_in_one_request_each() {
    let p = LedgerHarness::new().await;
    let event = LedgerHarness::event("pay_0001", "acct_42", 1250, "USD");
    let first = p.ledger.post(&event).await.unwrap();
    let first_requests = p.requests.by_operation();
    p.requests.reset();
    let second = p.ledger.post(&event).await.unwrap();
    let second_requests = p.requests.by_operation();
    assert_eq!(first, Outcome::Fresh(Posting::Applied));
    assert_eq!(second, Outcome::Replayed(Posting::Applied));
    assert_eq!(p.ledger.entries("acct_42").await.unwrap(), vec![("pay_0001".to_owned(), 1250)]);
    let balance = p.ledger.balance("acct_42").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count, balance.currency.as_str()), (1250, 1, "USD"));
    assert_eq!(first_requests, HashMap::from([("TransactWriteItems".to_owned(), 1)]).into_iter().collect());
    assert_eq!(second_requests, HashMap::from([("TransactWriteItems".to_owned(), 1)]).into_iter().collect());
    let units = p.ledger.write_units(&event).unwrap();
    println!(
        "payment (credit, no receipt): requests first 1, duplicate 1; write units first {}, duplicate {}",
        units.committed, units.cancelled
    );
    assert_eq!((units.committed, units.cancelled), (6, 3));
}

#[tokio::test]
async fn modelled_write_units_per_kind_of_payment() {
    let p = LedgerHarness::new().await;
    let credit = LedgerHarness::event("pay_c", "acct_1", 100, "USD");
    let debit = LedgerHarness::event("pay_d", "acct_1", -100, "USD");
    let mut with_receipt = LedgerHarness::event("pay_r", "acct_1", 100, "USD");
    with_receipt.receipt_email = Some("r@example.com".into());
    let units = |e| p.ledger.write_units(e).map(|u| (u.committed, u.cancelled)).unwrap();
    assert_eq!(units(&credit), (6, 3), "record + entry + balance");
    assert_eq!(units(&debit), (6, 3), "the record is also the guard on a recorded rejection");
    assert_eq!(units(&with_receipt), (8, 4), "+ the outbox row");
    println!(
        "write units (first, duplicate): credit {:?}, debit {:?}, credit with receipt {:?}; Powertools pattern (6, 1)",
        units(&credit),
        units(&debit),
        units(&with_receipt)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_events_delivered_one_to_four_times_from_eight_tasks_post_exactly_once() {
    let p = Arc::new(LedgerHarness::new().await);
    // Deterministic shuffle (xorshift), so a failure replays the same schedule.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let events: Vec<_> = (0..100)
        .map(|i| LedgerHarness::event(&format!("pay_{i:03}"), &format!("acct_{}", i % 5), 100 + i as i64, "USD"))
        .collect();
    let mut deliveries: Vec<_> =
        events.iter().flat_map(|e| std::iter::repeat_n(e.clone(), 1 + (next() % 4) as usize)).collect();
    for i in (1..deliveries.len()).rev() {
        deliveries.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    let total = deliveries.len();
    let queue = Arc::new(std::sync::Mutex::new(deliveries));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (p, queue) = (p.clone(), queue.clone());
            tokio::spawn(async move {
                let (mut fresh, mut replayed) = (0, 0);
                loop {
                    let Some(event) = queue.lock().unwrap().pop() else { return (fresh, replayed) };
                    match p.ledger.post(&event).await.unwrap() {
                        Outcome::Fresh(Posting::Applied) => fresh += 1,
                        Outcome::Replayed(Posting::Applied) => replayed += 1,
                        other => panic!("unexpected {other:?}"),
                    }
                }
            })
        })
        .collect();
    let (mut fresh, mut replayed) = (0, 0);
    for w in workers {
        let (f, r) = w.await.unwrap();
        fresh += f;
        replayed += r;
    }
    assert_eq!((fresh, fresh + replayed), (100, total));
    let mut entries = 0;
    for account in 0..5 {
        let account = format!("acct_{account}");
        let posted = p.ledger.entries(&account).await.unwrap();
        let expected: i64 = events.iter().filter(|e| e.account_id == account).map(|e| e.amount_cents).sum();
        let balance = p.ledger.balance(&account).await.unwrap().unwrap();
        assert_eq!(balance.balance_cents, expected, "{account}");
        assert_eq!(balance.balance_cents, posted.iter().map(|(_, a)| a).sum::<i64>());
        assert_eq!(balance.entry_count as usize, posted.len());
        entries += posted.len();
    }
    assert_eq!(entries, 100);
}

#[tokio::test]
async fn an_overdraft_posts_nothing_and_stays_rejected_even_after_a_credit() {
    let p = LedgerHarness::new().await;
    let debit = LedgerHarness::event("pay_over", "acct_7", -500, "USD");
    let rejected = Posting::Rejected { reason: Rejection::InsufficientFunds { balance_cents: 0 } };
    assert_eq!(p.ledger.post(&debit).await.unwrap(), Outcome::Fresh(rejected.clone()));
    assert!(p.ledger.entries("acct_7").await.unwrap().is_empty());
    assert_eq!(p.ledger.balance("acct_7").await.unwrap(), None);
    p.requests.reset();
    assert_eq!(p.ledger.post(&debit).await.unwrap(), Outcome::Replayed(rejected.clone()));
    assert_eq!(p.requests.total(), 1, "a rejected debit's duplicate is one request");
    // Funds arrive; a duplicate of the rejected debit still gets the same answer.
    p.ledger.post(&LedgerHarness::event("pay_fund", "acct_7", 1000, "USD")).await.unwrap();
    assert_eq!(p.ledger.post(&debit).await.unwrap(), Outcome::Replayed(rejected));
    let balance = p.ledger.balance("acct_7").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (1000, 1));
    // A covered debit applies.
    assert_eq!(
        p.ledger.post(&LedgerHarness::event("pay_ok", "acct_7", -400, "USD")).await.unwrap(),
        Outcome::Fresh(Posting::Applied)
    );
    assert_eq!(p.ledger.balance("acct_7").await.unwrap().unwrap().balance_cents, 600);
}

#[tokio::test]
async fn a_currency_mismatch_posts_nothing_and_a_duplicate_gets_the_same_rejection() {
    let p = LedgerHarness::new().await;
    p.ledger.post(&LedgerHarness::event("pay_usd", "acct_9", 300, "USD")).await.unwrap();
    let eur = LedgerHarness::event("pay_eur", "acct_9", 300, "EUR");
    let rejected = Posting::Rejected { reason: Rejection::CurrencyMismatch { account_currency: "USD".into() } };
    let first = p.ledger.post(&eur).await.unwrap();
    let second = p.ledger.post(&eur).await.unwrap();
    assert_eq!(first, Outcome::Fresh(rejected.clone()));
    assert_eq!(second.into_inner(), rejected);
    assert_eq!(p.ledger.entries("acct_9").await.unwrap(), vec![("pay_usd".to_owned(), 300)]);
    let balance = p.ledger.balance("acct_9").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count, balance.currency.as_str()), (300, 1, "USD"));
}

#[tokio::test]
async fn the_same_event_id_with_another_amount_is_a_permanent_error() {
    let p = LedgerHarness::new().await;
    p.ledger.post(&LedgerHarness::event("pay_same", "acct_3", 100, "USD")).await.unwrap();
    let err = p.ledger.post(&LedgerHarness::event("pay_same", "acct_3", 999, "USD")).await.unwrap_err();
    assert!(matches!(&err, Error::Idempotency(e) if e.kind() == ErrorKind::KeyReused), "{err}");
    assert_eq!(err.retry(), Retry::Never);
    assert_eq!(p.ledger.balance("acct_3").await.unwrap().unwrap().balance_cents, 100);
}

#[tokio::test]
async fn a_receipt_row_is_written_with_the_entry_and_only_then() {
    let p = LedgerHarness::new().await;
    let mut event = LedgerHarness::event("pay_mail", "acct_5", 700, "USD");
    event.receipt_email = Some("alice@example.com".into());
    p.ledger.post(&event).await.unwrap();
    p.ledger.post(&event).await.unwrap();
    let row = p.outbox_row("pay_mail").await.unwrap().receipt;
    assert_eq!(
        (row.event_id.as_str(), row.receipt_email.as_deref(), row.amount_cents),
        ("pay_mail", Some("alice@example.com"), 700)
    );
    assert!(p.outbox_row("pay_none").await.is_none());
    p.ledger.post(&LedgerHarness::event("pay_none", "acct_5", 1, "USD")).await.unwrap();
    assert!(p.outbox_row("pay_none").await.is_none(), "no receipt_email, no row");
    let mut rejected = LedgerHarness::event("pay_rej", "acct_5", -10_000, "USD");
    rejected.receipt_email = Some("bob@example.com".into());
    assert!(matches!(p.ledger.post(&rejected).await.unwrap().into_inner(), Posting::Rejected { .. }));
    assert!(p.outbox_row("pay_rej").await.is_none(), "a rejected payment gets no receipt");
    p.outbox().mark("pay_mail", payments::RowStatus::Sent, Some("m-1"), "2026-11-29T00:00:00Z").await.unwrap();
    let marked = p.outbox_row("pay_mail").await.unwrap();
    assert_eq!(marked.status.as_str(), "SENT");
}

#[tokio::test]
async fn transaction_limits_give_clear_errors() {
    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
    use effectively_once_dynamodb::raw::{Commit, Write};
    let p = LedgerHarness::new().await;
    let put = |i: usize, size: usize| {
        let item = HashMap::from([
            ("pk".to_owned(), AttributeValue::S(format!("k{i}"))),
            ("sk".to_owned(), AttributeValue::S("x".into())),
            ("blob".to_owned(), AttributeValue::S("x".repeat(size))),
        ]);
        Write::new(
            "w",
            TransactWriteItem::builder()
                .put(Put::builder().table_name("t").set_item(Some(item)).build().unwrap())
                .build(),
        )
    };
    let many = (0..100).fold(Commit::new("payments#many", "h", "{}"), |c, i| c.write(put(i, 1)));
    let err = p.ledger.store().transact(&many, 0).await.unwrap_err();
    assert!(err.to_string().contains("101 actions; DynamoDB allows 100"), "{err}");
    let big = Commit::new("payments#big", "h", "{}").write(put(0, 500 * 1024));
    let err = p.ledger.store().transact(&big, 0).await.unwrap_err();
    assert!(err.to_string().contains("DynamoDB allows 409600"), "{err}");
    assert_eq!(p.requests.total(), 0, "refused before sending");
}

/// Asserts `err` is key reuse: permanent, so the message ends in the DLQ.
fn assert_key_reused(err: &Error) {
    assert!(matches!(err, Error::Idempotency(e) if e.kind() == ErrorKind::KeyReused), "{err}");
    assert_eq!(err.retry(), Retry::Never);
}

#[tokio::test]
async fn an_event_id_applied_for_one_account_is_key_reuse_for_another_and_posts_nothing() {
    let p = LedgerHarness::new().await;
    let mut first = LedgerHarness::event("pay_x", "acct_a", 500, "USD");
    first.receipt_email = Some("alice@example.com".into());
    p.ledger.post(&first).await.unwrap();
    p.outbox().mark("pay_x", payments::RowStatus::Sent, Some("m-first"), "2026-11-29T00:00:00Z").await.unwrap();
    // A producer bug, or a DLQ message edited and redriven: the same id for another account.
    let mut other = LedgerHarness::event("pay_x", "acct_b", 500, "USD");
    other.receipt_email = Some("mallory@example.com".into());
    p.requests.reset();
    for _ in 0..2 {
        assert_key_reused(&p.ledger.post(&other).await.unwrap_err());
    }
    assert_eq!(p.requests.total(), 2, "one request per delivery");
    assert!(p.ledger.entries("acct_b").await.unwrap().is_empty());
    assert_eq!(p.ledger.balance("acct_b").await.unwrap(), None);
    let balance = p.ledger.balance("acct_a").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (500, 1));
    // The receipt row still belongs to the first event, SENT with its message id.
    let row = p.outbox_row("pay_x").await.unwrap();
    assert_eq!(row.receipt.account_id, "acct_a");
    assert_eq!(row.status.as_str(), "SENT");
    assert_eq!(row.message_id.as_deref(), Some("m-first"));
    // The first event's duplicate is still a duplicate.
    assert_eq!(p.ledger.post(&first).await.unwrap(), Outcome::Replayed(Posting::Applied));
}

#[tokio::test]
async fn a_rejected_event_id_sent_for_another_account_is_key_reuse() {
    let p = LedgerHarness::new().await;
    let debit = LedgerHarness::event("pay_rx", "acct_poor", -500, "USD");
    assert!(matches!(p.ledger.post(&debit).await.unwrap().into_inner(), Posting::Rejected { .. }));
    p.ledger.post(&LedgerHarness::event("pay_fund_rich", "acct_rich", 1000, "USD")).await.unwrap();
    // The same id for a funded account would apply if ids were per account.
    assert_key_reused(&p.ledger.post(&LedgerHarness::event("pay_rx", "acct_rich", -500, "USD")).await.unwrap_err());
    assert_eq!(p.ledger.balance("acct_rich").await.unwrap().unwrap().balance_cents, 1000);
    assert_eq!(p.ledger.entries("acct_rich").await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_same_event_id_with_another_currency_or_address_is_key_reuse() {
    let p = LedgerHarness::new().await;
    p.ledger.post(&LedgerHarness::event("pay_cur", "acct_c", 100, "USD")).await.unwrap();
    assert_key_reused(&p.ledger.post(&LedgerHarness::event("pay_cur", "acct_c", 100, "EUR")).await.unwrap_err());
    let mut addressed = LedgerHarness::event("pay_cur", "acct_c", 100, "USD");
    addressed.receipt_email = Some("eve@example.com".into());
    assert_key_reused(&p.ledger.post(&addressed).await.unwrap_err());
    assert!(p.outbox_row("pay_cur").await.is_none(), "no receipt row for a reused key");
    assert_eq!(p.ledger.balance("acct_c").await.unwrap().unwrap().balance_cents, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_event_id_raced_for_two_accounts_applies_once() {
    let p = Arc::new(LedgerHarness::new().await);
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let p = p.clone();
            tokio::spawn(async move {
                let account = if i % 2 == 0 { "acct_r0" } else { "acct_r1" };
                p.ledger.post(&LedgerHarness::event("pay_race", account, 100, "USD")).await
            })
        })
        .collect();
    let mut fresh = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(Outcome::Fresh(Posting::Applied)) => fresh += 1,
            Ok(Outcome::Replayed(Posting::Applied)) => {}
            Err(e) => assert_key_reused(&e),
            Ok(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(fresh, 1);
    let entries = p.ledger.entries("acct_r0").await.unwrap().len() + p.ledger.entries("acct_r1").await.unwrap().len();
    assert_eq!(entries, 1, "one entry across both accounts");
}

#[tokio::test]
async fn an_entry_without_its_record_is_never_overwritten_and_answers_for_itself() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let p = LedgerHarness::new().await;
    let event = LedgerHarness::event("pay_old", "acct_o", 300, "USD");
    p.ledger.post(&event).await.unwrap();
    // An entry whose record is gone (written before records had their own item, or deleted by
    // hand): a redelivery must not post again.
    p.ledger
        .client()
        .delete_item()
        .table_name(p.ledger.store().table())
        .key("id", AttributeValue::S("payments#pay_old".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(p.ledger.post(&event).await.unwrap(), Outcome::Replayed(Posting::Applied));
    assert_key_reused(&p.ledger.post(&LedgerHarness::event("pay_old", "acct_o", 301, "USD")).await.unwrap_err());
    let balance = p.ledger.balance("acct_o").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (300, 1));
}

#[tokio::test]
async fn a_commit_with_the_default_expiration_is_not_born_expired() {
    use effectively_once_dynamodb::raw::{Commit, Committed};
    let p = LedgerHarness::new().await;
    let now_ms = 1_800_000_000_000;
    let commit = Commit::new("orders#o-1", "h", "{}");
    assert_eq!(p.ledger.store().transact(&commit, now_ms).await.unwrap(), Committed::Fresh);
    let Committed::Exists(record) = p.ledger.store().transact(&commit, now_ms + 1000).await.unwrap() else {
        panic!("a second commit of the same key must find the first");
    };
    assert_eq!(record.expiration_s, now_ms / 1000 + 14 * 24 * 3600, "the default dedup window");
}

#[tokio::test]
async fn a_receipt_is_not_dropped_by_a_ledger_without_an_outbox() {
    let p = LedgerHarness::new().await;
    let ledger = payments::Ledger::new(p.ledger.store().clone(), p.ledger.table(), None);
    let mut event = LedgerHarness::event("pay_no_outbox", "acct_n", 100, "USD");
    event.receipt_email = Some("nobody@example.com".into());
    let err = ledger.post(&event).await.unwrap_err();
    // A deployment fault, not a verdict on the payment: retried until an operator sets the
    // outbox table, so the message is neither acked without its receipt nor given up on.
    assert_eq!(err.retry(), Retry::AfterFix, "kept until the outbox table is configured: {err}");
    assert!(err.to_string().contains("no outbox table"), "{err}");
    assert!(ledger.entries("acct_n").await.unwrap().is_empty(), "nothing posted");
    assert!(ledger.balance("acct_n").await.unwrap().is_none(), "no balance changed");
    event.receipt_email = None;
    assert_eq!(ledger.post(&event).await.unwrap(), Outcome::Fresh(Posting::Applied));
}

/// A producer that re-serialises its message (`1250` as `1250.0` or `1.25e3`, keys in another
/// order, escapes, an extra field) sends a duplicate: replayed, posted once, not `KeyReused`.
#[tokio::test]
async fn a_re_serialised_duplicate_is_a_duplicate_not_key_reuse() {
    let p = LedgerHarness::new().await;
    let first = r#"{"event_id": "pay_rs", "account_id": "acct_rs", "amount_cents": 1250, "currency": "USD"}"#;
    let resent = [
        r#"{"currency":"USD","amount_cents":1250.0,"account_id":"acct_rs","event_id":"pay_rs"}"#,
        r#"{ "event_id" : "pay\u005frs", "account_id": "acct_rs", "amount_cents": 1.25e3, "currency": "\u0055SD", "trace": {"hop": 2} }"#,
    ];
    let ledger = &p.ledger;
    let post = |body: &'static str| async move { ledger.post(&PaymentEvent::parse(body).unwrap()).await };
    assert_eq!(post(first).await.unwrap(), Outcome::Fresh(Posting::Applied));
    for body in resent {
        assert_eq!(post(body).await.unwrap(), Outcome::Replayed(Posting::Applied), "{body}");
    }
    let other = r#"{"event_id": "pay_rs", "account_id": "acct_rs", "amount_cents": 1250.5e1, "currency": "USD"}"#;
    assert!(matches!(post(other).await, Err(Error::Idempotency(e)) if e.kind() == ErrorKind::KeyReused));
    assert_eq!(p.ledger.entries("acct_rs").await.unwrap(), vec![("pay_rs".to_owned(), 1250)]);
    let balance = p.ledger.balance("acct_rs").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (1250, 1));
}

/// Records written before the payload hash was versioned (bare version 1 hex), the ledger's own
/// `payments#{id}` records included, still answer their duplicates: an applied payment replays,
/// a recorded rejection replays, another payload is still key reuse.
#[tokio::test]
async fn records_with_a_version_1_hash_still_answer_their_duplicates() {
    let p = LedgerHarness::new().await;
    let credit = LedgerHarness::event("pay_v1", "acct_v1", 700, "USD");
    let debit = LedgerHarness::event("pay_v1_rej", "acct_v1", -5000, "USD");
    assert_eq!(p.ledger.post(&credit).await.unwrap(), Outcome::Fresh(Posting::Applied));
    let rejected = p.ledger.post(&debit).await.unwrap();
    assert!(matches!(&rejected, Outcome::Fresh(Posting::Rejected { .. })), "{rejected:?}");
    let config = effectively_once::Config::default();
    for event in [&credit, &debit] {
        let id = format!("payments#{}", event.event_id);
        let hash = config.payload_hash(event).unwrap();
        assert_eq!(stored_hash(&p, &id).await, hash.as_str(), "new records carry the current version");
        assert!(hash.as_str().starts_with("v2:"));
        // As the previous build wrote it.
        p.ledger
            .client()
            .update_item()
            .table_name(p.ledger.store().table())
            .key(attr::ID, AttributeValue::S(id.clone()))
            .update_expression("SET #hash = :v1")
            .expression_attribute_names("#hash", attr::PAYLOAD_HASH)
            .expression_attribute_values(":v1", AttributeValue::S(hash.v1().to_owned()))
            .send()
            .await
            .unwrap();
        assert_eq!(stored_hash(&p, &id).await, hash.v1());
    }
    assert_eq!(p.ledger.post(&credit).await.unwrap(), Outcome::Replayed(Posting::Applied));
    assert_eq!(p.ledger.post(&debit).await.unwrap(), Outcome::Replayed(rejected.into_inner()));
    let reused = p.ledger.post(&LedgerHarness::event("pay_v1", "acct_v1", 701, "USD")).await;
    assert!(matches!(&reused, Err(Error::Idempotency(e)) if e.kind() == ErrorKind::KeyReused), "{reused:?}");
    let balance = p.ledger.balance("acct_v1").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (700, 1), "posted once");
}

async fn stored_hash(p: &LedgerHarness, id: &str) -> String {
    let item = p
        .ledger
        .client()
        .get_item()
        .table_name(p.ledger.store().table())
        .key(attr::ID, AttributeValue::S(id.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    item[attr::PAYLOAD_HASH].as_s().unwrap().clone()
}

/// The disable switch does not reach the ledger: a payments function whose environment sets
/// `POWERTOOLS_IDEMPOTENCY_DISABLED=true` (left on after a debugging session, say) reads it, warns,
/// and still posts a duplicate delivery once. The ledger's once-only condition is the business
/// invariant, not a cache; only `Idempotency::run` and its layer honour the switch.
#[tokio::test]
async fn with_the_disable_switch_set_the_payments_function_still_posts_a_duplicate_once() {
    use effectively_once_lambda::testing::sqs::Batch;
    use effectively_once_lambda::Handler as _;
    use effectively_once_lambda::{sqs, Handled};
    use lambda_runtime::{Context, LambdaEvent};

    let p = LedgerHarness::new().await;
    let vars = HashMap::from([
        ("IDEMPOTENCY_TABLE", p.ledger.store().table().to_owned()),
        ("LEDGER_TABLE", p.ledger.table().to_owned()),
        ("OUTBOX_TABLE", p.outbox_table.clone()),
        ("POWERTOOLS_IDEMPOTENCY_DISABLED", "true".to_owned()),
    ]);
    let env = payments_consumer::Env::from_env_with(|name| vars.get(name).cloned()).unwrap();
    assert!(env.config.is_disabled(), "the switch is read");
    assert!(payments::warn_if_disabled(&env.config), "and warned about");
    let handler = payments_consumer::Payments::from_env(p.ledger.client().clone(), &env);

    let body = r#"{"event_id": "pay_off", "account_id": "acct_off", "amount_cents": 1250, "currency": "USD"}"#;
    // The same message twice in one batch (m-1, m-2).
    let batch = Batch::new().messages([body, body]).build();
    let message = &batch.records[0];
    assert_eq!(handler.handle(message, &Default::default()).await, Ok(Handled::Applied));
    assert_eq!(handler.handle(message, &Default::default()).await, Ok(Handled::Duplicate));
    // And through the SQS driver.
    let options = sqs::Options { emit_metrics: false, ..sqs::Options::new(payments_consumer::FUNCTION) };
    let response = sqs::process(&handler, LambdaEvent::new(batch, Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty());

    assert_eq!(p.ledger.entries("acct_off").await.unwrap(), vec![("pay_off".to_owned(), 1250)]);
    let balance = p.ledger.balance("acct_off").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (1250, 1));
}
