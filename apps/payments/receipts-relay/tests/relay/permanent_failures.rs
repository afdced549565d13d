//! A permanent relay failure is recorded on the outbox row (FAILED, with its reason, addresses
//! redacted) and the stream goes on: the driver does not make it the checkpoint.

use crate::support;
use crate::support::Pending;
use effectively_once_effects::{send_once, Policy, RecordingSender, SendOutcome};
use effectively_once_lambda::streams::{process, Options};
use lambda_runtime::{Context, LambdaEvent};
use payments::receipt_key;

/// The event's marker records a receipt to another recipient (same key, another address: the
/// registered address changed between attempts, a producer bug, an edited redrive). The event id
/// is the receipt's business key: one receipt went out for it, so the row is marked as the
/// marker says (SENT, its message id), nothing is sent again, and the stream goes on.
#[tokio::test]
async fn a_marker_for_another_recipient_marks_the_row_as_it_says_and_the_stream_goes_on() {
    let p = Pending::new("second").await;
    let (event_id, to) = (&p.event_id, &p.to);
    let markers = p.markers();

    let mut other = p.receipt().message(to);
    other.to = "first.recipient@example.com".into();
    let first = RecordingSender::new();
    let earlier =
        send_once(&markers, &first, &receipt_key(event_id).unwrap(), &other, Policy::AtMostOnce).await.unwrap();
    let SendOutcome::Sent { message_id } = earlier.into_inner() else { panic!("the first receipt was sent") };

    let sender = RecordingSender::new();
    let relay = support::relay(markers.clone(), &sender, &p.outbox_table, Policy::AtMostOnce);
    let options = Options { emit_metrics: false, ..Options::new("test") };
    let response = process(&relay, LambdaEvent::new(p.event.clone(), Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty(), "the marker's answer is not the checkpoint");
    assert!(sender.sent().is_empty(), "one receipt per event: nothing sent again");
    let row = p.row().await.unwrap();
    assert_eq!(row.status.as_str(), "SENT", "{:?}", row.failure_reason);
    assert_eq!(row.message_id.as_deref(), Some(message_id.as_str()));
}

/// The outbox row was deleted after the stream captured its insert (an erasure, a cleanup):
/// nothing is left to mark, and the receipt is acked as skipped, no row written back.
#[tokio::test]
async fn a_deleted_row_is_skipped_not_failed() {
    let p = Pending::erased("erased").await;
    let sender = RecordingSender::new();
    let relay = support::relay(p.markers(), &sender, &p.outbox_table, Policy::AtMostOnce);
    let result = effectively_once_lambda::Handler::<effectively_once_lambda::events::EventRecord>::handle(
        &relay,
        &p.event.records[0],
        &Default::default(),
    )
    .await;
    assert_eq!(result, Ok(effectively_once_lambda::Handled::Skipped));
    assert!(p.row().await.is_none(), "no row written back");
}
