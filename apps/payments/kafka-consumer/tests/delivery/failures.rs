//! Failures on the local AWS: a record whose value is no payment fails alone, is parked as
//! delivered, and its partition goes on; a record that fails in a way a later delivery may undo
//! holds its partition from that record, and only that partition, under either reading of the
//! answer (the test played as Lambda resumes the partition and as Lambda retries the named
//! records alone), on the ordered path too, where it holds back its partition's later records of
//! other accounts; an event id reused for another payment posts nothing.

use crate::support::{
    assert_parked_as_delivered, balance, deliver, deliver_ordered, entries, payment, payment_with_receipt, raw_record,
    record, Tables,
};
use effectively_once_lambda::Retry;
use local::esm::kafka::Reading;

/// Poison of every kind, in two partitions, between valid payments: each fails alone,
/// permanently, with its reason, and is parked as delivered; no partition is held (a retry
/// cannot mend a value), and every valid payment posts, those after the poison in its partition
/// too.
#[tokio::test]
async fn a_malformed_value_fails_alone_and_the_rest_of_the_batch_posts() {
    let tables = Tables::fresh().await;
    let payments = tables.payments();
    let batch = [
        record(0, 1, &payment("pay_0101", "acct_1", 1000)),
        record(0, 2, "{not json: a poison payment"),
        raw_record(0, 3, None),
        record(0, 4, &payment("pay_0102", "acct_1", 500)),
        raw_record(1, 7, Some("%%% not base64 %%%".into())),
        raw_record(1, 8, Some("//79".into())), // base64 of 0xff 0xfe 0xfd: not UTF-8
        record(1, 9, &payment("pay_0103", "acct_2", 0)),
        record(1, 10, &payment("pay_0104", "acct_2", 700)),
    ];
    let delivered = deliver(&payments, &batch).await;
    assert!(delivered.named.is_empty(), "no partition is held at a poison record: {delivered:?}");
    let mut failed = delivered.failed.clone();
    failed.sort_by(|a, b| a.0.cmp(&b.0));
    let reasons: Vec<(&str, Retry, &str)> =
        failed.iter().map(|(id, e)| (id.as_str(), e.retry, e.reason.as_str())).collect();
    assert_eq!(
        reasons,
        [
            (
                "payments-0@2",
                Retry::Never,
                "invalid payment event: body is not JSON (key must be a string at line 1 column 2)"
            ),
            ("payments-0@3", Retry::Never, "the record has no value"),
            ("payments-1@7", Retry::Never, "the record's value is not base64"),
            ("payments-1@8", Retry::Never, "the record's value is not UTF-8"),
            ("payments-1@9", Retry::Never, "invalid payment event: amount_cents: must not be zero"),
        ]
    );
    // Each parked, with the reason it failed for, before its partition went past it.
    let parked: Vec<(String, Retry, &str)> =
        delivered.parked_records().into_iter().map(|(at, reason)| (at, Retry::Never, reason)).collect();
    let expected: Vec<(String, Retry, &str)> = reasons.iter().map(|(at, r, why)| (at.to_string(), *r, *why)).collect();
    assert_eq!(parked, expected, "every poison record parked once, with its reason");
    for (parcel, poison) in delivered.parked.iter().zip([&batch[1], &batch[2], &batch[4], &batch[5], &batch[6]]) {
        assert_parked_as_delivered(parcel, poison);
    }
    assert_eq!(balance(&payments, "acct_1").await, Some((1500, 2)), "both payments around the poison");
    assert_eq!(entries(&payments, "acct_2").await, [("pay_0104".to_owned(), 700)]);
}

local::each_reading!(a_failing_record_holds_its_partition_from_it_and_the_other_partitions_are_committed);
/// A payment that asks for a receipt, on a ledger deployed without its outbox table: kept until
/// a fix, [`Retry::AfterFix`] (the deployment is at fault, not the payment). The answer names that record and the one
/// after it, which waits (not started); the other partition is committed whole. Once the outbox
/// is there, Lambda delivers again what the answer named, as `reading` reads it: the waiting
/// payments post, and nothing before the failure posts twice.
async fn a_failing_record_holds_its_partition_from_it_and_the_other_partitions_are_committed(reading: Reading) {
    let tables = Tables::fresh().await;
    let partition_0 = [
        record(0, 10, &payment("pay_0201", "acct_1", 1000)),
        record(0, 11, &payment_with_receipt("pay_0202", "acct_1", 500, "alice@example.com")),
        record(0, 12, &payment("pay_0203", "acct_1", 250)),
    ];
    let partition_1 =
        [record(1, 20, &payment("pay_0204", "acct_2", 700)), record(1, 21, &payment("pay_0205", "acct_2", -200))];
    let batch: Vec<_> = partition_0.iter().chain(&partition_1).cloned().collect();
    let delivered = deliver(&tables.payments(), &batch).await;
    let named = [("payments-0".to_owned(), 11), ("payments-0".to_owned(), 12)];
    assert_eq!(delivered.named, named, "partition 0 from the failed record on");
    assert_eq!(delivered.failed_records(), ["payments-0@11"], "pay_0203 waits, not started: {delivered:?}");
    assert_eq!(delivered.failed[0].1.retry, Retry::AfterFix);
    assert!(delivered.parked.is_empty(), "a retryable failure is held, not parked: {:?}", delivered.parked);
    let payments = tables.payments();
    assert_eq!(entries(&payments, "acct_1").await, [("pay_0201".to_owned(), 1000)]);
    assert_eq!(balance(&payments, "acct_2").await, Some((500, 2)), "partition 1 is done and committed");

    // The fix is deployed; Lambda delivers again what the answer named.
    let fixed = tables.with_outbox().await.payments();
    let again = reading.again(&batch, &Ok(delivered.response.clone()));
    let offsets: Vec<(i64, i64)> = again.iter().map(|r| (r.partition, r.offset)).collect();
    assert_eq!(offsets, [(0, 11), (0, 12)], "{reading}: the failed record and the one held back behind it");
    let resumed = deliver(&fixed, &again).await;
    assert!(resumed.all_succeeded(), "{resumed:?}");
    assert_eq!(balance(&fixed, "acct_1").await, Some((1750, 3)));
    assert_eq!(balance(&fixed, "acct_2").await, Some((500, 2)));
}

local::each_reading!(a_failing_record_holds_its_partitions_later_records_of_other_accounts_on_the_ordered_path);
/// On the ordered path (the whole batch in one call and one transaction), a payment that fails
/// retryably (a receipt, no outbox table) holds back the later record of its partition although
/// it is another account's: it is not posted, and the answer names both for delivery again; the
/// other partition is committed in the same call. Once the outbox is there, what the answer named
/// posts, in order, and nothing posts twice.
async fn a_failing_record_holds_its_partitions_later_records_of_other_accounts_on_the_ordered_path(reading: Reading) {
    let tables = Tables::fresh().await;
    let batch = [
        record(0, 10, &payment("pay_0601", "acct_1", 1000)),
        record(0, 11, &payment_with_receipt("pay_0602", "acct_1", 500, "alice@example.com")),
        record(0, 12, &payment("pay_0603", "acct_2", 250)),
        record(1, 20, &payment("pay_0604", "acct_3", 700)),
        record(1, 21, &payment("pay_0605", "acct_4", 40)),
        record(1, 22, &payment("pay_0606", "acct_3", -200)),
    ];
    let delivered = deliver_ordered(&tables.payments(), &batch).await;
    assert_eq!(delivered.calls, 1, "the whole batch in one call");
    let transactions = tables.requests.by_operation().get("TransactWriteItems").copied();
    assert_eq!(transactions, Some(1), "{:?}", tables.requests.by_operation());
    let named = [("payments-0".to_owned(), 11), ("payments-0".to_owned(), 12)];
    assert_eq!(delivered.named, named, "partition 0 from the failed record on");
    let failed: Vec<(&str, Retry)> = delivered.failed.iter().map(|(id, e)| (id.as_str(), e.retry)).collect();
    assert_eq!(failed, [("payments-0@11", Retry::AfterFix), ("payments-0@12", Retry::Now)]);
    assert!(delivered.parked.is_empty(), "a retryable failure is held, not parked: {:?}", delivered.parked);
    let payments = tables.payments();
    assert_eq!(entries(&payments, "acct_1").await, [("pay_0601".to_owned(), 1000)]);
    assert_eq!(balance(&payments, "acct_2").await, None, "acct_2's payment waits behind acct_1's in its partition");
    assert_eq!(balance(&payments, "acct_3").await, Some((500, 2)), "partition 1 is done and committed");
    assert_eq!(balance(&payments, "acct_4").await, Some((40, 1)));

    let fixed = tables.with_outbox().await.payments();
    let again = reading.again(&batch, &Ok(delivered.response.clone()));
    let offsets: Vec<(i64, i64)> = again.iter().map(|r| (r.partition, r.offset)).collect();
    assert_eq!(offsets, [(0, 11), (0, 12)], "{reading}: the failed record and the one held back behind it");
    let resumed = deliver_ordered(&fixed, &again).await;
    assert!(resumed.all_succeeded(), "{resumed:?}");
    assert_eq!(balance(&fixed, "acct_1").await, Some((1500, 2)));
    assert_eq!(balance(&fixed, "acct_2").await, Some((250, 1)));
    assert_eq!(balance(&fixed, "acct_3").await, Some((500, 2)));
}

/// An event id already applied, sent again for another account: key reuse. Nothing posts, the
/// record fails permanently (parked with the reason, its partition goes on), and the first
/// payment stands.
#[tokio::test]
async fn an_event_id_reused_for_another_payment_fails_alone_and_posts_nothing() {
    let tables = Tables::fresh().await;
    let payments = tables.payments();
    assert!(deliver(&payments, &[record(0, 1, &payment("pay_0301", "acct_1", 900))]).await.all_succeeded());
    let batch = [record(0, 2, &payment("pay_0301", "acct_9", 900)), record(0, 3, &payment("pay_0302", "acct_9", 50))];
    let delivered = deliver(&tables.payments(), &batch).await;
    assert!(delivered.named.is_empty(), "{delivered:?}");
    assert_eq!(delivered.failed_records(), ["payments-0@2"]);
    assert_eq!(delivered.failed[0].1.retry, Retry::Never);
    assert_eq!(delivered.parked_records(), [("payments-0@2".to_owned(), delivered.failed[0].1.reason.as_str())]);
    assert_parked_as_delivered(&delivered.parked[0], &batch[0]);
    assert_eq!(entries(&payments, "acct_1").await, [("pay_0301".to_owned(), 900)]);
    assert_eq!(entries(&payments, "acct_9").await, [("pay_0302".to_owned(), 50)]);
}
