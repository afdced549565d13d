//! Kinesis Data Streams events built in code: one shard's records, as the event source mapping
//! hands them to a function.

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};

use super::{timestamp, ACCOUNT, REGION};

/// The digits every built sequence number opens with: Kinesis's are 56 digits, more than a
/// `u128` holds, so a record's number is this prefix and its count from
/// [`sequence_from`](Batch::sequence_from), zero-padded. Equal length keeps the text order the
/// numeric order, as Kinesis's own numbers of one shard are.
pub const SEQUENCE_PREFIX: &str = "49590338271490256608";

/// One record of a [`Batch`]: a partition key and the producer's data (bytes, or text such as
/// JSON), and optionally a sequence number of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    partition_key: String,
    data: Vec<u8>,
    sequence_number: Option<String>,
}

impl Record {
    /// A record put on `partition_key` with `data` (`&str`, `String`, `Vec<u8>`, `&[u8]`).
    pub fn new(partition_key: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        Record { partition_key: partition_key.into(), data: data.into(), sequence_number: None }
    }

    /// The sequence number, as written (default: the batch's next, [`SEQUENCE_PREFIX`] and a
    /// count). A producer's retry of a lost put is the same data under a new number; a record
    /// delivered again is the same number.
    pub fn sequence_number(mut self, sequence_number: impl Into<String>) -> Self {
        self.sequence_number = Some(sequence_number.into());
        self
    }
}

/// A batch of one shard's records, built into the [`KinesisEvent`] a function receives.
///
/// Each record without a sequence number of its own gets the next one (counting from 1, or from
/// [`sequence_from`](Self::sequence_from)), 56 digits as Kinesis writes them; its data is
/// carried in base64, as Lambda sends it, and read back as bytes by the drivers.
///
/// ```
/// use effectively_once_lambda::testing::kinesis::{Batch, Record};
///
/// let event = Batch::new()
///     .stream("orders")
///     .record(Record::new("customer-1", r#"{"order_id": "ord_1"}"#))
///     .record(Record::new("customer-1", r#"{"order_id": "ord_2"}"#))
///     .build();
/// let second = &event.records[1];
/// assert_eq!(second.kinesis.partition_key, "customer-1");
/// assert_eq!(second.kinesis.sequence_number, "49590338271490256608000000000000000000000000000000000002");
/// assert_eq!(second.kinesis.data.0, br#"{"order_id": "ord_2"}"#);
/// assert_eq!(second.event_source_arn.as_deref(), Some("arn:aws:kinesis:us-east-1:000000000000:stream/orders"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    stream: String,
    shard: String,
    next_sequence: u64,
    records: Vec<Record>,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            stream: "test-stream".to_owned(),
            shard: "shardId-000000000000".to_owned(),
            next_sequence: 1,
            records: Vec::new(),
        }
    }
}

impl Batch {
    /// An empty batch of shard `shardId-000000000000` of the stream `test-stream`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The stream's name, which the event source ARN carries.
    pub fn stream(mut self, name: impl Into<String>) -> Self {
        self.stream = name.into();
        self
    }

    /// The shard's id, which each record's event id opens with.
    pub fn shard(mut self, shard_id: impl Into<String>) -> Self {
        self.shard = shard_id.into();
        self
    }

    /// The count the next record's sequence number carries (those after it count on from it):
    /// a later batch of the same shard starts past the earlier one's.
    pub fn sequence_from(mut self, count: u64) -> Self {
        self.next_sequence = count;
        self
    }

    /// Adds a record, numbered now if it has no sequence number of its own.
    pub fn record(mut self, record: Record) -> Self {
        let numbered = match record.sequence_number {
            Some(_) => record,
            None => {
                let number = sequence_number(self.next_sequence);
                self.next_sequence += 1;
                record.sequence_number(number)
            }
        };
        self.records.push(numbered);
        self
    }

    /// Adds a record per item, in order.
    pub fn records(self, records: impl IntoIterator<Item = Record>) -> Self {
        records.into_iter().fold(self, Batch::record)
    }

    /// The event, records in the order added. Arrival timestamps are fixed values a millisecond
    /// apart (the same event every run).
    pub fn build(&self) -> KinesisEvent {
        let arn = format!("arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/{}", self.stream);
        let mut event = KinesisEvent::default();
        event.records = (0u32..)
            .zip(&self.records)
            .map(|(n, record)| {
                let sequence_number = record.sequence_number.clone().expect("numbered when added");
                let mut built = KinesisEventRecord::default();
                built.aws_region = Some(REGION.into());
                built.event_id = Some(format!("{}:{sequence_number}", self.shard));
                built.event_name = Some("aws:kinesis:record".into());
                built.event_source = Some("aws:kinesis".into());
                built.event_source_arn = Some(arn.clone());
                built.event_version = Some("1.0".into());
                built.invoke_identity_arn = Some(format!("arn:aws:iam::{ACCOUNT}:role/test-function"));
                built.kinesis.approximate_arrival_timestamp =
                    timestamp(serde_json::json!(1_795_000_000.0 + f64::from(n) / 1000.0));
                *built.kinesis.data = record.data.clone();
                built.kinesis.partition_key = record.partition_key.clone();
                built.kinesis.sequence_number = sequence_number;
                built.kinesis.kinesis_schema_version = Some("1.0".into());
                built
            })
            .collect();
        event
    }
}

/// The sequence number of count `n`: [`SEQUENCE_PREFIX`] and `n` in 36 digits.
pub fn sequence_number(n: u64) -> String {
    format!("{SEQUENCE_PREFIX}{n:036}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_numbered_in_order_unless_they_carry_a_number() {
        let event = Batch::new()
            .shard("shardId-000000000002")
            .sequence_from(41)
            .records([Record::new("a", "1"), Record::new("b", "2").sequence_number("7"), Record::new("a", "3")])
            .build();
        let numbers: Vec<_> = event.records.iter().map(|r| r.kinesis.sequence_number.as_str()).collect();
        assert_eq!(numbers, [sequence_number(41).as_str(), "7", sequence_number(42).as_str()]);
        assert_eq!(numbers[0].len(), 56);
        assert!(numbers[0] < numbers[2]);
        let first = &event.records[0];
        assert_eq!(first.event_id.as_deref(), Some(format!("shardId-000000000002:{}", numbers[0]).as_str()));
        assert_eq!(
            first.event_source_arn.as_deref(),
            Some("arn:aws:kinesis:us-east-1:000000000000:stream/test-stream")
        );
    }

    /// The built event reads back from the JSON Lambda sends (the data in base64), and has the
    /// sample event's shape.
    #[test]
    fn the_event_round_trips_through_its_json_with_the_data_in_base64() {
        let event = Batch::new().record(Record::new("customer-alice", r#"{"order_id": "ord_0001"}"#)).build();
        let json = serde_json::to_value(&event).unwrap();
        let back: KinesisEvent = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, event);
        let record = &json["Records"][0];
        assert_eq!(record["kinesis"]["data"], "eyJvcmRlcl9pZCI6ICJvcmRfMDAwMSJ9");
        assert_eq!(record["kinesis"]["partitionKey"], "customer-alice");
        assert_eq!(record["eventName"], "aws:kinesis:record");
    }
}
