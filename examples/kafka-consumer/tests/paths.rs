//! The batch path (`kafka::run_batch`, the function's default) and the record-by-record path
//! (`kafka::run`) come to the same ledger, the same answer and the same parked poison for one
//! batch.

mod common;

use common::{
    assert_parked_as_delivered, deliver, deliver_one_by_one, ledger_items, payment, raw_record, record, Tables,
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
    let failed = |d: &common::Delivered| {
        let mut ids: Vec<String> = d.failed.iter().map(|(id, e)| format!("{id} {:?}", e.retry)).collect();
        ids.sort();
        ids
    };
    assert_eq!(failed(&by_batch), failed(&by_record), "the same records failed, the same way");
    assert_eq!(failed(&by_batch), ["payments-1@2 Permanent", "payments-2@3 Permanent"]);
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
