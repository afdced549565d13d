//! Review of issue 15: the batch path's panic fallback after the batch committed. The batch call
//! posts every payment, then panics; the driver hands each message to the one-message path,
//! which must answer from the records alone: duplicates acked, key reuse failed, nothing twice.

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use effectively_once_effects::testing::sqs::Batch;
use effectively_once_lambda::sqs::{process_batch, BatchHandler, Handler, Options};
use effectively_once_lambda::RecordResult;
use lambda_runtime::{Context, LambdaEvent};
use payments::Ledger;
use payments_consumer::Payments;

/// The payments handler whose batch call panics after posting.
struct PanicsAfterPosting(Payments);

impl Handler<SqsMessage> for PanicsAfterPosting {
    async fn handle(&self, message: &SqsMessage, context: &effectively_once_lambda::events::Context) -> RecordResult {
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
async fn a_panic_after_the_batch_committed_is_answered_from_the_records() {
    let (store, _) = fresh_store().await;
    let (ledger, outbox) = (unique_name("ledger"), unique_name("outbox"));
    payments::tables::create_ledger_table(store.client(), &ledger).await.unwrap();
    payments::tables::create_outbox_table(store.client(), &outbox).await.unwrap();
    let handler = PanicsAfterPosting(Payments::new(Ledger::new(store, ledger, Some(outbox))));
    let response = process_batch(&handler, LambdaEvent::new(batch(), Context::default()), &Options::new("test")).await;
    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, ["m-3"], "only the key reuse fails");
    let ledger = handler.0.ledger();
    assert_eq!(ledger.entries("acct_rb").await.unwrap(), [("rb_1".to_owned(), 100), ("rb_3".to_owned(), 50)]);
    let balance = ledger.balance("acct_rb").await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (150, 2));
    assert_eq!(ledger.balance("acct_rb_other").await.unwrap(), None);
}
