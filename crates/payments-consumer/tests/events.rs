//! The payments consumer end to end on the local AWS, fed the sample events in `events/`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use effectively_once_dynamodb::testing::{fresh_store, unique_name};
use effectively_once_lambda::sqs::{process, Options};
use lambda_runtime::{Context, LambdaEvent};
use payments::Ledger;
use payments_consumer::Payments;

async fn handler() -> Payments {
    let (store, _) = fresh_store().await;
    let (ledger, outbox) = (unique_name("ledger"), unique_name("outbox"));
    payments::tables::create_ledger_table(store.client(), &ledger).await.unwrap();
    payments::tables::create_outbox_table(store.client(), &outbox).await.unwrap();
    Payments::new(Ledger::new(store, ledger, Some(outbox)))
}

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
    let h = handler().await;
    let response = invoke(&h, include_bytes!("../../../events/sqs-bad-input.json")).await;
    assert_eq!(failures(&response), ["bad-malformed-json", "bad-missing-event-id", "bad-zero-amount", "bad-currency"]);
    let entries = h.ledger().entries("acct_9").await.unwrap();
    assert_eq!(entries, vec![("pay_2001".to_owned(), 1000), ("pay_2006".to_owned(), 400)]);
    assert_eq!(balance(&h, "acct_9").await, (1400, 2));
}

#[tokio::test]
async fn a_batch_with_duplicates_posts_each_event_once_even_when_redelivered() {
    let h = handler().await;
    for _ in 0..2 {
        let response = invoke(&h, include_bytes!("../../../events/sqs-batch-duplicates.json")).await;
        assert!(response.batch_item_failures.is_empty(), "{:?}", failures(&response));
    }
    assert_eq!(balance(&h, "acct_7").await, (3500, 2));
    assert_eq!(balance(&h, "acct_8").await, (990, 1));
}

#[tokio::test]
async fn fifo_groups_keep_order_and_a_malformed_message_fails_alone() {
    let h = handler().await;
    let response = invoke(&h, include_bytes!("../../../events/sqs-fifo.json")).await;
    assert_eq!(failures(&response), ["fifo-b-2"]);
    assert_eq!(balance(&h, "acct_fa").await, (200, 3), "credit 500, then debits 200 and 100, in order");
    assert_eq!(balance(&h, "acct_fb").await, (150, 2), "b-2 never takes effect, so b-3 goes on without it");
}

#[tokio::test]
async fn the_sample_payment_is_applied() {
    let h = handler().await;
    let response = invoke(&h, include_bytes!("../../../events/sqs-payment.json")).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(balance(&h, "acct_42").await, (1250, 1));
}
