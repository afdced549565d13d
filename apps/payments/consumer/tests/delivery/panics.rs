//! The payments consumer on the local AWS with a handler that panics on one event id: that
//! message alone is reported failed, the others are posted, and a redelivery posts each once.
//! On the batch path, a batch call that panics after the batch committed hands each message to
//! the one-message path, which answers from the records alone (`batch_path` below).

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use effectively_once_lambda::sqs::{process, Handler, Options};
use effectively_once_lambda::testing::sqs::Batch;
use effectively_once_lambda::RecordResult;
use lambda_runtime::{Context, LambdaEvent};
use payments_consumer::Payments;

use crate::support::payments;

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

/// The batch path's panic fallback after the batch committed: the batch call posts every
/// payment, then panics; the driver hands each message to the one-message path, which must
/// answer from the records alone: duplicates acked, key reuse failed, nothing twice.
mod batch_path {
    use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
    use effectively_once_lambda::sqs::{process_batch, BatchHandler, Handler, Options};
    use effectively_once_lambda::testing::sqs::Batch;
    use effectively_once_lambda::RecordResult;
    use lambda_runtime::{Context, LambdaEvent};
    use payments_consumer::Payments;

    /// The payments handler whose batch call panics after posting.
    struct PanicsAfterPosting(Payments);

    impl Handler<SqsMessage> for PanicsAfterPosting {
        async fn handle(
            &self,
            message: &SqsMessage,
            context: &effectively_once_lambda::events::Context,
        ) -> RecordResult {
            self.0.handle(message, context).await
        }
    }

    impl BatchHandler<SqsMessage> for PanicsAfterPosting {
        async fn handle_batch(
            &self,
            messages: &[&SqsMessage],
            context: &effectively_once_lambda::events::Context,
        ) -> Vec<RecordResult> {
            let results = self.0.handle_batch(messages, context).await;
            panic!("posted {} payments, then lost the answers", results.len());
        }
    }

    /// `m-1` credits 100, `m-2` debits 150 (rejected), `m-3` reuses `m-1`'s id for another account,
    /// `m-4` credits 50, `m-5` repeats `m-2`.
    fn batch() -> SqsEvent {
        let bodies = [
            r#"{"event_id": "rb_1", "account_id": "acct_rb", "amount_cents": 100, "currency": "USD"}"#,
            r#"{"event_id": "rb_2", "account_id": "acct_rb", "amount_cents": -150, "currency": "USD"}"#,
            r#"{"event_id": "rb_1", "account_id": "acct_rb_other", "amount_cents": 100, "currency": "USD"}"#,
            r#"{"event_id": "rb_3", "account_id": "acct_rb", "amount_cents": 50, "currency": "USD"}"#,
            r#"{"event_id": "rb_2", "account_id": "acct_rb", "amount_cents": -150, "currency": "USD"}"#,
        ];
        Batch::new().messages(bodies.iter().map(|b| b.to_string())).build()
    }

    #[tokio::test]
    async fn a_batch_call_that_panics_after_committing_is_answered_from_the_records() {
        let handler = PanicsAfterPosting(crate::support::payments().await);
        let response =
            process_batch(&handler, LambdaEvent::new(batch(), Context::default()), &Options::new("test")).await;
        let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
        assert_eq!(failed, ["m-3"], "only the key reuse fails");
        let ledger = handler.0.ledger();
        assert_eq!(ledger.entries("acct_rb").await.unwrap(), [("rb_1".to_owned(), 100), ("rb_3".to_owned(), 50)]);
        let balance = ledger.balance("acct_rb").await.unwrap().unwrap();
        assert_eq!((balance.balance_cents, balance.entry_count), (150, 2));
        assert_eq!(ledger.balance("acct_rb_other").await.unwrap(), None);
    }
}
