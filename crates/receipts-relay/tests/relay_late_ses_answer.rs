//! Review finding (issue 11; fixed: a marker its own attempt still holds is completed past
//! its lease): SES accepts a receipt after the marker's lease has ended (the
//! template allows a function timeout up to 900 s, the marker lease is 60 s, and the SES call
//! has no timeout of its own). The completion is refused (LeaseLost) although no other attempt
//! took the marker, the record fails, and its retry takes the marker over: the row ends
//! AMBIGUOUS (at most once) with SES's message id lost, or a second email goes out (at least
//! once) for a send known to have succeeded.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::dynamodb::Event;
use aws_sdk_dynamodb::types::AttributeValue;
use effects::email::SendError;
use effects::outbox::row_item;
use effects::{EmailMessage, EmailSender, PaymentEvent, Policy, SesSender};
use idempotency::{Config, Idempotency, ManualClock};
use idempotency_dynamodb::testing::{emails_to, fresh_store, sdk_config, unique_name};
use lambda_runtime::{Context, LambdaEvent};
use receipts_relay::{Alerts, Receipts, MARKER_LEASE};
use triggers::streams::{process, Options};

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
        let (store, _) = fresh_store().await;
        let client = store.client().clone();
        let outbox_table = unique_name("outbox");
        effects::tables::create_outbox_table(&client, &outbox_table).await.unwrap();
        let event_id = unique_name("pay");
        let to = format!("{}@example.com", unique_name("slow"));
        let mut payment = PaymentEvent::parse(&format!(
            r#"{{"event_id": "{event_id}", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}}"#
        ))
        .unwrap();
        payment.receipt_email = Some(to.clone());
        let item = row_item(&payment, &to, "2026-11-18T11:06:40.123Z");
        client.put_item().table_name(&outbox_table).set_item(Some(item)).send().await.unwrap();
        let sample = include_str!("../../../events/dynamodb-stream-outbox.json")
            .replace("alice@example.com", &to)
            .replace("pay_0001", &event_id);
        let event: Event = serde_json::from_str(&sample).unwrap();

        let clock = Arc::new(ManualClock::new());
        let markers = Idempotency::new(store, Config::default().lease(MARKER_LEASE).clock(clock.clone()));
        let ses = aws_sdk_sesv2::Client::new(&sdk_config().await);
        ses.create_email_identity().email_identity(FROM).send().await.unwrap();
        let sender = SlowSes {
            inner: SesSender::new(ses, FROM),
            clock: clock.clone(),
            delay: MARKER_LEASE + Duration::from_secs(1),
        };
        let relay = Receipts::new(markers.clone(), sender, &outbox_table, policy)
            .with_alerts(Alerts::new("review").published(false));
        let options = Options { metrics: false, ..Options::new("review") };

        // Deliveries as the stream makes them, each with a 15-minute function timeout.
        for _ in 0..3 {
            let mut context = Context::default();
            context.deadline = markers.config().now_ms() + 15 * 60 * 1000;
            let response = process(&relay, LambdaEvent::new(event.clone(), context), &options).await;
            if response.batch_item_failures.is_empty() {
                break;
            }
        }
        let row = client
            .get_item()
            .table_name(&outbox_table)
            .key("pk", AttributeValue::S(effects::outbox::row_key(&event_id)))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item()
            .cloned()
            .unwrap();
        outcomes.push((policy, row["status"].as_s().unwrap().clone(), emails_to(&to).len()));
    }
    // Today: [(AtMostOnce, "AMBIGUOUS", 1), (AtLeastOnce, "PENDING", 3)]: at least once sends a
    // copy on every delivery (with MaximumRetryAttempts -1, one a delivery for up to 24 h) and
    // never marks the row.
    let expected = vec![(Policy::AtMostOnce, "SENT".to_owned(), 1), (Policy::AtLeastOnce, "SENT".to_owned(), 1)];
    assert_eq!(outcomes, expected, "SES accepted the first send (its message id was in hand)");
}
