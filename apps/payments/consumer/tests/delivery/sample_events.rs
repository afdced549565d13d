//! The payments consumer end to end on the local AWS, fed the sample events in `events/`, and a
//! FIFO batch through the ordered path (`sqs::process_ordered`) and the batch path.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::RequestCounter;
use effectively_once_lambda::sqs::{process, process_batch, process_ordered, Options};
use effectively_once_lambda::testing::sqs::{Batch, Message};
use lambda_runtime::{Context, LambdaEvent};
use payments_consumer::Payments;

use crate::support::{counted, payments};

async fn invoke(handler: &Payments, json: &[u8]) -> SqsBatchResponse {
    let event: SqsEvent = serde_json::from_slice(json).unwrap();
    process(handler, LambdaEvent::new(event, Context::default()), &Options::new("test")).await
}

fn failures(response: &SqsBatchResponse) -> Vec<&str> {
    response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect()
}

async fn balance(h: &Payments, account: &str) -> (i64, u64) {
    let b = h.ledger().balance(account).await.unwrap().unwrap();
    (b.balance_cents, b.entry_count)
}

#[tokio::test]
async fn bad_input_returns_exactly_the_bad_messages_and_posts_the_good_ones() {
    let h = payments().await;
    let response = invoke(&h, include_bytes!("../../../../../events/sqs-bad-input.json")).await;
    assert_eq!(failures(&response), ["bad-malformed-json", "bad-missing-event-id", "bad-zero-amount", "bad-currency"]);
    let entries = h.ledger().entries("acct_9").await.unwrap();
    assert_eq!(entries, vec![("pay_2001".to_owned(), 1000), ("pay_2006".to_owned(), 400)]);
    assert_eq!(balance(&h, "acct_9").await, (1400, 2));
}

#[tokio::test]
async fn a_batch_with_duplicates_posts_each_event_once_even_when_redelivered() {
    let h = payments().await;
    for _ in 0..2 {
        let response = invoke(&h, include_bytes!("../../../../../events/sqs-batch-duplicates.json")).await;
        assert!(response.batch_item_failures.is_empty(), "{:?}", failures(&response));
    }
    assert_eq!(balance(&h, "acct_7").await, (3500, 2));
    assert_eq!(balance(&h, "acct_8").await, (990, 1));
}

#[tokio::test]
async fn fifo_groups_keep_order_and_a_malformed_message_fails_alone() {
    let h = payments().await;
    let response = invoke(&h, include_bytes!("../../../../../events/sqs-fifo.json")).await;
    assert_eq!(failures(&response), ["fifo-b-2"]);
    assert_eq!(balance(&h, "acct_fa").await, (200, 3), "credit 500, then debits 200 and 100, in order");
    assert_eq!(balance(&h, "acct_fb").await, (150, 2), "b-2 never takes effect, so b-3 goes on without it");
}

#[tokio::test]
async fn the_sample_payment_is_applied() {
    let h = payments().await;
    let response = invoke(&h, include_bytes!("../../../../../events/sqs-payment.json")).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(balance(&h, "acct_42").await, (1250, 1));
}

/// Ten messages of a FIFO queue over three groups (4, 3 and 3), each group an account's
/// payments: credits, and debits that its earlier credits in the batch pay for (no refusal: a
/// refused debit costs its account one more transaction, on either path).
fn fifo_batch(accounts: &[String; 3]) -> SqsEvent {
    let amounts: [&[i64]; 3] = [&[1000, -300, -200, 50], &[500, -500, 20], &[75, 25, -100]];
    let mut messages = Vec::new();
    for (account, amounts) in accounts.iter().zip(amounts) {
        for (n, amount) in amounts.iter().enumerate() {
            let body = format!(
                r#"{{"event_id": "{account}-{n}", "account_id": "{account}", "amount_cents": {amount}, "currency": "USD"}}"#
            );
            messages.push(Message::new(body).id(format!("{account}-m{n}")).group(account.clone()));
        }
    }
    Batch::new().queue("payments.fifo").messages(messages).build()
}

/// The same FIFO batch through the ordered path and through the batch path, on ledgers of their
/// own: the ordered path is one call and one transaction where the batch path takes a call and
/// a transaction per round (the longest group's length), and both leave the same balances and
/// the same answer.
#[tokio::test]
async fn a_fifo_batch_of_three_groups_is_one_call_and_one_transaction_on_the_ordered_path() {
    let accounts = [unique_name("acct"), unique_name("acct"), unique_name("acct")];
    let event = fifo_batch(&accounts);
    let options = Options { emit_metrics: false, ..Options::new("test") };
    let ((ordered, ordered_requests), (batched, batched_requests)) = (counted().await, counted().await);
    let by_order = process_ordered(&ordered, LambdaEvent::new(event.clone(), Context::default()), &options).await;
    let by_batch = process_batch(&batched, LambdaEvent::new(event, Context::default()), &options).await;
    assert!(by_order.batch_item_failures.is_empty(), "{:?}", failures(&by_order));
    assert_eq!(failures(&by_order), failures(&by_batch));

    let transactions = |requests: &RequestCounter| requests.by_operation().get("TransactWriteItems").copied();
    assert_eq!(ordered.calls(), 1, "the whole batch in one call");
    assert_eq!(transactions(&ordered_requests), Some(1), "{:?}", ordered_requests.by_operation());
    assert_eq!(batched.calls(), 4, "a call a round: the longest group's length");
    assert_eq!(transactions(&batched_requests), Some(4), "{:?}", batched_requests.by_operation());

    let expected = [(550, 4), (20, 3), (0, 3)];
    for (account, expected) in accounts.iter().zip(expected) {
        assert_eq!(balance(&ordered.inner, account).await, expected, "{account}: every payment, in order");
        assert_eq!(balance(&batched.inner, account).await, expected, "{account}: the same on the batch path");
    }
}
