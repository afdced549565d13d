//! Replays run the function in process: a Kinesis mapping's on-failure destination replayed
//! through an orders consumer (the chaos scenario's stream path, a function that is not the
//! payments'), its discarded orders stored and confirmed once and the destination emptied; and
//! `payments-local replay-parked` without `--invoke-url`, a parked record handed to the named
//! payments function in process.

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use clap::Parser;
use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_dynamodb::{DynamoDbStore, Table};
use effectively_once_effects::testing::emails_to;
use effectively_once_effects::SesSender;
use effectively_once_lambda::Typed;
use local::esm::{self, KinesisMapping};
use local::invoke::{InProcess, KinesisFunction};
use payments_local::chaos::orders::{Orders, OrdersResources};
use payments_local::cli::Cli;
use payments_local::pipeline::Pipeline;
use payments_local::resources::{Clients, RECEIPT_FROM};

/// A function that is down: every invocation fails.
struct Down;

impl KinesisFunction for Down {
    async fn invoke(&self, _event: KinesisEvent) -> local::Result<KinesisEventResponse> {
        Err("the function is down".into())
    }
}

#[tokio::test]
async fn replaying_the_orders_destination_runs_the_orders_consumer_in_process() {
    let prefix = unique_name("replay-orders");
    let pipeline = Pipeline::up(Clients::local().await, &prefix).await.expect("local resources");
    let clients = &pipeline.clients;
    let r = OrdersResources::up(clients, &prefix).await.expect("the orders stream and table");
    let orders: Vec<(String, String)> =
        (0..2).map(|_| unique_name("ord")).map(|id| (id.clone(), format!("{id}@example.com"))).collect();
    for (id, email) in &orders {
        let data = serde_json::json!({"order_id": id, "email": email, "total_cents": 500}).to_string();
        let put = clients.kinesis.put_record().stream_name(&r.stream).partition_key("customer-1");
        put.data(Blob::new(data)).send().await.expect("put");
    }
    // The function was down for the whole retry budget: the batch is in the destination.
    let mut mapping = KinesisMapping::new(&r.stream, Some(r.failures_url.clone()));
    (mapping.settings.max_retries, mapping.settings.bisect_on_error) = (0, false);
    esm::poll_kinesis(clients, &mut mapping, &Down).await.expect("poll");
    assert_eq!(esm::queue_depth(clients, &r.failures_url).await.unwrap(), 1);

    let store = DynamoDbStore::new(clients.dynamodb.clone(), &pipeline.resources.idempotency_table);
    let consumer = Orders {
        idempotency: Idempotency::new(store, Config::default()),
        orders: Table::new(&r.table, "pk"),
        sender: SesSender::new(clients.ses.clone(), RECEIPT_FROM),
    };
    let function = InProcess::new(Typed(consumer), "orders-consumer").park_in(&clients.sqs, &r.park_url);
    let replayed = esm::replay_kinesis_failures(clients, &mapping, &function).await.expect("replay in process");
    replayed.all_through().expect("nothing kept");

    assert_eq!(esm::queue_depth(clients, &r.failures_url).await.unwrap(), 0, "the destination is empty");
    for (id, email) in &orders {
        let item = clients.dynamodb.get_item().table_name(&r.table);
        let item = item.key("pk", AttributeValue::S(format!("order#{id}"))).consistent_read(true).send().await.unwrap();
        assert!(item.item().is_some(), "order {id} stored in {}", r.table);
        assert_eq!(emails_to(email).len(), 1, "one confirmation of {id}");
    }
    r.down(clients).await;
    pipeline.down().await.ok();
}

/// `payments-local replay-parked --function kafka-consumer`: a parked payment goes through the
/// Kafka payments consumer in process and is posted once, its message deleted; a parked record
/// of a trigger that consumer does not take is kept, and the command fails naming it.
#[tokio::test]
async fn replaying_a_park_queue_runs_the_named_function_in_process_and_fails_while_any_is_kept() {
    use base64::Engine as _;
    let prefix = unique_name("replay-parked");
    let pipeline = Pipeline::up(Clients::local().await, &prefix).await.expect("local resources");
    let (clients, r) = (&pipeline.clients, &pipeline.resources);
    let queue = clients.sqs.create_queue().queue_name(unique_name("park")).send().await.expect("queue");
    let queue = queue.queue_url().unwrap().to_owned();
    let (id, account) = (unique_name("pay"), unique_name("acct"));
    let payment = serde_json::json!({"event_id": id, "account_id": account, "amount_cents": 500, "currency": "USD"});
    let value = base64::engine::general_purpose::STANDARD.encode(payment.to_string());
    let kafka = serde_json::json!({"trigger": "aws:kafka", "event_source_arn": null, "reason": "refused",
        "coordinates": {"topic_partition": "payments-0", "offset": 7}, "bootstrap_servers": null,
        "record": {"topic": "payments", "partition": 0, "offset": 7, "timestamp": 1, "key": null, "value": value,
            "headers": []}});
    let sequence = "49590338271490256608559692538361571095921575989136588898";
    let order = serde_json::json!({"trigger": "aws:kinesis", "event_source_arn": null, "reason": "refused",
        "coordinates": {"shard_id": "shardId-000000000000", "sequence_number": sequence},
        "record": {"eventSource": "aws:kinesis", "eventID": format!("shardId-000000000000:{sequence}"),
            "kinesis": {"partitionKey": "customer-1", "sequenceNumber": sequence, "kinesisSchemaVersion": "1.0",
                "data": "e30=", "approximateArrivalTimestamp": 1.5}}});
    local::esm::queue::send(&clients.sqs, &queue, &[kafka.to_string(), order.to_string()]).await.unwrap();

    let line =
        ["payments-local", "replay-parked", "--queue", &queue, "--function", "kafka-consumer", "--prefix", &prefix];
    let error = Cli::try_parse_from(line).unwrap().command.apply().await.expect_err("one kept");
    let error = local::error::report(&*error);
    assert!(
        error.contains("1 kept") && error.contains(&format!("aws:kinesis shardId-000000000000:{sequence}")),
        "{error}"
    );
    assert_eq!(esm::peek_bodies(clients, &queue).await.unwrap(), vec![order.to_string()], "the payment's deleted");
    let entry = clients.dynamodb.get_item().table_name(&r.ledger_table);
    let entry = entry.key("pk", AttributeValue::S(format!("account#{account}")));
    let entry = entry.key("sk", AttributeValue::S(format!("entry#{id}"))).consistent_read(true).send().await.unwrap();
    assert!(entry.item().is_some(), "payment {id} posted");
    pipeline.down().await.ok();
}
