//! Exactly-once ledger posts against the local AWS: entries, balances and outbox rows as the
//! tables hold them, and the DynamoDB requests each delivery sends.

use std::collections::HashMap;
use std::sync::Arc;

use effects::{Error, Posting, Rejection};
use end_to_end::Payments;
use idempotency::{ErrorKind, Outcome};

#[tokio::test]
async fn two_deliveries_of_one_payment_post_once_in_one_request_each() {
    let p = Payments::new().await;
    let event = Payments::event("pay_0001", "acct_42", 1250, "USD");
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
    assert_eq!((units.committed, units.cancelled), (4, 2));
}

#[tokio::test]
async fn modelled_write_units_per_kind_of_payment() {
    let p = Payments::new().await;
    let credit = Payments::event("pay_c", "acct_1", 100, "USD");
    let debit = Payments::event("pay_d", "acct_1", -100, "USD");
    let mut with_receipt = Payments::event("pay_r", "acct_1", 100, "USD");
    with_receipt.receipt_email = Some("r@example.com".into());
    let units = |e| p.ledger.write_units(e).map(|u| (u.committed, u.cancelled)).unwrap();
    assert_eq!(units(&credit), (4, 2), "entry carrying the record + balance");
    assert_eq!(units(&debit), (6, 3), "+ the guard on a recorded rejection");
    assert_eq!(units(&with_receipt), (6, 3), "+ the outbox row");
    println!(
        "write units (first, duplicate): credit {:?}, debit {:?}, credit with receipt {:?}; Powertools pattern (6, 1)",
        units(&credit),
        units(&debit),
        units(&with_receipt)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_events_delivered_one_to_four_times_from_eight_tasks_post_exactly_once() {
    let p = Arc::new(Payments::new().await);
    // Deterministic shuffle (xorshift), so a failure replays the same schedule.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let events: Vec<_> = (0..100)
        .map(|i| Payments::event(&format!("pay_{i:03}"), &format!("acct_{}", i % 5), 100 + i as i64, "USD"))
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
    let p = Payments::new().await;
    let debit = Payments::event("pay_over", "acct_7", -500, "USD");
    let rejected = Posting::Rejected { reason: Rejection::InsufficientFunds { balance_cents: 0 } };
    assert_eq!(p.ledger.post(&debit).await.unwrap(), Outcome::Fresh(rejected.clone()));
    assert!(p.ledger.entries("acct_7").await.unwrap().is_empty());
    assert_eq!(p.ledger.balance("acct_7").await.unwrap(), None);
    p.requests.reset();
    assert_eq!(p.ledger.post(&debit).await.unwrap(), Outcome::Replayed(rejected.clone()));
    assert_eq!(p.requests.total(), 1, "a rejected debit's duplicate is one request");
    // Funds arrive; a duplicate of the rejected debit still gets the same answer.
    p.ledger.post(&Payments::event("pay_fund", "acct_7", 1000, "USD")).await.unwrap();
    assert_eq!(p.ledger.post(&debit).await.unwrap(), Outcome::Replayed(rejected));
    let balance = p.ledger.balance("acct_7").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (1000, 1));
    // A covered debit applies.
    assert_eq!(
        p.ledger.post(&Payments::event("pay_ok", "acct_7", -400, "USD")).await.unwrap(),
        Outcome::Fresh(Posting::Applied)
    );
    assert_eq!(p.ledger.balance("acct_7").await.unwrap().unwrap().balance_cents, 600);
}

#[tokio::test]
async fn a_currency_mismatch_posts_nothing_and_a_duplicate_gets_the_same_rejection() {
    let p = Payments::new().await;
    p.ledger.post(&Payments::event("pay_usd", "acct_9", 300, "USD")).await.unwrap();
    let eur = Payments::event("pay_eur", "acct_9", 300, "EUR");
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
    let p = Payments::new().await;
    p.ledger.post(&Payments::event("pay_same", "acct_3", 100, "USD")).await.unwrap();
    let err = p.ledger.post(&Payments::event("pay_same", "acct_3", 999, "USD")).await.unwrap_err();
    assert!(matches!(&err, Error::Idempotency(e) if e.kind() == ErrorKind::KeyReused), "{err}");
    assert!(!err.is_retryable());
    assert_eq!(p.ledger.balance("acct_3").await.unwrap().unwrap().balance_cents, 100);
}

#[tokio::test]
async fn a_receipt_row_is_written_with_the_entry_and_only_then() {
    let p = Payments::new().await;
    let mut event = Payments::event("pay_mail", "acct_5", 700, "USD");
    event.receipt_email = Some("alice@example.com".into());
    p.ledger.post(&event).await.unwrap();
    p.ledger.post(&event).await.unwrap();
    let row = effects::outbox::ReceiptRow::from_item(&p.outbox_row("pay_mail").await.unwrap()).unwrap();
    assert_eq!(
        (row.event_id.as_str(), row.receipt_email.as_str(), row.amount_cents),
        ("pay_mail", "alice@example.com", 700)
    );
    assert!(p.outbox_row("pay_none").await.is_none());
    p.ledger.post(&Payments::event("pay_none", "acct_5", 1, "USD")).await.unwrap();
    assert!(p.outbox_row("pay_none").await.is_none(), "no receipt_email, no row");
    let mut rejected = Payments::event("pay_rej", "acct_5", -10_000, "USD");
    rejected.receipt_email = Some("bob@example.com".into());
    assert!(matches!(p.ledger.post(&rejected).await.unwrap().into_inner(), Posting::Rejected { .. }));
    assert!(p.outbox_row("pay_rej").await.is_none(), "a rejected payment gets no receipt");
    effects::outbox::mark(
        p.ledger.client(),
        &p.outbox_table,
        "pay_mail",
        effects::outbox::RowStatus::Sent,
        Some("m-1"),
        "2026-11-29T00:00:00Z",
    )
    .await
    .unwrap();
    let marked = p.outbox_row("pay_mail").await.unwrap();
    assert_eq!(marked["status"].as_s().unwrap(), "SENT");
}

#[tokio::test]
async fn transaction_limits_give_clear_errors() {
    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
    use idempotency_dynamodb::{Commit, Write};
    let p = Payments::new().await;
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
    let err = p.ledger.store().commit_once(&many, 0).await.unwrap_err();
    assert!(err.to_string().contains("101 actions; DynamoDB allows 100"), "{err}");
    let big = Commit::new("payments#big", "h", "{}").write(put(0, 500 * 1024));
    let err = p.ledger.store().commit_once(&big, 0).await.unwrap_err();
    assert!(err.to_string().contains("DynamoDB allows 409600"), "{err}");
    assert_eq!(p.requests.total(), 0, "refused before sending");
}
