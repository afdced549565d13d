//! The park destination: where a stream trigger (Kafka, Kinesis, DynamoDB Streams) puts a record
//! that failed permanently, durably, before its position passes it.
//!
//! On SQS a permanent failure is reported failed and reaches the queue's DLQ after
//! `maxReceiveCount`, with the message itself. A stream has no such place: its answer names a
//! resume point, and a record left out of it is committed past. So the driver parks each
//! permanent failure first (its [`Parcel`]: the record as delivered, the reason, its coordinates)
//! and only a record parked counts as done; a park that fails makes the record retryable, and the
//! position holds until a later delivery parks it. What a function does with poison is
//! [`Options::poison`](crate::Options::poison): [`Poison::Park`] in a [`Destination`] (an SQS
//! queue, [`SqsQueue`] with the `sqs` feature), or [`Poison::Drop`], which must be asked for by
//! name. With neither, `run` refuses to start on a stream trigger and `process` holds poison like
//! a retryable failure: losing a record is a choice, never a default.
//!
//! A parcel may be parked more than once (a batch delivered again after its invocation failed):
//! replaying it is harmless, the handler's idempotency answers the second copy as a duplicate.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A parked record: what its park message holds, as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parcel {
    /// The trigger, as Lambda names its event source: `aws:kafka` (also for self-managed Kafka),
    /// `aws:kinesis`, `aws:dynamodb`.
    pub trigger: String,
    /// The event source mapping's source (the stream, the MSK cluster), when the event names it.
    pub event_source_arn: Option<String>,
    /// Where the record sits in its source.
    pub coordinates: Coordinates,
    /// Why it failed, its email addresses redacted as in the logs.
    pub reason: String,
    /// The record exactly as Lambda delivered it in the event (`aws_lambda_events`' JSON form: a
    /// Kafka or Kinesis payload in base64, a DynamoDB Streams record with its images), so a replay
    /// rebuilds the event from it.
    pub record: serde_json::Value,
    /// Kafka only: the event's `bootstrapServers`, for a replay's event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_servers: Option<String>,
}

/// A record's place in its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Coordinates {
    /// A Kafka record: `{topic}-{partition}` and offset.
    Kafka {
        /// `{topic}-{partition}`, as the event's `records` map names it.
        topic_partition: String,
        /// The record's offset.
        offset: i64,
    },
    /// A Kinesis record: its shard and sequence number.
    Kinesis {
        /// The shard, from the record's `eventID` (`shardId-...:sequence`).
        shard_id: String,
        /// The record's sequence number.
        sequence_number: String,
    },
    /// A DynamoDB Streams record: its sequence number.
    DynamoDb {
        /// The record's sequence number.
        sequence_number: String,
    },
}

impl fmt::Display for Coordinates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Coordinates::Kafka { topic_partition, offset } => write!(f, "{topic_partition}@{offset}"),
            Coordinates::Kinesis { shard_id, sequence_number } => write!(f, "{shard_id}:{sequence_number}"),
            Coordinates::DynamoDb { sequence_number } => f.write_str(sequence_number),
        }
    }
}

/// A boxed future, as [`Destination::park`] returns it (the trait is used as `dyn`).
pub type ParkFuture<'a> = Pin<Box<dyn Future<Output = Vec<Result<(), String>>> + Send + 'a>>;

/// Somewhere durable to put poison.
pub trait Destination: Send + Sync {
    /// Parks each parcel; one result per parcel, in order. `Ok` only once the parcel is durable:
    /// the driver then lets the position pass the record. `Err` carries why, for the log.
    fn park<'a>(&'a self, parcels: &'a [Parcel]) -> ParkFuture<'a>;
}

/// What a stream driver does with a record that failed permanently.
#[derive(Clone, Default)]
pub enum Poison {
    /// Not chosen: `run` refuses to start on a stream trigger; `process` holds the record as if
    /// its failure were retryable (the position stays there until the mapping's retries or record
    /// age send the batch to its on-failure destination).
    #[default]
    Unchosen,
    /// Parked in the destination before the position passes it.
    Park(Arc<dyn Destination>),
    /// Dropped: logged at error and counted, nothing kept. Only by name.
    Drop,
}

impl fmt::Debug for Poison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Poison::Unchosen => f.write_str("Unchosen"),
            Poison::Park(_) => f.write_str("Park(..)"),
            Poison::Drop => f.write_str("Drop"),
        }
    }
}

/// The environment variable naming a function's park queue.
pub const PARK_QUEUE_URL: &str = "PARK_QUEUE_URL";

/// The largest park message body [`SqsQueue`] sends with the record in it (SQS takes up to 1 MiB
/// a message); a larger parcel is parked without its record, which stays readable at its
/// coordinates for the source's retention.
pub const MAX_BODY: usize = 1024 * 1024;

#[cfg(feature = "sqs")]
mod sqs_queue;
#[cfg(feature = "sqs")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqs")))]
pub use sqs_queue::SqsQueue;

/// The longest reason a parcel keeps, in bytes: a handler's text is not bounded.
pub const MAX_REASON: usize = 4096;

/// The parcel's message body: its JSON, or, over `max` bytes, the same without the record. Every
/// character SQS refuses in a message (controls, surrogates, U+FFFE and U+FFFF: a stream image
/// may hold any of them) is written as a JSON escape, so the body is the same JSON and SQS takes
/// it.
pub fn body(parcel: &Parcel, max: usize) -> String {
    let full = sqs_safe(serde_json::to_string(parcel).unwrap_or_default());
    if full.len() <= max {
        return full;
    }
    let mut light = parcel.clone();
    light.record = serde_json::json!({
        "omitted": format!("the record made the message {} bytes, over {max}: read it at its coordinates", full.len())
    });
    sqs_safe(serde_json::to_string(&light).unwrap_or_default())
}

/// `json` with each character outside SQS's allowed set (#x9, #xA, #xD, #x20 to #xD7FF, #xE000
/// to #xFFFD, #x10000 to #x10FFFF) as a `\uXXXX` escape. Outside strings, JSON text holds none.
fn sqs_safe(json: String) -> String {
    let allowed =
        |c: char| matches!(c, '\t' | '\n' | '\r' | ' '..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..);
    if json.chars().all(allowed) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if allowed(c) {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{:04x}", c as u32));
        }
    }
    out
}

/// `reason` cut to [`MAX_REASON`] bytes, on a character boundary.
pub(crate) fn bounded(reason: String) -> String {
    if reason.len() <= MAX_REASON {
        return reason;
    }
    let mut end = MAX_REASON;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &reason[..end])
}

#[cfg(test)]
mod tests {
    use super::{body, bounded, Coordinates, Parcel, MAX_REASON};

    fn parcel(record: serde_json::Value) -> Parcel {
        Parcel {
            trigger: "aws:dynamodb".into(),
            event_source_arn: None,
            coordinates: Coordinates::DynamoDb { sequence_number: "1".into() },
            reason: "bad".into(),
            record,
            bootstrap_servers: None,
        }
    }

    /// A stream image may hold characters SQS refuses: escaped, the body is the same JSON.
    #[test]
    fn a_body_holds_only_what_sqs_takes_and_reads_back_the_same() {
        let parcel = parcel(serde_json::json!({"NewImage": {"note": {"S": "a\u{FFFF}b\u{FFFE}\u{1}c\u{1F600}"}}}));
        let text = body(&parcel, 1 << 20);
        assert!(!text.contains('\u{FFFF}') && !text.contains('\u{FFFE}') && !text.contains('\u{1}'), "{text}");
        assert!(text.contains('\u{1F600}'), "allowed characters are kept as they are");
        let back: Parcel = serde_json::from_str(&text).unwrap();
        assert_eq!(back, parcel);
    }

    #[test]
    fn a_body_over_the_limit_goes_without_its_record() {
        let parcel = parcel(serde_json::json!({"data": "x".repeat(2000)}));
        let text = body(&parcel, 1000);
        assert!(text.len() < 1000, "{}", text.len());
        let back: Parcel = serde_json::from_str(&text).unwrap();
        assert_eq!(back.coordinates, parcel.coordinates);
        assert!(back.record["omitted"].as_str().unwrap().contains("over 1000"));
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        let reason = "é".repeat(MAX_REASON);
        let cut = bounded(reason);
        assert!(cut.len() <= MAX_REASON + 3 && cut.ends_with("..."));
        assert_eq!(bounded("short".into()), "short");
    }
}
