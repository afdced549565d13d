//! The effects under injected faults: the fault proxy between the SDK and the local AWS.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::config::{Credentials, Region};
use effectively_once::{Config, Idempotency, ManualClock, Outcome};
use effectively_once_dynamodb::testing::{endpoint, unique_name};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_effects::{send_once, EmailMessage, Policy, SendOutcome, SesSender};
use local::proxy::{Fault, Proxy, ScriptedFaults};
use payments::{receipt_key, Ledger, PaymentEvent, Posting};
use payments_local::invariants::sent_emails;
use payments_local::resources::{self, Clients};

async fn sdk_through(proxy: &Proxy) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(proxy.url())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "local"))
        .load()
        .await
}

async fn proxy(rules: ScriptedFaults) -> Proxy {
    let upstream = endpoint().trim_start_matches("http://").trim_end_matches('/').to_owned();
    Proxy::start(&upstream, Arc::new(rules)).await.unwrap()
}

fn payment(id: &str, amount: i64) -> PaymentEvent {
    PaymentEvent::parse(&format!(
        r#"{{"event_id": "{id}", "account_id": "acct-f", "amount_cents": {amount}, "currency": "USD"}}"#
    ))
    .unwrap()
}

#[tokio::test]
async fn a_lost_transaction_answer_is_retried_and_posts_once() {
    let clients = Clients::local().await;
    let r = resources::up(&clients, &unique_name("flt")).await.unwrap();
    let p = proxy(
        ScriptedFaults::new()
            .then("dynamodb:TransactWriteItems", Fault::DropResponse)
            .then("dynamodb:TransactWriteItems", Fault::Pass)
            .then("dynamodb:TransactWriteItems", Fault::Throttle)
            .then("dynamodb:TransactWriteItems", Fault::ServerError),
    )
    .await;
    let client = aws_sdk_dynamodb::Client::new(&sdk_through(&p).await);
    let ledger = Ledger::new(DynamoDbStore::new(client, &r.idempotency_table), &r.ledger_table, None);
    // Committed, answer lost; the SDK retries and meets the entry: a replay of its own write.
    let first = ledger.post(&payment("pay-lost", 700)).await.unwrap();
    assert_eq!(first.into_inner(), Posting::Applied);
    // Throttled then a 500: the SDK's retries carry it through.
    assert_eq!(ledger.post(&payment("pay-throttled", 300)).await.unwrap(), Outcome::Fresh(Posting::Applied));
    let balance = ledger.balance("acct-f").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (1000, 2));
    let injected = p.injected();
    assert_eq!(injected.get("lost response dynamodb:TransactWriteItems"), Some(&1));
    assert_eq!(injected.get("throttled dynamodb:TransactWriteItems"), Some(&1));
    assert_eq!(injected.get("500 dynamodb:TransactWriteItems"), Some(&1));
}

#[tokio::test]
async fn a_lost_ses_answer_is_ambiguous_and_never_resent_at_most_once() {
    let clients = Clients::local().await;
    let r = resources::up(&clients, &unique_name("flt")).await.unwrap();
    let p = proxy(ScriptedFaults::new().then("ses:SendEmail", Fault::DropResponse)).await;
    let sdk = sdk_through(&p).await;
    let clock = Arc::new(ManualClock::new());
    let markers = Idempotency::new(
        DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&sdk), &r.idempotency_table),
        Config::default().with_lease(Duration::from_secs(60)).with_clock(clock.clone()),
    );
    let ses = SesSender::new(aws_sdk_sesv2::Client::new(&sdk), resources::RECEIPT_FROM);
    let to = format!("{}@example.com", unique_name("lost"));
    let message = EmailMessage { to: to.clone(), subject: "Receipt".into(), text: "Paid".into() };
    let key = receipt_key(&unique_name("pay")).unwrap();
    // The lost answer is recorded ambiguous at once (no retry waits for a lease).
    let first = send_once(&markers, &ses, &key, &message, Policy::AtMostOnce).await.unwrap();
    assert_eq!(first, Outcome::Fresh(SendOutcome::Ambiguous));
    assert_eq!(
        sent_emails().unwrap().iter().filter(|e| **e == to).count(),
        1,
        "SES accepted it; the SDK did not resend"
    );
    clock.advance(Duration::from_secs(61));
    let later = send_once(&markers, &ses, &key, &message, Policy::AtMostOnce).await.unwrap();
    assert_eq!(later, Outcome::Replayed(SendOutcome::Ambiguous));
    assert_eq!(sent_emails().unwrap().iter().filter(|e| **e == to).count(), 1, "never a second copy");
}
