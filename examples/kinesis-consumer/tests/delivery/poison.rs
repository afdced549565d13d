//! Records that are not orders: each fails alone and for good, and is parked as delivered. A
//! retry cannot make bad data an order, so the answer never names one as the checkpoint (that
//! would hold the shard until the record aged out), and the orders around it, on its partition
//! key too, are stored.

use std::sync::Arc;

use effectively_once_lambda::Retry;

use crate::support::{
    self, assert_once, assert_parked_as_delivered, deliver, new_order, order_count, order_data, orders, record,
};

#[tokio::test]
async fn a_poison_record_fails_alone_permanently_is_parked_and_is_not_the_checkpoint() {
    let handler = orders().await;
    let (first, first_email) = new_order();
    let (last, last_email) = new_order();
    let batch = [
        record("customer-1", 1, &order_data(&first, &first_email, 10)),
        // Not JSON at all.
        record("customer-1", 2, b"{not an order"),
        // JSON, but not an order (no order id, a total that is not a number).
        record("customer-1", 3, br#"{"email": "x@example.com", "total_cents": "ten"}"#),
        // An order id the key rules refuse.
        record("customer-1", 4, &order_data("", "y@example.com", 5)),
        record("customer-1", 5, &order_data(&last, &last_email, 30)),
    ];
    let poison: Vec<String> = batch[1..4].iter().map(|r| r.kinesis.sequence_number.clone()).collect();
    let delivered = deliver(&handler, &batch).await;
    assert_eq!(delivered.checkpoint, Vec::<String>::new(), "a poison record is never the checkpoint");
    assert_failed_for_good(&delivered.failed, &poison);
    assert_parked(&delivered, &batch[1..4]);
    assert_once(&handler, &first, &first_email, 10).await;
    assert_once(&handler, &last, &last_email, 30).await;
    assert_eq!(order_count(&handler).await, 2, "nothing stored for the poison records");

    // Delivered again, the poison records still fail alone (parked again, at the same
    // coordinates) and the orders are not stored twice.
    let again = deliver(&handler, &batch).await;
    assert_eq!(again.checkpoint, Vec::<String>::new());
    assert_failed_for_good(&again.failed, &poison);
    assert_parked(&again, &batch[1..4]);
    assert_once(&handler, &last, &last_email, 30).await;
    assert_eq!(order_count(&handler).await, 2);
}

/// A poison record too large for its park queue's `MaximumMessageSize` (a queue left at the
/// 256 KiB of older stacks) is parked without its record, at its coordinates, and the poison
/// beside it is parked whole: the queue's own limit is read, not assumed, so neither is refused
/// and held until the stream gives the batch up.
#[tokio::test]
async fn a_poison_record_over_the_park_queues_size_is_parked_at_its_coordinates() {
    let handler = orders().await;
    let (order, email) = new_order();
    let batch = [
        record("customer-1", 1, &vec![b'x'; 300 * 1024]),
        record("customer-1", 2, b"{not an order"),
        record("customer-1", 3, &order_data(&order, &email, 10)),
    ];
    let park = support::park::ParkQueue::taking("kinesis-park-small", Some(256 * 1024)).await;
    let delivered = support::deliver_parking_in(&handler, &batch, park).await;
    assert_eq!(delivered.checkpoint, Vec::<String>::new(), "both parked, neither held: {:?}", delivered.failed);
    assert_eq!(delivered.parked.len(), 2, "{:?}", delivered.parked);
    let big = &delivered.parked[0];
    let at = effectively_once_lambda::park::Coordinates::Kinesis {
        shard_id: "shardId-000000000000".into(),
        sequence_number: batch[0].kinesis.sequence_number.clone(),
    };
    assert_eq!(big.coordinates, at);
    assert!(big.record["omitted"].as_str().is_some_and(|why| why.contains("read it at its coordinates")), "{big:?}");
    assert_parked_as_delivered(&delivered.parked[1], &batch[1]);
    assert_once(&handler, &order, &email, 10).await;
}

/// Exactly the `poison` records failed, each permanently.
fn assert_failed_for_good(failed: &[(String, effectively_once_lambda::RecordError)], poison: &[String]) {
    let mut sequences: Vec<&String> = failed.iter().map(|(sequence, _)| sequence).collect();
    sequences.sort();
    assert_eq!(sequences, poison.iter().collect::<Vec<_>>(), "the poison records fail, and they alone");
    for (sequence, error) in failed {
        assert_eq!(error.retry, Retry::Never, "record {sequence}: {error}");
    }
}

/// Exactly the `poison` records were parked, each once, as delivered, with the reason it failed
/// for.
fn assert_parked(delivered: &support::Delivered, poison: &[effectively_once_lambda::events::KinesisEventRecord]) {
    assert_eq!(delivered.parked.len(), poison.len(), "{:?}", delivered.parked);
    for (parcel, record) in delivered.parked.iter().zip(poison) {
        assert_parked_as_delivered(parcel, record);
        let failed = delivered.failed.iter().find(|(sequence, _)| *sequence == record.kinesis.sequence_number);
        assert_eq!(Some(parcel.reason.as_str()), failed.map(|(_, e)| e.reason.as_str()), "parked with its reason");
    }
}

/// An order is a JSON object: serde's derive would also build one from an array of its fields
/// in order (`["order", "x", 100]`, an order to the address `x`).
#[test]
fn a_json_array_is_not_an_order_and_an_object_with_its_fields_is() {
    let decoded = serde_json::from_slice::<kinesis_consumer::Order>(br#"["order", "x", 100]"#);
    assert!(decoded.is_err(), "decoded as {decoded:?}");
    let order: kinesis_consumer::Order =
        serde_json::from_slice(br#"{"order_id": "o1", "email": "a@example.com", "total_cents": 1250}"#).unwrap();
    assert_eq!((order.order_id.as_str(), order.email.as_str(), order.total_cents), ("o1", "a@example.com", 1250));
    assert!(
        serde_json::from_slice::<kinesis_consumer::Order>(br#"{"order_id": "o1", "email": "a@example.com"}"#).is_err()
    );
}

/// Refuses every `GetQueueAttributes` the client sends (a role without
/// `sqs:GetQueueAttributes`, a fault), counting them; other calls pass.
#[derive(Debug, Default)]
struct RefuseQueueAttributes(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl aws_sdk_sqs::config::Intercept for RefuseQueueAttributes {
    fn name(&self) -> &'static str {
        "RefuseQueueAttributes"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_sqs::config::RuntimeComponents,
        _: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let target = context.request().headers().get("x-amz-target").unwrap_or_default();
        if !target.ends_with(".GetQueueAttributes") {
            return Ok(());
        }
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err("refused: sqs:GetQueueAttributes".into())
    }
}

/// The park queue's size cannot be read: parking goes on, at 1 MiB, and the size is read again
/// at the next park.
#[tokio::test]
async fn poison_is_parked_when_the_queue_size_cannot_be_read() {
    let handler = orders().await;
    let park = support::park::ParkQueue::fresh("kinesis-park-unread").await;
    let refused = std::sync::Arc::default();
    let sdk = effectively_once_dynamodb::testing::sdk_config().await;
    let config = aws_sdk_sqs::config::Builder::from(&sdk).interceptor(RefuseQueueAttributes(Arc::clone(&refused)));
    let queue = effectively_once_lambda::park::SqsQueue::new(aws_sdk_sqs::Client::from_conf(config.build()), &park.url);
    let options = effectively_once_lambda::kinesis::Options {
        emit_metrics: false,
        ..effectively_once_lambda::kinesis::Options::new("kinesis-consumer")
    }
    .park_in(queue);
    let poison = record("customer-1", 1, b"{not an order");
    let mut event = effectively_once_lambda::events::KinesisEvent::default();
    event.records = vec![poison.clone()];
    let context = effectively_once_lambda::events::Context::default();
    let event = effectively_once_lambda::events::LambdaEvent::new(event, context);
    let response = effectively_once_lambda::kinesis::process(&handler, event, &options).await;
    assert!(response.batch_item_failures.is_empty(), "parked, not held: {response:?}");
    assert_eq!(refused.load(std::sync::atomic::Ordering::SeqCst), 1, "the size read was refused");
    let parked = park.drain().await;
    assert_eq!(parked.len(), 1);
    assert_parked_as_delivered(&parked[0], &poison);
}
