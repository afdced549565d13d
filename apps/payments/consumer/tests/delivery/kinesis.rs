//! The payments consumer on Kinesis records (`payments-kinesis-consumer`), on the local AWS: a
//! batch of several partition keys, each carrying several accounts, is one call and one
//! transaction on the ordered path, the ledger the same as the rounds leave; a record whose data
//! is no payment fails alone, parked, and holds back nothing.

use aws_lambda_events::event::kinesis::KinesisEvent;
use base64::Engine;
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_lambda::kinesis::{process_batch, process_ordered, Options};
use lambda_runtime::{Context, LambdaEvent};
use local::park::ParkQueue;
use local::Clients;
use serde_json::json;

use crate::support::counted;

/// A Kinesis event as Lambda hands it over: `(partition key, data)` in stream order, sequence
/// numbers rising, one shard.
fn event(records: &[(&str, String)]) -> KinesisEvent {
    let records: Vec<_> = records
        .iter()
        .enumerate()
        .map(|(n, (key, data))| {
            let sequence = format!("4959{n:020}");
            json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0", "partitionKey": key, "sequenceNumber": sequence,
                    "data": base64::engine::general_purpose::STANDARD.encode(data),
                    "approximateArrivalTimestamp": 1_765_000_000.0 + n as f64,
                },
                "eventSource": "aws:kinesis", "eventVersion": "1.0",
                "eventID": format!("shardId-000000000000:{sequence}"), "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/payments",
                "awsRegion": "us-east-1", "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/payments",
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).unwrap()
}

fn payment(event_id: &str, account: &str, amount_cents: i64) -> String {
    json!({"event_id": event_id, "account_id": account, "amount_cents": amount_cents, "currency": "USD"}).to_string()
}

/// Three partition keys (a producer keyed by region, say), each carrying several accounts, ten
/// payments with debits their earlier credits pay for, and a record that is no payment: the
/// ordered path posts the ten in one call and one transaction where the rounds take a call and
/// a transaction a round (the longest key's four records); both leave the same balances; the bad record
/// fails alone, parked, and no payment waits for it.
#[tokio::test]
async fn three_partition_keys_of_several_accounts_are_one_call_and_one_transaction_on_the_ordered_path() {
    let run = unique_name("k");
    let acct = |name: &str| format!("{run}-{name}");
    let id = |n: u32| format!("{run}-pay{n}");
    let records = [
        ("eu", payment(&id(1), &acct("a"), 1000)),
        ("eu", payment(&id(2), &acct("b"), 400)),
        ("us", payment(&id(3), &acct("c"), 300)),
        ("eu", payment(&id(4), &acct("a"), -250)),
        ("us", "{not a payment".to_owned()),
        ("us", payment(&id(5), &acct("d"), 60)),
        ("ap", payment(&id(6), &acct("e"), 20)),
        ("eu", payment(&id(7), &acct("b"), -400)),
        ("us", payment(&id(8), &acct("c"), -300)),
        ("ap", payment(&id(9), &acct("e"), 5)),
        ("ap", payment(&id(10), &acct("f"), 35)),
    ];
    let event = event(&records);
    let clients = Clients::local().await;
    let mut balances = Vec::new();
    for ordered in [true, false] {
        let (handler, requests) = counted().await;
        let park = ParkQueue::fresh(&clients, "kinesis-park").await.expect("a park queue");
        let options = Options { emit_metrics: false, ..Options::new("test") }.park_in(park.destination());
        let invocation = LambdaEvent::new(event.clone(), Context::default());
        let response = if ordered {
            process_ordered(&handler, invocation, &options).await
        } else {
            process_batch(&handler, invocation, &options).await
        };
        assert!(response.batch_item_failures.is_empty(), "ordered {ordered}: {:?}", response.batch_item_failures);
        let parked = park.drain().await.expect("the park queue read back");
        assert_eq!(parked.len(), 1, "the bad record alone: {parked:?}");
        assert_eq!(parked[0].record, serde_json::to_value(&event.records[4]).unwrap(), "parked as delivered");
        let transactions = requests.by_operation().get("TransactWriteItems").copied();
        let (calls, expected) = if ordered { (1, 1) } else { (4, 4) };
        assert_eq!(handler.calls(), calls, "ordered {ordered}");
        assert_eq!(transactions, Some(expected), "ordered {ordered}: {:?}", requests.by_operation());
        let mut of_run = Vec::new();
        for name in ["a", "b", "c", "d", "e", "f"] {
            let balance = handler.inner.ledger().balance(&acct(name)).await.unwrap().unwrap();
            of_run.push((balance.balance_cents, balance.entry_count));
        }
        balances.push(of_run);
    }
    assert_eq!(balances[0], [(750, 2), (0, 2), (0, 2), (60, 1), (25, 2), (35, 1)], "every payment, in order");
    assert_eq!(balances[0], balances[1], "the same on both paths");
}
