//! The payments consumer on the local AWS with a handler that panics on one event id: that
//! message alone is reported failed, the others are posted, and a redelivery posts each once.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use effectively_once_effects::testing::sqs::Batch;
use effectively_once_lambda::sqs::{process, Handler, Options};
use effectively_once_lambda::RecordResult;
use lambda_runtime::{Context, LambdaEvent};
use payments::Ledger;
use payments_consumer::Payments;

async fn payments() -> Payments {
    let (store, _) = fresh_store().await;
    let (ledger, outbox) = (unique_name("ledger"), unique_name("outbox"));
    payments::tables::create_ledger_table(store.client(), &ledger).await.unwrap();
    payments::tables::create_outbox_table(store.client(), &outbox).await.unwrap();
    Payments::new(Ledger::new(store, ledger, Some(outbox)))
}

/// When the wrapped handler panics on its event id.
#[derive(Clone, Copy)]
enum When {
    /// Before the payment is posted: nothing of it is written.
    BeforePosting,
    /// After the post committed: the effect is durable, the answer lost.
    AfterPosting,
}

/// The real payments handler, except that it panics on one event id, quoting the body (and so
/// the receipt address) as careless code does.
struct PanicsOn {
    payments: Payments,
    event_id: &'static str,
    when: When,
}

impl Handler<SqsMessage> for PanicsOn {
    async fn handle(&self, message: &SqsMessage, context: &effectively_once_lambda::events::Context) -> RecordResult {
        let body = message.body.as_deref().unwrap_or_default();
        let event: serde_json::Value = serde_json::from_str(body).unwrap();
        let ours = event["event_id"] == self.event_id;
        if ours && matches!(self.when, When::BeforePosting) {
            panic!("cannot post {body}");
        }
        let result = self.payments.handle(message, context).await;
        if ours {
            panic!("posted, then lost the answer for {body}");
        }
        result
    }
}

/// Five credits on a standard queue: `m-1` .. `m-3` to `acct_p1`, `m-4` and `m-5` to
/// `acct_p2`; `m-3` (`pay_p3`) is the one the tests panic on.
fn batch() -> SqsEvent {
    let payments = [("acct_p1", 1000), ("acct_p1", 250), ("acct_p1", 500), ("acct_p2", 200), ("acct_p2", 50)];
    let bodies = (1..).zip(payments).map(|(i, (account, amount))| {
        format!(
            r#"{{"event_id": "pay_p{i}", "account_id": "{account}", "amount_cents": {amount}, "currency": "USD", "receipt_email": "alice@example.com"}}"#
        )
    });
    // Message ids m-1 .. m-5, in order.
    Batch::new().messages(bodies).build()
}

async fn invoke(handler: &impl Handler<SqsMessage>) -> SqsBatchResponse {
    process(handler, LambdaEvent::new(batch(), Context::default()), &Options::new("test")).await
}

fn failures(response: &SqsBatchResponse) -> Vec<&str> {
    response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect()
}

async fn entries(h: &Payments, account: &str) -> Vec<(String, i64)> {
    let mut entries = h.ledger().entries(account).await.unwrap();
    entries.sort();
    entries
}

async fn balance(h: &Payments, account: &str) -> (i64, u64) {
    let b = h.ledger().balance(account).await.unwrap().unwrap();
    (b.balance_cents, b.entry_count)
}

fn entry(event_id: &str, amount: i64) -> (String, i64) {
    (event_id.to_owned(), amount)
}

#[tokio::test]
async fn a_panic_before_posting_fails_only_its_message_and_the_others_are_posted() {
    let payments = payments().await;
    let panicking = PanicsOn { payments: payments.clone(), event_id: "pay_p3", when: When::BeforePosting };
    let response = invoke(&panicking).await;
    assert_eq!(failures(&response), ["m-3"], "only the panicking message is redelivered");
    assert_eq!(entries(&payments, "acct_p1").await, [entry("pay_p1", 1000), entry("pay_p2", 250)]);
    assert_eq!(balance(&payments, "acct_p1").await, (1250, 2));
    assert_eq!(entries(&payments, "acct_p2").await, [entry("pay_p4", 200), entry("pay_p5", 50)]);
    assert_eq!(balance(&payments, "acct_p2").await, (250, 2));

    // The bug fixed, SQS redelivers: the panicking payment is posted, the rest are duplicates.
    let response = invoke(&payments).await;
    assert!(response.batch_item_failures.is_empty(), "{:?}", failures(&response));
    assert_eq!(balance(&payments, "acct_p1").await, (1750, 3));
    assert_eq!(balance(&payments, "acct_p2").await, (250, 2));
}

#[tokio::test]
async fn a_panic_after_posting_is_redelivered_and_posted_once() {
    let payments = payments().await;
    let panicking = PanicsOn { payments: payments.clone(), event_id: "pay_p3", when: When::AfterPosting };
    let response = invoke(&panicking).await;
    assert_eq!(failures(&response), ["m-3"]);
    assert_eq!(balance(&payments, "acct_p1").await, (1750, 3), "its post had committed before the panic");

    // Redelivered (with the others, as if their acks had been lost too): nothing posts twice.
    let response = invoke(&payments).await;
    assert!(response.batch_item_failures.is_empty(), "{:?}", failures(&response));
    assert_eq!(
        entries(&payments, "acct_p1").await,
        [entry("pay_p1", 1000), entry("pay_p2", 250), entry("pay_p3", 500)]
    );
    assert_eq!(balance(&payments, "acct_p1").await, (1750, 3));
    assert_eq!(balance(&payments, "acct_p2").await, (250, 2));
}
