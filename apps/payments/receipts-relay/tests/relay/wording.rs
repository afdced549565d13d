//! The email marker hashes the receipt's identity, not its wording: a relay release that changes
//! the receipt's wording, meeting a record an older release already sent (a batch retried whole
//! after a timeout or crash, or a stream replayed from TRIM_HORIZON by a replaced mapping), acks
//! the record as a duplicate. The receipt was sent once and its marker says so. Were it
//! `KeyReused`, a *permanent* failure, the stream driver would report it as the checkpoint: with
//! MaximumRetryAttempts -1 the shard held for 24 h and the batch discarded, taking the new
//! receipts behind it (tools/local-aws/tests/relay_stream_deleted_row.rs drives that mechanism).

use crate::support;
use crate::support::Pending;
use effectively_once_effects::{send_once, Policy, RecordingSender};
use effectively_once_lambda::streams::{process, Options};
use lambda_runtime::{Context, LambdaEvent};
use payments::receipt_key;

#[tokio::test]
async fn a_replay_after_a_wording_change_is_a_duplicate() {
    let p = Pending::new("replay").await;
    let markers = p.markers();

    // The previous release sent this receipt, worded its own way, and completed the marker.
    let mut earlier = p.receipt().message(&p.to);
    earlier.text = earlier.text.replace(" was credited ", " has been credited ");
    let old_sender = RecordingSender::new();
    let key = receipt_key(&p.event_id).unwrap();
    send_once(&markers, &old_sender, &key, &earlier, Policy::AtMostOnce).await.unwrap();
    assert_eq!(old_sender.sent().len(), 1);

    // The current release meets the same record again.
    let sender = RecordingSender::new();
    let relay = support::relay(markers.clone(), &sender, &p.outbox_table, Policy::AtMostOnce);
    let options = Options { emit_metrics: false, ..Options::new("review") };
    let mut context = Context::default();
    context.deadline = markers.config().now_ms() + 30_000;
    let direct = effectively_once_lambda::Handler::<effectively_once_lambda::events::EventRecord>::handle(
        &relay,
        &p.event.records[0],
        &Default::default(),
    )
    .await;
    let response = process(&relay, LambdaEvent::new(p.event.clone(), context), &options).await;
    assert!(sender.sent().is_empty(), "never a second copy");
    assert!(
        response.batch_item_failures.is_empty(),
        "the receipt was sent once and its marker records it: a duplicate, not a failure holding the shard; \
         the relay answered {direct:?}"
    );
    assert_eq!(p.status().await, "SENT");
}
