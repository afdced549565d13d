//! Receipts are not an open relay: who gets a receipt (the account's registered address, else
//! the event's when the allow-list admits it), how many one account gets per window, what the
//! email says, and what the row keeps once sent. Emails as the local SES recorded them; rows as
//! the outbox table holds them.

use crate::support;
use aws_lambda_events::event::dynamodb::Event;
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_effects::testing::emails_to;
use effectively_once_effects::Policy;
use effectively_once_lambda::streams::{process, Options};
use effectively_once_lambda::testing::streams;
use effectively_once_lambda::{Handled, Handler};
use lambda_runtime::{Context, LambdaEvent};
use payments::outbox::{row_item, RECEIPT_SUBJECT};
use payments::{PaymentEvent, Profiles, RateLimit, RowStatus};
use receipts_relay::{Alert, AllowList, Receipts};

use crate::support::Pending;

const FROM: &str = "receipts@example.com";

async fn ses_relay(p: &Pending) -> Receipts<effectively_once_effects::SesSender> {
    support::relay(p.markers(), support::verified_ses(FROM).await, &p.outbox_table, Policy::AtMostOnce)
}

async fn handle<E: effectively_once_effects::EmailSender>(
    relay: &Receipts<E>,
    event: &Event,
) -> effectively_once_lambda::RecordResult {
    Handler::<effectively_once_lambda::events::EventRecord>::handle(relay, &event.records[0], &Default::default()).await
}

/// The default deployment (no profile table, no allow-list, no limit): exactly one email, to the
/// event's address, however often the insert is delivered; the row, once `SENT`, no longer holds
/// the address, and the redelivered insert (which still does) neither resends nor fails.
#[tokio::test]
async fn by_default_one_email_goes_to_the_events_address_and_the_sent_row_drops_it() {
    let p = Pending::new("default").await;
    let relay = ses_relay(&p).await;
    assert_eq!(handle(&relay, &p.event).await, Ok(Handled::Applied));
    let options = Options { emit_metrics: false, ..Options::new("test") };
    let response = process(&relay, LambdaEvent::new(p.event.clone(), Context::default()), &options).await;
    assert!(response.batch_item_failures.is_empty(), "a redelivery of the sent row's insert does not fail");
    assert_eq!(handle(&relay, &p.event).await, Ok(Handled::Duplicate));

    let sent = emails_to(&p.to);
    assert_eq!(sent.len(), 1, "exactly one receipt for the event: {sent:?}");
    let row = p.row().await.unwrap();
    assert_eq!(row.status, RowStatus::Sent);
    assert_eq!(row.message_id.as_deref(), sent[0]["id"].as_str());
    assert_eq!(row.receipt.receipt_email, None, "the sent row keeps no address");
}

/// The subject is fixed and neither the subject nor the body carries the producer's ids.
#[tokio::test]
async fn the_email_names_neither_the_event_nor_the_account() {
    let p = Pending::new("wording").await;
    handle(&ses_relay(&p).await, &p.event).await.unwrap();
    let sent = emails_to(&p.to);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["subject"], RECEIPT_SUBJECT);
    let body = sent[0]["body"].as_str().unwrap_or_default();
    assert!(body.contains("credited 12.50 USD"), "{body}");
    for id in [p.event_id.as_str(), "acct_42"] {
        assert!(!sent[0]["subject"].as_str().unwrap().contains(id), "{sent:?}");
        assert!(!body.contains(id), "the body shows {id}: {body}");
    }
}

/// With an allow-list, an event address off it gets nothing: the row is `REFUSED` with the reason
/// (the address redacted) and without the address; the alert is counted; redelivered, still
/// nothing, and no failure holds the stream.
#[tokio::test]
async fn an_address_outside_the_allow_list_gets_no_email_and_the_row_says_why() {
    let p = Pending::new("stranger").await;
    let allowed = AllowList::parse(Some("customers.example,vip@example.com")).unwrap();
    let relay = ses_relay(&p).await.with_allow_list(allowed);
    assert_eq!(handle(&relay, &p.event).await, Ok(Handled::Rejected));
    assert_eq!(handle(&relay, &p.event).await, Ok(Handled::Duplicate), "redelivered: its fate stands");

    assert!(emails_to(&p.to).is_empty(), "no email to an address off the list");
    let row = p.row().await.unwrap();
    assert_eq!(row.status, RowStatus::Refused);
    let reason = row.failure_reason.unwrap_or_default();
    assert!(reason.contains("RECEIPT_ALLOWED_RECIPIENTS"), "{reason}");
    let local = p.to.split('@').next().unwrap();
    assert!(!reason.contains(local), "the stored reason is redacted: {reason}");
    assert_eq!(row.receipt.receipt_email, None);
    assert_eq!(relay.alerts().count(Alert::ReceiptRefused), 1);

    // The same list admits an address on it.
    let q = Pending::new("listed").await;
    let domain = q.to.split('@').nth(1).unwrap().to_owned();
    let relay = ses_relay(&q).await.with_allow_list(AllowList::parse(Some(&domain)).unwrap());
    assert_eq!(handle(&relay, &q.event).await, Ok(Handled::Applied));
    assert_eq!(emails_to(&q.to).len(), 1);
}

/// The account's registered address wins over the event's (and over the allow-list: it is the
/// deployment's own record, not the producer's word).
#[tokio::test]
async fn the_accounts_registered_address_wins_over_the_events() {
    let p = Pending::new("event-named").await;
    let ledger_table = unique_name("ledger");
    payments::tables::create_ledger_table(&p.client, &ledger_table).await.unwrap();
    let owner = format!("{}@bank.example", unique_name("owner"));
    Profiles::new(p.client.clone(), &ledger_table).put("acct_42", &owner).await.unwrap();

    let allowed = AllowList::parse(Some("nowhere.example")).unwrap();
    let relay = ses_relay(&p).await.with_profiles(&ledger_table).with_allow_list(allowed);
    assert_eq!(handle(&relay, &p.event).await, Ok(Handled::Applied));
    assert!(emails_to(&p.to).is_empty(), "the event's address gets nothing");
    assert_eq!(emails_to(&owner).len(), 1, "the registered address gets the receipt");
    assert_eq!(p.row().await.unwrap().status, RowStatus::Sent);
}

/// The rows of `n` payments of `p`'s account in `p`'s outbox table: the address, the event id
/// and the insert of each.
async fn more_rows(p: &Pending, n: usize) -> Vec<(String, String, Event)> {
    let mut rows = Vec::new();
    for i in 0..n {
        let event_id = unique_name(&format!("pay{i}"));
        let to = format!("{}@example.com", unique_name(&format!("flood{i}")));
        let mut payment = PaymentEvent::parse(&format!(
            r#"{{"event_id": "{event_id}", "account_id": "acct_42", "amount_cents": 100, "currency": "USD"}}"#
        ))
        .unwrap();
        payment.receipt_email = Some(to.clone());
        let item = serde_dynamo::Item::from(row_item(&payment, &to, "2026-12-02T10:00:00.000Z"));
        p.client.put_item().table_name(&p.outbox_table).set_item(Some(item.clone().into())).send().await.unwrap();
        let event = streams::Batch::new(&p.outbox_table, &["pk"]).change("INSERT", None, Some(item)).build();
        rows.push((to, event_id, event));
    }
    rows
}

/// At most N receipts per account per window: the N+1th is not sent, its row is `RATE_LIMITED`
/// and the alert counted; redelivering the admitted ones neither resends nor spends the
/// allowance, and redelivering the held one sends nothing.
#[tokio::test]
async fn the_receipt_over_the_accounts_rate_is_not_sent() {
    let p = Pending::new("rate").await;
    let limit = RateLimit::from_env_values(Some("2"), Some("3600")).unwrap();
    // A clock that stands still: the window never turns during the test.
    let markers = p.markers_on(std::sync::Arc::new(effectively_once::ManualClock::new()));
    let relay = support::relay(markers, support::verified_ses(FROM).await, &p.outbox_table, Policy::AtMostOnce)
        .with_rate_limit(limit);
    let rows = more_rows(&p, 3).await;
    for (_, _, event) in &rows[..2] {
        assert_eq!(handle(&relay, event).await, Ok(Handled::Applied));
        assert_eq!(handle(&relay, event).await, Ok(Handled::Duplicate), "a redelivery counts nothing");
    }
    let (third_to, third_id, third) = &rows[2];
    assert_eq!(handle(&relay, third).await, Ok(Handled::Rejected));
    assert_eq!(handle(&relay, third).await, Ok(Handled::Duplicate));

    for (to, _, _) in &rows[..2] {
        assert_eq!(emails_to(to).len(), 1, "within the limit: one each");
    }
    assert!(emails_to(third_to).is_empty(), "the third receipt in the window is not sent");
    let row = support::row(&p.client, &p.outbox_table, third_id).await.unwrap();
    assert_eq!(row.status, RowStatus::RateLimited);
    assert!(row.failure_reason.unwrap_or_default().contains("RECEIPT_RATE_PER_ACCOUNT"));
    assert_eq!(row.receipt.receipt_email, None);
    assert_eq!(relay.alerts().count(Alert::ReceiptRateLimited), 1);

    // The account's next receipt in the window is held too.
    assert_eq!(handle(&relay, &p.event).await, Ok(Handled::Rejected));
    assert!(emails_to(&p.to).is_empty());
}

/// A receipt counted and sent in one window whose row was not marked (the attempt died) is
/// retried after the window turned: the retry replays the marker and sends nothing, so it must
/// not take the new window's allowance either. With a limit of one, the account's first receipt
/// of the new window is still sent.
#[tokio::test]
async fn a_receipt_retried_into_the_next_window_does_not_spend_that_windows_allowance() {
    let p = Pending::new("rate-turn").await;
    let limit = RateLimit::from_env_values(Some("1"), Some("3600")).unwrap();
    let clock = std::sync::Arc::new(effectively_once::ManualClock::new());
    let markers = p.markers_on(clock.clone());
    let ses = support::verified_ses(FROM).await;

    // The first attempt, as the relay makes it: counted in its window, sent, then it died
    // before marking the row.
    let rate = payments::ReceiptRate::new(p.client.clone(), p.store.table(), limit.unwrap());
    assert!(rate.admit("acct_42", &p.event_id, markers.config().now_ms()).await.unwrap());
    let key = payments::receipt_key(&p.event_id).unwrap();
    effectively_once_effects::send_once(&markers, &ses, &key, &p.receipt().message(&p.to), Policy::AtMostOnce)
        .await
        .unwrap();
    assert_eq!(emails_to(&p.to).len(), 1);

    // The stream retries the record in the next window.
    clock.advance(std::time::Duration::from_secs(3600));
    let relay = support::relay(markers, ses, &p.outbox_table, Policy::AtMostOnce).with_rate_limit(limit);
    assert_eq!(handle(&relay, &p.event).await, Ok(Handled::Duplicate), "the marker replays");
    assert_eq!(p.row().await.unwrap().status, RowStatus::Sent);

    // The account's first new receipt of this window.
    let rows = more_rows(&p, 1).await;
    let (to, event_id, event) = &rows[0];
    let result = handle(&relay, event).await;
    let row = support::row(&p.client, &p.outbox_table, event_id).await.unwrap();
    assert_eq!(
        (result, row.status),
        (Ok(Handled::Applied), RowStatus::Sent),
        "the window's first receipt is held: {:?}",
        row.failure_reason
    );
    assert_eq!(emails_to(to).len(), 1);
    assert_eq!(emails_to(&p.to).len(), 1, "no second receipt for the retried event");
}
