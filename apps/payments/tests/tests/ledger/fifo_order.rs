//! Delivery order decides a debit that races its funding credit (docs/ordering.md): received in
//! order from a FIFO queue (message group = account, deduplication id = event id) the debit
//! applies; delivered the other way round, as a standard queue may, it is rejected for good.
//! Messages go through the local SQS and reach the payments handler by the SQS batch driver.

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use effectively_once::{Outcome, Store};
use effectively_once_dynamodb::testing::{sdk_config, unique_name};
use effectively_once_lambda::sqs;
use end_to_end::LedgerHarness;
use lambda_runtime::{Context, LambdaEvent};
use payments::{Posting, Rejection};

const ACCOUNT: &str = "acct_fifo";

fn body(event_id: &str, amount_cents: i64) -> String {
    format!(
        r#"{{"event_id": "{event_id}", "account_id": "{ACCOUNT}", "amount_cents": {amount_cents}, "currency": "USD"}}"#
    )
}

struct Queue {
    sqs: aws_sdk_sqs::Client,
    url: String,
    arn: String,
    fifo: bool,
}

impl Queue {
    /// A FIFO queue as the template's `QueueType=Fifo` makes it, or a standard one.
    async fn new(fifo: bool) -> Queue {
        let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
        let mut request = sqs.create_queue();
        if fifo {
            request = request
                .queue_name(format!("{}.fifo", unique_name("fifo")))
                .attributes(QueueAttributeName::FifoQueue, "true")
                .attributes(QueueAttributeName::DeduplicationScope, "messageGroup")
                .attributes(QueueAttributeName::FifoThroughputLimit, "perMessageGroupId");
        } else {
            request = request.queue_name(unique_name("standard"));
        }
        let url = request.send().await.expect("create queue").queue_url().expect("queue url").to_owned();
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("queue attributes");
        let arn = attributes.attributes().and_then(|a| a.get(&QueueAttributeName::QueueArn)).cloned().expect("arn");
        Queue { sqs, url, arn, fifo }
    }

    /// Sends as a producer must on a FIFO queue: the account is the message group, so one
    /// account's payments are delivered in the order sent; the event id is the deduplication id,
    /// so a producer's retry within SQS's five-minute window is dropped by SQS itself.
    async fn send(&self, event_id: &str, amount_cents: i64) {
        let mut request = self.sqs.send_message().queue_url(&self.url).message_body(body(event_id, amount_cents));
        if self.fifo {
            request = request.message_group_id(ACCOUNT).message_deduplication_id(event_id);
        }
        request.send().await.expect("send");
    }

    /// Receives `n` messages, in the order the queue hands them out.
    async fn receive(&self, n: usize) -> Vec<Message> {
        let mut messages = Vec::new();
        for _ in 0..10 {
            let out = self
                .sqs
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(10)
                .visibility_timeout(60)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .expect("receive");
            messages.extend(out.messages().iter().cloned());
            if messages.len() >= n {
                return messages;
            }
        }
        panic!("received {} of {n} messages", messages.len());
    }

    /// Deletes what was handled, as the event source mapping does after a batch succeeds.
    async fn ack(&self, batch: &[Message]) {
        for m in batch {
            let handle = m.receipt_handle().expect("receipt handle");
            self.sqs.delete_message().queue_url(&self.url).receipt_handle(handle).send().await.expect("delete");
        }
    }

    /// Whatever one receive returns now.
    async fn receive_now(&self) -> Vec<Message> {
        let out = self.sqs.receive_message().queue_url(&self.url).max_number_of_messages(10).send().await;
        out.expect("receive").messages().to_vec()
    }

    /// The Lambda event the SQS event source mapping would build from `messages`.
    fn event(&self, messages: &[Message]) -> SqsEvent {
        local::esm::sqs_event(messages, &self.arn)
    }

    async fn delete(self) {
        self.sqs.delete_queue().queue_url(&self.url).send().await.ok();
    }
}

fn event_id_of(m: &Message) -> String {
    let body: serde_json::Value = serde_json::from_str(m.body().unwrap_or("{}")).unwrap();
    body["event_id"].as_str().unwrap_or_default().to_owned()
}

/// Hands one batch to the payments handler through the SQS driver; returns the failed ids.
async fn deliver(p: &LedgerHarness, queue: &Queue, batch: &[Message]) -> Vec<String> {
    let handler = payments_consumer::Payments::new(p.ledger.clone());
    let mut options = sqs::Options::new(payments_consumer::FUNCTION);
    options.emit_metrics = false;
    let response = sqs::process(&handler, LambdaEvent::new(queue.event(batch), Context::default()), &options).await;
    response.batch_item_failures.into_iter().map(|f| f.item_identifier).collect()
}

#[tokio::test]
async fn on_a_fifo_queue_the_debit_follows_its_credit_and_applies() {
    let p = LedgerHarness::new().await;
    let queue = Queue::new(true).await;
    let (credit, debit) = (unique_name("pay_credit"), unique_name("pay_debit"));
    queue.send(&credit, 1000).await;
    queue.send(&debit, -400).await;
    // A producer retry of the credit: same deduplication id, dropped by SQS.
    queue.send(&credit, 1000).await;

    let batch = queue.receive(2).await;
    let order: Vec<String> = batch.iter().map(event_id_of).collect();
    assert_eq!(order, vec![credit.clone(), debit.clone()], "one message group: delivered in the order sent");
    assert!(batch.iter().all(|m| m
        .attributes()
        .is_some_and(|a| a.get(&MessageSystemAttributeName::MessageGroupId) == Some(&ACCOUNT.to_owned()))));
    assert_eq!(deliver(&p, &queue, &batch).await, Vec::<String>::new(), "nothing failed");
    queue.ack(&batch).await;
    assert!(queue.receive_now().await.is_empty(), "the producer's retry was deduplicated by SQS");

    let mut entries = p.ledger.entries(ACCOUNT).await.unwrap();
    entries.sort();
    let mut expected = vec![(credit.clone(), 1000), (debit.clone(), -400)];
    expected.sort();
    assert_eq!(entries, expected, "the debit applied");
    let balance = p.ledger.balance(ACCOUNT).await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (600, 2));
    let debit_event = LedgerHarness::event(&debit, ACCOUNT, -400, "USD");
    assert_eq!(p.ledger.post(&debit_event).await.unwrap(), Outcome::Replayed(Posting::Applied));
    queue.delete().await;
}

#[tokio::test]
async fn delivered_the_other_way_round_the_debit_is_rejected_for_good() {
    let p = LedgerHarness::new().await;
    let queue = Queue::new(false).await;
    let (credit, debit) = (unique_name("pay_credit"), unique_name("pay_debit"));
    queue.send(&credit, 1000).await;
    queue.send(&debit, -400).await;
    let received = queue.receive(2).await;
    let of = |id: &str| received.iter().find(|m| event_id_of(m) == id).cloned().expect("received");
    let (credit_message, debit_message) = (of(&credit), of(&debit));

    // A standard queue promises no order: the debit may come first, in a batch of its own.
    assert_eq!(deliver(&p, &queue, std::slice::from_ref(&debit_message)).await, Vec::<String>::new());
    assert_eq!(deliver(&p, &queue, std::slice::from_ref(&credit_message)).await, Vec::<String>::new());

    assert_eq!(p.ledger.entries(ACCOUNT).await.unwrap(), vec![(credit.clone(), 1000)], "only the credit applied");
    let balance = p.ledger.balance(ACCOUNT).await.unwrap().unwrap();
    assert_eq!((balance.balance_cents, balance.entry_count), (1000, 1));
    // The rejection is recorded, so it is an answer, not a retry: redelivered now that the
    // balance covers it, the debit is still rejected and nothing moves.
    let record = p.ledger.store().get(&format!("{}#{debit}", payments::ledger::PREFIX)).await.unwrap();
    let response: Posting =
        serde_json::from_str(record.expect("rejection recorded").response.as_deref().unwrap()).unwrap();
    let rejected = Posting::Rejected { reason: Rejection::InsufficientFunds { balance_cents: 0 } };
    assert_eq!(response, rejected);
    assert_eq!(deliver(&p, &queue, std::slice::from_ref(&debit_message)).await, Vec::<String>::new());
    let debit_event = LedgerHarness::event(&debit, ACCOUNT, -400, "USD");
    assert_eq!(p.ledger.post(&debit_event).await.unwrap(), Outcome::Replayed(rejected));
    assert_eq!(p.ledger.balance(ACCOUNT).await.unwrap().unwrap().balance_cents, 1000);
    queue.delete().await;
}
