//! The invocation's deadline bounds the ordered path (`kafka::process_ordered`) as it bounds the
//! batch path (`kafka::process_batch`): with DynamoDB answering slowly, the rounds stop starting
//! work within `Options::deadline_margin` of the deadline and answer in time, naming what they
//! did not start; the ordered path checks the deadline once, before its one call, and must not
//! run past it either (Lambda would end the invocation with no answer, and deliver the whole
//! batch again).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::{event, payment, record, Tables};
use aws_config::retry::RetryConfig;
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::events::{Context, KafkaRecord, LambdaEvent};
use effectively_once_lambda::kafka::{self, Options};
use kafka_consumer::Payments;
use local::proxy::{Fault, Proxy, Rules};
use payments::Ledger;

/// Every transaction answered after `DELAY`, as a DynamoDB under load answers.
struct SlowTransactions;

const DELAY: Duration = Duration::from_millis(300);

impl Rules for SlowTransactions {
    fn decide(&self, operation: &str) -> Fault {
        if operation.starts_with("dynamodb:TransactWriteItems") {
            Fault::Delay(DELAY)
        } else {
            Fault::Pass
        }
    }
}

/// Partition 0 holds a payment; each later partition a producer's retry of the payment before
/// it (the same event, written again under another partition) and a payment of its own. Each
/// retry waits for its first copy, and its partition behind it: a transaction each step.
fn chain(partitions: i64) -> Vec<KafkaRecord> {
    let own = |p: i64| payment(&format!("pay_09{p:02}"), &format!("acct_{p}"), 100);
    let mut records = vec![record(0, 1, &own(0))];
    for p in 1..partitions {
        records.push(record(p, 1, &own(p - 1)));
        records.push(record(p, 2, &own(p)));
    }
    records
}

fn deadline_in(ms: u64) -> Context {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let mut context = Context::default();
    context.deadline = now + ms;
    context
}

async fn slow_payments(tables: &Tables) -> (Payments, Proxy) {
    let proxy = Proxy::to_local_aws(Arc::new(SlowTransactions)).await.expect("the fault proxy");
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config(RetryConfig::disabled()).await);
    let store = DynamoDbStore::new(client, tables.store.table());
    (Payments::new(Ledger::new(store, &tables.ledger, None)), proxy)
}

#[tokio::test]
async fn the_ordered_path_answers_before_the_deadline_as_the_rounds_do() {
    let options = Options { emit_metrics: false, ..Options::new(kafka_consumer::FUNCTION) };
    let budget = Duration::from_millis(2000);
    let records = chain(8);

    let batched = Tables::fresh().await;
    let (payments, _proxy) = slow_payments(&batched).await;
    let started = Instant::now();
    let invocation = LambdaEvent::new(event(&records), deadline_in(budget.as_millis() as u64));
    let by_batch = kafka::process_batch(&payments, invocation, &options).await;
    let rounds_took = started.elapsed();
    assert!(rounds_took < budget, "the rounds answer in time: {rounds_took:?}");
    assert!(!by_batch.batch_item_failures.is_empty(), "the rounds named what they did not start");

    let ordered = Tables::fresh().await;
    let (payments, _proxy) = slow_payments(&ordered).await;
    let started = Instant::now();
    let invocation = LambdaEvent::new(event(&records), deadline_in(budget.as_millis() as u64));
    let by_order = kafka::process_ordered(&payments, invocation, &options).await;
    let ordered_took = started.elapsed();
    assert!(!by_order.batch_item_failures.is_empty(), "the ordered path names what it did not finish");
    assert!(
        ordered_took < budget,
        "the ordered path ran {ordered_took:?}, past the invocation's deadline ({budget:?}); the rounds took {rounds_took:?}"
    );
}

/// The records of `records` that `answer` names for delivery again, as Kafka's event source
/// delivers them next: each named partition from its first named offset on.
fn delivered_again(records: &[KafkaRecord], answer: &kafka::KafkaEventResponse) -> Vec<KafkaRecord> {
    let named = |record: &KafkaRecord| {
        answer.batch_item_failures.iter().any(|failure| {
            failure.item_identifier.partition == kafka::topic_partition(record)
                && failure.item_identifier.offset <= record.offset
        })
    };
    records.iter().filter(|record| named(record)).cloned().collect()
}

/// A batch cut at the deadline margin is delivered again, and again, to the same sandbox, with
/// DynamoDB as slow as before: each delivery must get further than the one before (what a cut
/// call committed is a duplicate now, which must cost less than doing it), or the partitions
/// never move and the batch is delivered for ever. The cut drops the ledger's answers and Kafka
/// says nothing of redeliveries, so the ledger notes the events of a commit dropped before it
/// answered and reads them first when they come again: a committed step is answered from one
/// read, not refused as a duplicate by a transaction as slow as the commit.
#[tokio::test]
async fn a_batch_cut_at_the_deadline_makes_progress_when_delivered_again() {
    let options = Options { emit_metrics: false, ..Options::new(kafka_consumer::FUNCTION) };
    let budget = Duration::from_millis(2000);
    let all = chain(8);
    let tables = Tables::fresh().await;
    let (payments, _proxy) = slow_payments(&tables).await;
    let mut records = all.clone();
    let mut left = Vec::new();
    for _ in 0..6 {
        if records.is_empty() {
            break;
        }
        let invocation = LambdaEvent::new(event(&records), deadline_in(budget.as_millis() as u64));
        let answer = kafka::process_ordered(&payments, invocation, &options).await;
        records = delivered_again(&records, &answer);
        left.push(records.len());
    }
    assert!(
        records.is_empty(),
        "records named again after each of {} deliveries: {left:?}; the batch never finishes",
        left.len()
    );
    let ledger = tables.payments();
    for p in 0..8 {
        let balance = ledger.ledger().balance(&format!("acct_{p}")).await.unwrap().expect("a balance");
        assert_eq!(balance.balance_cents, 100, "acct_{p}: posted once");
    }
}
