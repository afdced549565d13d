//! On a FIFO queue (the documented way to make a debit follow its credit), a message that failed
//! *permanently* (malformed, key reused) fails alone: the SQS driver holds a group back only
//! after a failure a later delivery may undo (`effectively_once_lambda::sqs::process`). SQS
//! hands a group's messages out together ("as many messages with the same message group ID as
//! possible"), so messages held back behind poison are received, and counted, exactly as often
//! as it is: when it reached `maxReceiveCount`, so would they, and valid payments of the same
//! account would go to the DLQ unapplied. The contract: a malformed message is "a permanent
//! error for that message alone".
//!
//! The event source mapping is played by hand against the local SQS: receive, hand the batch
//! to the payments handler through the SQS driver, delete what it did not report failed, and
//! let the failed ones become visible again.

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use effectively_once_dynamodb::testing::{sdk_config, unique_name};
use effectively_once_lambda::sqs;
use end_to_end::LedgerHarness;
use lambda_runtime::{Context, LambdaEvent};

const ACCOUNT: &str = "acct_fifo_dlq";

async fn fifo_queue(sqs: &aws_sdk_sqs::Client, redrive: Option<&str>) -> (String, String) {
    let mut request = sqs
        .create_queue()
        .queue_name(format!("{}.fifo", unique_name("fifo-dlq")))
        .attributes(QueueAttributeName::FifoQueue, "true");
    if let Some(dlq_arn) = redrive {
        request = request.attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"3"}}"#),
        );
    }
    let url = request.send().await.expect("create queue").queue_url().unwrap().to_owned();
    let attributes =
        sqs.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::QueueArn).send().await.unwrap();
    let arn = attributes.attributes().and_then(|a| a.get(&QueueAttributeName::QueueArn)).cloned().unwrap();
    (url, arn)
}

/// What an event source mapping does, in short: receives from the queue in batches until it is
/// empty twice, hands each batch to the consumer, deletes what succeeded and makes what failed
/// visible again at once (the redrive policy counts its receives).
async fn consume(sqs_client: &aws_sdk_sqs::Client, (url, arn): (&str, &str), handler: &payments_consumer::Payments) {
    let options = sqs::Options { emit_metrics: false, ..sqs::Options::new(payments_consumer::FUNCTION) };
    let mut empty = 0;
    for _ in 0..12 {
        let out = sqs_client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        let messages = out.messages().to_vec();
        if messages.is_empty() {
            empty += 1;
            if empty == 2 {
                break;
            }
            continue;
        }
        let event = local::esm::sqs_event(&messages, arn);
        let response = sqs::process(handler, LambdaEvent::new(event, Context::default()), &options).await;
        let failed: Vec<String> = response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
        for m in &messages {
            let handle = m.receipt_handle().unwrap();
            if failed.iter().any(|f| Some(f.as_str()) == m.message_id()) {
                // The visibility timeout ends: visible again for the next receive.
                sqs_client
                    .change_message_visibility()
                    .queue_url(url)
                    .receipt_handle(handle)
                    .visibility_timeout(0)
                    .send()
                    .await
                    .unwrap();
            } else {
                sqs_client.delete_message().queue_url(url).receipt_handle(handle).send().await.unwrap();
            }
        }
    }
}

#[tokio::test]
async fn a_malformed_message_does_not_take_its_groups_valid_payments_to_the_dlq() {
    let p = LedgerHarness::new().await;
    let sqs_client = aws_sdk_sqs::Client::new(&sdk_config().await);
    let (dlq_url, dlq_arn) = fifo_queue(&sqs_client, None).await;
    let (url, arn) = fifo_queue(&sqs_client, Some(&dlq_arn)).await;
    let bodies = [
        (
            "bad",
            format!(
                r#"{{"event_id": "pay_bad", "account_id": "{ACCOUNT}", "amount_cents": "fifty", "currency": "USD"}}"#
            ),
        ),
        (
            "pay_good",
            format!(r#"{{"event_id": "pay_good", "account_id": "{ACCOUNT}", "amount_cents": 700, "currency": "USD"}}"#),
        ),
    ];
    for (dedup, body) in &bodies {
        sqs_client
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .message_group_id(ACCOUNT)
            .message_deduplication_id(*dedup)
            .send()
            .await
            .unwrap();
    }

    consume(&sqs_client, (&url, &arn), &payments_consumer::Payments::new(p.ledger.clone())).await;

    let dlq = sqs_client.receive_message().queue_url(&dlq_url).max_number_of_messages(10).send().await.unwrap();
    let in_dlq: Vec<_> = dlq.messages().iter().filter_map(|m| m.body()).map(|b| b.to_owned()).collect();
    let balance = p.ledger.balance(ACCOUNT).await.unwrap();
    assert_eq!(
        balance.map(|b| b.balance_cents),
        Some(700),
        "the valid credit pay_good was never applied; the DLQ holds {} message(s): {in_dlq:?}",
        in_dlq.len()
    );
    assert_eq!(in_dlq.len(), 1, "only the malformed message belongs in the DLQ: {in_dlq:?}");
    assert!(in_dlq[0].contains("pay_bad"), "the malformed message reached the DLQ: {in_dlq:?}");
}
