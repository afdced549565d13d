//! `local replay-stream --source orders` without `--invoke-url`: the Kinesis consumer runs in
//! process, as the outbox's replay runs the relay, and the discarded orders are stored and
//! confirmed once, the destination emptied.

use aws_lambda_events::event::kinesis::KinesisEvent;
use aws_lambda_events::event::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use clap::Parser;
use effectively_once_dynamodb::testing::unique_name;
use effectively_once_effects::testing::emails_to;
use local::cli::Cli;
use local::esm::{self, KinesisMapping};
use local::invoke::KinesisFunction;
use local::pipeline::Pipeline;
use local::resources::Clients;

/// A function that is down: every invocation fails.
struct Down;

impl KinesisFunction for Down {
    async fn invoke(&self, _event: KinesisEvent) -> local::Result<KinesisEventResponse> {
        Err("the function is down".into())
    }
}

#[tokio::test]
async fn replaying_the_orders_destination_runs_the_kinesis_consumer_in_process() {
    let prefix = unique_name("replay-orders");
    let pipeline = Pipeline::up(Clients::local().await, &prefix).await.expect("local resources");
    let (clients, r) = (&pipeline.clients, &pipeline.resources);
    let orders: Vec<(String, String)> =
        (0..2).map(|_| unique_name("ord")).map(|id| (id.clone(), format!("{id}@example.com"))).collect();
    for (id, email) in &orders {
        let data = serde_json::json!({"order_id": id, "email": email, "total_cents": 500}).to_string();
        let put = clients.kinesis.put_record().stream_name(&r.orders_stream).partition_key("customer-1");
        put.data(Blob::new(data)).send().await.expect("put");
    }
    // The function was down for the whole retry budget: the batch is in the destination.
    let mut mapping = KinesisMapping::new(&r.orders_stream, Some(r.orders_failures_url.clone()));
    (mapping.settings.max_retries, mapping.settings.bisect_on_error) = (0, false);
    esm::poll_kinesis(clients, &mut mapping, &Down).await.expect("poll");
    assert_eq!(esm::queue_depth(clients, &r.orders_failures_url).await.unwrap(), 1);

    let cli = Cli::try_parse_from(["local", "replay-stream", "--source", "orders", "--prefix", &prefix]).unwrap();
    cli.command.apply().await.expect("replay in process");

    assert_eq!(esm::queue_depth(clients, &r.orders_failures_url).await.unwrap(), 0, "the destination is empty");
    for (id, email) in &orders {
        let item = clients.dynamodb.get_item().table_name(&r.orders_table);
        let item = item.key("pk", AttributeValue::S(format!("order#{id}"))).consistent_read(true).send().await.unwrap();
        assert!(item.item().is_some(), "order {id} stored in {}", r.orders_table);
        assert_eq!(emails_to(email).len(), 1, "one confirmation of {id}");
    }
    pipeline.down().await.ok();
}

/// `local replay-parked --function kinesis-consumer`: a parked order goes through the Kinesis
/// consumer in process and is stored and confirmed once, its message deleted; a parked record
/// of a trigger that consumer does not take is kept, and the command fails naming it.
#[tokio::test]
async fn replaying_a_park_queue_runs_the_named_function_in_process_and_fails_while_any_is_kept() {
    use base64::Engine as _;
    let prefix = unique_name("replay-parked");
    let pipeline = Pipeline::up(Clients::local().await, &prefix).await.expect("local resources");
    let (clients, r) = (&pipeline.clients, &pipeline.resources);
    let queue = clients.sqs.create_queue().queue_name(unique_name("park")).send().await.expect("queue");
    let queue = queue.queue_url().unwrap().to_owned();
    let (id, email) = (unique_name("ord"), format!("{}@example.com", unique_name("buyer")));
    let data = serde_json::json!({"order_id": id, "email": email, "total_cents": 500}).to_string();
    let sequence = "49590338271490256608559692538361571095921575989136588898";
    let order = serde_json::json!({"trigger": "aws:kinesis", "event_source_arn": null, "reason": "refused",
        "coordinates": {"shard_id": "shardId-000000000000", "sequence_number": sequence},
        "record": {"eventSource": "aws:kinesis", "eventID": format!("shardId-000000000000:{sequence}"),
            "kinesis": {"partitionKey": "customer-1", "sequenceNumber": sequence, "kinesisSchemaVersion": "1.0",
                "data": base64::engine::general_purpose::STANDARD.encode(&data), "approximateArrivalTimestamp": 1.5}}});
    let kafka = serde_json::json!({"trigger": "aws:kafka", "event_source_arn": null, "reason": "refused",
        "coordinates": {"topic_partition": "payments-0", "offset": 7}, "bootstrap_servers": null,
        "record": {"topic": "payments", "partition": 0, "offset": 7, "timestamp": 1, "key": null, "value": null,
            "headers": []}});
    local::workload::send(&clients.sqs, &queue, &[order.to_string(), kafka.to_string()]).await.unwrap();

    let line = ["local", "replay-parked", "--queue", &queue, "--function", "kinesis-consumer", "--prefix", &prefix];
    let error = Cli::try_parse_from(line).unwrap().command.apply().await.expect_err("one kept");
    let error = local::error::report(&*error);
    assert!(error.contains("1 kept") && error.contains("aws:kafka payments-0 offset 7"), "{error}");
    assert_eq!(esm::peek_bodies(clients, &queue).await.unwrap(), vec![kafka.to_string()], "the order's deleted");
    let item = clients.dynamodb.get_item().table_name(&r.orders_table);
    let item = item.key("pk", AttributeValue::S(format!("order#{id}"))).consistent_read(true).send().await.unwrap();
    assert!(item.item().is_some(), "order {id} stored");
    assert_eq!(emails_to(&email).len(), 1, "one confirmation");
    pipeline.down().await.ok();
}
