//! Lambda events built in code (feature `test-util`), one builder per trigger, so a handler is
//! tested with `LambdaEvent::new(batch.build(), Context::default())` and no emulator:
//!
//! - [`sqs::Batch`]: an `SqsEvent` from message bodies, with ids, receive counts, FIFO groups
//!   and trace headers as SQS sets them;
//! - [`streams::Batch`]: a DynamoDB Streams event of `INSERT`, `MODIFY` and `REMOVE` records
//!   whose images are serde values;
//! - [`kinesis::Batch`]: a Kinesis event of records with partition keys and increasing sequence
//!   numbers, the data in base64 as Lambda sends it;
//! - [`kafka::Batch`]: a Kafka (MSK or self-managed) event of records by topic-partition, with
//!   offsets, keys, values and headers encoded as Lambda encodes them.
//!
//! ```
//! use effectively_once_lambda::testing::{kafka, kinesis, sqs, streams};
//!
//! let batch = sqs::Batch::new()
//!     .message(r#"{"order_id": "ord_1"}"#)
//!     .message(sqs::Message::new(r#"{"order_id": "ord_1"}"#).receive_count(3));
//! let event = batch.build();
//! assert_eq!(event.records[1].message_id.as_deref(), Some("m-2"));
//! assert_eq!(event.records[1].attributes["ApproximateReceiveCount"], "3");
//!
//! let changes = streams::Batch::new("orders", &["pk"])
//!     .insert(serde_json::json!({"pk": "order#ord_1", "total_cents": 4200}))
//!     .build();
//! assert_eq!(changes.records[0].event_name, "INSERT");
//!
//! let shard = kinesis::Batch::new().record(kinesis::Record::new("customer-1", r#"{"order_id": "ord_1"}"#)).build();
//! assert_eq!(shard.records[0].kinesis.partition_key, "customer-1");
//!
//! let topic = kafka::Batch::new("orders").record(kafka::Record::new(r#"{"order_id": "ord_1"}"#).key("customer-1")).build();
//! assert_eq!(topic.records["orders-0"][0].offset, 0);
//! ```
//!
//! The events name a fixed region and account ([`REGION`], [`ACCOUNT`]) and fixed timestamps, so
//! a test builds the same event every run.

pub mod kafka;
pub mod kinesis;
pub mod sqs;
pub mod streams;

/// The region the built events name.
pub const REGION: &str = "us-east-1";
/// The account the built events' ARNs name.
pub const ACCOUNT: &str = "000000000000";

/// A timestamp field of `aws_lambda_events` (seconds or milliseconds since the epoch, as the field
/// reads it), set through its JSON form: the types wrap `chrono`, which this crate does not
/// otherwise need.
fn timestamp<T: serde::de::DeserializeOwned>(since_epoch: serde_json::Value) -> T {
    serde_json::from_value(since_epoch).expect("a number of seconds or milliseconds reads as a timestamp")
}
