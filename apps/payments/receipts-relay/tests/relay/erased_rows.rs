//! The relay reads the outbox row before sending: a row erased on the customer's request gets no
//! email (learnt of only from `mark`, after sending, it would).

use crate::support;
use crate::support::Pending;
use effectively_once_effects::{Policy, RecordingSender};

#[tokio::test]
async fn a_deleted_row_is_not_emailed() {
    // The stream captured the insert; the row was deleted before the relay ran (no row here).
    let p = Pending::erased("erased").await;
    let sender = RecordingSender::new();
    let relay = support::relay(p.markers(), &sender, &p.outbox_table, Policy::AtMostOnce);
    let result = effectively_once_lambda::Handler::<effectively_once_lambda::events::EventRecord>::handle(
        &relay,
        &p.event.records[0],
        &Default::default(),
    )
    .await;
    assert_eq!(result, Ok(effectively_once_lambda::Handled::Skipped), "reported skipped");
    assert!(
        sender.sent().is_empty(),
        "reported Skipped, yet {} email(s) went to the erased row's address",
        sender.sent().len()
    );
}
