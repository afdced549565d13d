//! The ordered path (`kafka::run_ordered`), the batch path (`kafka::run_batch`) and the
//! record-by-record path (`kafka::run`) come to the same ledger, the same answer and the same
//! parked poison for one batch; the ordered path in one call and one transaction.

use crate::support;
use crate::support::{
    assert_parked_as_delivered, balance, deliver, deliver_one_by_one, deliver_ordered, ledger_items, payment,
    raw_record, record, Tables,
};

/// Credits, a debit, an overdraft (rejected and recorded), a currency the account does not hold
/// (rejected), a producer retry in another partition, and poison: each account's payments in
/// one partition, as a producer keyed by account writes them.
fn mixed_batch() -> Vec<effectively_once_lambda::events::KafkaRecord> {
    let euro = r#"{"event_id": "pay_0405", "account_id": "acct_1", "amount_cents": 10, "currency": "EUR"}"#;
    vec![
        record(0, 1, &payment("pay_0401", "acct_1", 1000)),
        record(0, 2, &payment("pay_0402", "acct_1", -300)),
        record(0, 3, &payment("pay_0403", "acct_1", -5000)),
        record(0, 4, euro),
        record(1, 1, &payment("pay_0404", "acct_2", 600)),
        record(1, 2, "[\"not a payment\"]"),
        record(1, 3, &payment("pay_0406", "acct_2", -600)),
        record(2, 1, &payment("pay_0407", "acct_3", 75)),
        record(2, 2, &payment("pay_0401", "acct_1", 1000)),
        raw_record(2, 3, None),
    ]
}

#[tokio::test]
async fn the_batch_path_and_the_one_by_one_path_leave_the_same_ledger() {
    let (batched, one_by_one) = (Tables::fresh().await.payments(), Tables::fresh().await.payments());
    let by_batch = deliver(&batched, &mixed_batch()).await;
    let by_record = deliver_one_by_one(&one_by_one, &mixed_batch()).await;
    assert_eq!(by_batch.named, by_record.named, "the same answer");
    assert!(by_batch.named.is_empty());
    let failed = |d: &support::Delivered| {
        let mut ids: Vec<String> = d.failed.iter().map(|(id, e)| format!("{id} {:?}", e.retry)).collect();
        ids.sort();
        ids
    };
    assert_eq!(failed(&by_batch), failed(&by_record), "the same records failed, the same way");
    assert_eq!(failed(&by_batch), ["payments-1@2 Never", "payments-2@3 Never"]);
    // The poison parked by both, the same way: as delivered, with the same reason.
    assert_eq!(by_batch.parked, by_record.parked, "the same parcels");
    let parked: Vec<String> = by_batch.parked_records().into_iter().map(|(at, _)| at).collect();
    assert_eq!(parked, ["payments-1@2", "payments-2@3"]);
    assert_parked_as_delivered(&by_batch.parked[0], &mixed_batch()[5]);
    assert_parked_as_delivered(&by_batch.parked[1], &mixed_batch()[9]);

    let ledger = ledger_items(&batched).await;
    assert_eq!(ledger, ledger_items(&one_by_one).await, "the same entries and balances");
    let balance =
        |account: &str| ledger[&(format!("account#{account}"), "balance".to_owned())]["balance_cents"].clone();
    assert_eq!(balance("acct_1"), "700", "the overdraft and the euro payment are rejected");
    assert_eq!(balance("acct_2"), "0");
    assert_eq!(balance("acct_3"), "75");
    let entries = ledger.keys().filter(|(_, sk)| sk.starts_with("entry#")).count();
    assert_eq!(entries, 5, "pay_0401 once, nothing for the rejections and the poison: {ledger:#?}");
}

#[tokio::test]
async fn the_ordered_path_and_the_batch_path_leave_the_same_ledger() {
    let (ordered, batched) = (Tables::fresh().await.payments(), Tables::fresh().await.payments());
    let by_order = deliver_ordered(&ordered, &mixed_batch()).await;
    let by_batch = deliver(&batched, &mixed_batch()).await;
    assert_eq!(by_order.calls, 1, "the whole batch in one call");
    assert_eq!(by_order.named, by_batch.named, "the same answer");
    let failed = |d: &support::Delivered| {
        let mut ids: Vec<String> = d.failed.iter().map(|(id, e)| format!("{id} {:?}", e.retry)).collect();
        ids.sort();
        ids
    };
    assert_eq!(failed(&by_order), ["payments-1@2 Never", "payments-2@3 Never"]);
    assert_eq!(by_order.parked, by_batch.parked, "the same parcels");
    assert_eq!(ledger_items(&ordered).await, ledger_items(&batched).await, "the same entries and balances");
}

/// Three partitions of a producer keyed by account, each carrying several accounts, ten records
/// in all: the ordered path posts them in one call and one transaction, where the batch path
/// takes a call and a transaction per round (the longest partition's length); both leave the same
/// ledger.
#[tokio::test]
async fn three_partitions_of_several_accounts_are_one_transaction_on_the_ordered_path() {
    let batch = [
        record(0, 1, &payment("pay_0501", "acct_a", 1000)),
        record(0, 2, &payment("pay_0502", "acct_b", 400)),
        record(0, 3, &payment("pay_0503", "acct_a", -250)),
        record(0, 4, &payment("pay_0504", "acct_c", 90)),
        record(1, 1, &payment("pay_0505", "acct_d", 300)),
        record(1, 2, &payment("pay_0506", "acct_e", 60)),
        record(1, 3, &payment("pay_0507", "acct_d", -300)),
        record(2, 1, &payment("pay_0508", "acct_f", 20)),
        record(2, 2, &payment("pay_0509", "acct_g", 35)),
        record(2, 3, &payment("pay_0510", "acct_f", 5)),
    ];
    let (ordered, batched) = (Tables::fresh().await, Tables::fresh().await);
    let by_order = deliver_ordered(&ordered.payments(), &batch).await;
    let by_batch = deliver(&batched.payments(), &batch).await;
    assert!(by_order.all_succeeded() && by_batch.all_succeeded(), "{by_order:?} {by_batch:?}");
    let transactions = |tables: &Tables| tables.requests.by_operation().get("TransactWriteItems").copied();
    assert_eq!((by_order.calls, transactions(&ordered)), (1, Some(1)), "{:?}", ordered.requests.by_operation());
    assert_eq!((by_batch.calls, transactions(&batched)), (4, Some(4)), "{:?}", batched.requests.by_operation());
    let payments = ordered.payments();
    assert_eq!(ledger_items(&payments).await, ledger_items(&batched.payments()).await);
    assert_eq!(balance(&payments, "acct_a").await, Some((750, 2)));
    assert_eq!(balance(&payments, "acct_d").await, Some((0, 2)));
    assert_eq!(balance(&payments, "acct_f").await, Some((25, 2)));
}
