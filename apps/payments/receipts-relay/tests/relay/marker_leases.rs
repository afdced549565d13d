//! SES accepts a receipt after the marker's lease has ended (the template allows a function
//! timeout up to 900 s, the marker lease is 60 s, and the SES call has no timeout of its own): a
//! marker its own attempt still holds is completed past its lease. Refused (LeaseLost) although
//! no other attempt took the marker, the record would fail and its retry take the marker over:
//! the row would end AMBIGUOUS (at most once) with SES's message id lost, or a second email go
//! out (at least once) for a send known to have succeeded.

use crate::support;
use std::sync::Arc;
use std::time::Duration;

use crate::support::Pending;
use effectively_once::ManualClock;
use effectively_once_effects::email::SendError;
use effectively_once_effects::testing::emails_to;
use effectively_once_effects::{EmailMessage, EmailSender, Policy, SesSender};
use effectively_once_lambda::streams::{process, Options};
use lambda_runtime::{Context, LambdaEvent};
use receipts_relay::MARKER_LEASE;

const FROM: &str = "receipts@example.com";

/// Local SES that answers only after `delay` has passed on the manual clock (a slow answer).
struct SlowSes {
    inner: SesSender,
    clock: Arc<ManualClock>,
    delay: Duration,
}

impl EmailSender for SlowSes {
    async fn send(&self, message: &EmailMessage) -> Result<String, SendError> {
        let id = self.inner.send(message).await?;
        self.clock.advance(self.delay);
        Ok(id)
    }
}

#[tokio::test]
async fn a_send_accepted_after_the_lease_is_recorded_sent_once() {
    let mut outcomes = Vec::new();
    for policy in [Policy::AtMostOnce, Policy::AtLeastOnce] {
        let p = Pending::new("slow").await;
        let clock = Arc::new(ManualClock::new());
        let markers = p.markers_on(clock.clone());
        let sender = SlowSes {
            inner: support::verified_ses(FROM).await,
            clock: clock.clone(),
            delay: MARKER_LEASE + Duration::from_secs(1),
        };
        let relay = support::relay(markers.clone(), sender, &p.outbox_table, policy);
        let options = Options { emit_metrics: false, ..Options::new("review") };

        // Deliveries as the stream makes them, each with a 15-minute function timeout.
        for _ in 0..3 {
            let mut context = Context::default();
            context.deadline = markers.config().now_ms() + 15 * 60 * 1000;
            let response = process(&relay, LambdaEvent::new(p.event.clone(), context), &options).await;
            if response.batch_item_failures.is_empty() {
                break;
            }
        }
        outcomes.push((policy, p.status().await, emails_to(&p.to).len()));
    }
    // Today: [(AtMostOnce, "AMBIGUOUS", 1), (AtLeastOnce, "PENDING", 3)]: at least once sends a
    // copy on every delivery (with MaximumRetryAttempts -1, one a delivery for up to 24 h) and
    // never marks the row.
    let expected = vec![(Policy::AtMostOnce, "SENT".to_owned(), 1), (Policy::AtLeastOnce, "SENT".to_owned(), 1)];
    assert_eq!(outcomes, expected, "SES accepted the first send (its message id was in hand)");
}
