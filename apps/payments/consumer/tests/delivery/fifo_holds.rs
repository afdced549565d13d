//! A failure that an operator or a moment fixes is not permanent, so the FIFO driver holds its
//! group behind it. The driver goes on with a group past a `Retry::Never` failure, on the
//! claim that such a record "never takes effect, so no later record can depend on it", which
//! holds only if "permanent" really is permanent. A credit failed by a condition an operator
//! fixes (a consumer deployed without `OUTBOX_TABLE`: the ledger refuses receipts with
//! `StoreErrorKind::Other`) or by a transient server error the store reads as `Other` (a 503
//! without a listed code) is retried, so the debit behind it in its group does not run first
//! and get rejected for insufficient funds for good: the credit is redriven and applies. On the
//! ordered path (the whole batch in one call), the same holds for a group that carries several
//! accounts: the group, not only the account, waits behind the credit.

use std::sync::atomic::{AtomicBool, Ordering};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsMessage};
use effectively_once_dynamodb::testing::{sdk_config, unique_name};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::sqs::{process, process_ordered, Options};
use effectively_once_lambda::testing::sqs::{Batch, Message};
use effectively_once_lambda::RecordResult;
use lambda_runtime::{Context, LambdaEvent};
use payments::Ledger;
use payments_consumer::Payments;

use crate::support::{tables, Tables};

async fn invoke<H: effectively_once_lambda::Handler<SqsMessage>>(
    handler: &H,
    messages: Vec<Message>,
) -> SqsBatchResponse {
    let event = Batch::new().queue("payments.fifo").messages(messages).build();
    process(
        handler,
        LambdaEvent::new(event, Context::default()),
        &Options { emit_metrics: false, ..Options::new("test") },
    )
    .await
}

/// A credit and a debit of one account, in one FIFO group.
fn group(account: &str, credit_id: &str, debit_id: &str) -> Vec<Message> {
    let credit = format!(
        r#"{{"event_id": "{credit_id}", "account_id": "{account}", "amount_cents": 500, "currency": "USD", "receipt_email": "c@example.com"}}"#
    );
    let debit =
        format!(r#"{{"event_id": "{debit_id}", "account_id": "{account}", "amount_cents": -300, "currency": "USD"}}"#);
    vec![Message::new(credit).id("m-credit").group(account), Message::new(debit).id("m-debit").group(account)]
}

/// Consumer deployed without an outbox table: the receipt-bearing credit is failed
/// "permanently", the debit behind it is rejected for good. Config fixed, credit redriven:
/// the debit never applies.
#[tokio::test]
async fn a_configuration_fault_on_a_credit_holds_the_debit_behind_it() {
    let Tables { store, ledger, outbox, .. } = tables().await;
    let account = unique_name("acct");
    let (credit_id, debit_id) = (unique_name("credit"), unique_name("debit"));

    let misconfigured = Payments::new(Ledger::new(store.clone(), ledger.clone(), None));
    let first = invoke(&misconfigured, group(&account, &credit_id, &debit_id)).await;
    let failed: Vec<_> = first.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();

    // The operator sets OUTBOX_TABLE; SQS redelivers what failed (the credit), and a producer
    // retry or redrive brings the debit again too.
    let fixed = Payments::new(Ledger::new(store, ledger, Some(outbox)));
    invoke(&fixed, group(&account, &credit_id, &debit_id)).await;
    let balance = fixed.ledger().balance(&account).await.unwrap().unwrap();
    assert_eq!(
        (balance.balance_cents, balance.entry_count),
        (200, 2),
        "first batch failed {failed:?} and went on with the group: the debit was rejected for good \
         while its credit waited for a configuration fix"
    );
}

/// The same with a transient fault: the credit's transaction meets a 503 without a listed code
/// (one request, through a second client), `Other`, permanent; the group goes on.
#[tokio::test]
async fn a_server_error_on_a_credit_holds_the_debit_behind_it() {
    let port =
        effectively_once_dynamodb::testing::answering(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n");
    let Tables { store, ledger, outbox, .. } = tables().await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .build();
    let failing_store = DynamoDbStore::new(aws_sdk_dynamodb::Client::from_conf(conf), store.table());

    /// The first record handled meets the 503s (one DynamoDB outage); the rest the table.
    struct FirstFails {
        failing: Payments,
        real: Payments,
        used: AtomicBool,
    }
    impl effectively_once_lambda::Handler<SqsMessage> for FirstFails {
        async fn handle(
            &self,
            message: &SqsMessage,
            context: &effectively_once_lambda::events::Context,
        ) -> RecordResult {
            if !self.used.swap(true, Ordering::SeqCst) {
                self.failing.handle(message, context).await
            } else {
                self.real.handle(message, context).await
            }
        }
    }
    let real = Payments::new(Ledger::new(store, ledger.clone(), Some(outbox.clone())));
    let handler = FirstFails {
        failing: Payments::new(Ledger::new(failing_store, ledger, Some(outbox))),
        real,
        used: AtomicBool::new(false),
    };
    let account = unique_name("acct");
    let (credit_id, debit_id) = (unique_name("credit"), unique_name("debit"));
    let first = invoke(&handler, group(&account, &credit_id, &debit_id)).await;
    let failed: Vec<_> = first.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    // SQS redelivers the credit (and the debit, should a producer retry it): the outage is over.
    invoke(&handler, group(&account, &credit_id, &debit_id)).await;
    let balance = handler.real.ledger().balance(&account).await.unwrap().unwrap();
    assert_eq!(
        (balance.balance_cents, balance.entry_count),
        (200, 2),
        "first batch failed {failed:?} and went on with the group past a 503: the debit was rejected for good"
    );
}

/// A FIFO group that carries two accounts (a customer's), through the ordered path on a consumer
/// deployed without `OUTBOX_TABLE`: the first account's credit with a receipt fails retryably,
/// and the second account's payment behind it in the group is not posted (answered for delivery
/// again), although the ledger would hold back only the first account. Once the outbox is
/// there, SQS delivers both again and each posts once, in the group's order.
#[tokio::test]
async fn a_configuration_fault_holds_its_groups_later_payments_of_other_accounts_on_the_ordered_path() {
    let Tables { store, ledger, outbox, .. } = tables().await;
    let (customer, first, second) = (unique_name("cust"), unique_name("acct"), unique_name("acct"));
    let (credit_id, other_id) = (unique_name("credit"), unique_name("other"));
    let credit = format!(
        r#"{{"event_id": "{credit_id}", "account_id": "{first}", "amount_cents": 500, "currency": "USD", "receipt_email": "c@example.com"}}"#
    );
    let other =
        format!(r#"{{"event_id": "{other_id}", "account_id": "{second}", "amount_cents": 300, "currency": "USD"}}"#);
    let messages = || {
        let batch = [Message::new(credit.clone()).id("m-credit"), Message::new(other.clone()).id("m-other")];
        let event = Batch::new().queue("payments.fifo").messages(batch.map(|m| m.group(customer.clone()))).build();
        LambdaEvent::new(event, Context::default())
    };
    let options = Options { emit_metrics: false, ..Options::new("test") };

    let misconfigured = Payments::new(Ledger::new(store.clone(), ledger.clone(), None));
    let response = process_ordered(&misconfigured, messages(), &options).await;
    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, ["m-credit", "m-other"], "the group from the credit on");
    assert!(misconfigured.ledger().balance(&second).await.unwrap().is_none(), "the later payment waits");

    let fixed = Payments::new(Ledger::new(store, ledger, Some(outbox)));
    let response = process_ordered(&fixed, messages(), &options).await;
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    for (account, cents) in [(&first, 500), (&second, 300)] {
        let balance = fixed.ledger().balance(account).await.unwrap().unwrap();
        assert_eq!((balance.balance_cents, balance.entry_count), (cents, 1), "{account}");
    }
}
