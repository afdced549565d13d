//! A store fault that an operator or a moment fixes is retried, not a receipt given up on: a
//! permanent relay failure is no Streams checkpoint, so the row would be marked FAILED, the
//! stream go past it, and no retry ever send it. Such faults include a marker table not there
//! yet (a deploy order, a restore under a new name) and a 5xx whose body names no code the
//! store's error reading lists: the reasoning that makes an SES account-level refusal `Blocked`
//! (retried) applies to the store's faults too.

use crate::support;
use crate::support::{Pending, UNAVAILABLE};
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{Policy, RecordingSender};
use effectively_once_lambda::streams::{process, Options};
use lambda_runtime::{Context, LambdaEvent};
use receipts_relay::MARKER_LEASE;

/// The marker table is missing (ResourceNotFoundException, `Other`): the receipt's row is
/// marked FAILED and the stream goes on. Once the table exists, nothing sends that receipt.
#[tokio::test]
async fn a_missing_marker_table_is_not_a_receipt_given_up_on() {
    let p = Pending::new("cust").await;
    let missing = DynamoDbStore::new(p.client.clone(), unique_name("not-yet-created"));
    let markers = Idempotency::new(missing, Config::default().with_lease(MARKER_LEASE));
    let sender = RecordingSender::new();
    let relay = support::relay(markers, &sender, &p.outbox_table, Policy::AtMostOnce);
    let options = Options { emit_metrics: false, ..Options::new("test") };
    let response = process(&relay, LambdaEvent::new(p.event.clone(), Context::default()), &options).await;
    let status = p.status().await;
    assert!(sender.sent().is_empty());
    assert!(
        !response.batch_item_failures.is_empty() && status == "PENDING",
        "a table an operator can create is not a verdict on the receipt; got checkpoint {:?}, row {status}: \
         the stream went past it and the receipt is never sent",
        response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect::<Vec<_>>()
    );
}

/// A DynamoDB endpoint that answers every request `503` with an empty body (a load balancer's
/// answer, after the SDK's own retries): `Other`, permanent; the row is marked FAILED.
#[tokio::test]
async fn a_server_error_on_the_marker_claim_is_not_a_receipt_given_up_on() {
    claim_meets(UNAVAILABLE).await;
}

/// Even a store error the store itself calls permanent (a request refused as invalid: a bug or
/// a schema drift, fixed by a deploy) is no verdict on the receipt: retried, the row stays
/// PENDING. Only key reuse on the marker or an unreadable row fails a receipt for good.
#[tokio::test]
async fn a_refused_marker_claim_is_not_a_receipt_given_up_on() {
    claim_meets(support::refused_as_invalid()).await;
}

/// A relay whose marker table answers every request with `answer`: nothing is sent, the record
/// is not failed permanently and the row stays PENDING.
async fn claim_meets(answer: &'static [u8]) {
    let port = effectively_once_dynamodb::testing::answering(answer);
    let p = Pending::new("cust").await;
    let failing = support::client_at(port).await;
    let table = p.store.table().to_owned();
    let markers = Idempotency::new(DynamoDbStore::new(failing, table), Config::default().with_lease(MARKER_LEASE));
    let sender = RecordingSender::new();
    // The relay marks rows through the markers' client; the failure record goes there too, so
    // the row stays as the real table has it.
    let relay = support::relay(markers, &sender, &p.outbox_table, Policy::AtMostOnce);
    let result = effectively_once_lambda::Handler::<effectively_once_lambda::events::EventRecord>::handle(
        &relay,
        &p.event.records[0],
        &Default::default(),
    )
    .await;
    let status = p.status().await;
    assert!(sender.sent().is_empty());
    let err = result.clone().unwrap_err();
    assert_ne!(
        err.retry,
        effectively_once_lambda::Retry::Never,
        "a 503 is classified permanent ({}), so the Streams driver goes past the receipt for good (row {status})",
        err.reason
    );
    assert_eq!(status, "PENDING", "{}", err.reason);
}
