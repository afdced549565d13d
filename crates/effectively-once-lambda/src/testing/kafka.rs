//! Kafka events built in code (Amazon MSK or self-managed Apache Kafka): records by
//! topic-partition, as the event source mapping hands them to a function.

use std::collections::{BTreeMap, HashMap};

use aws_lambda_events::event::kafka::{KafkaEvent, KafkaRecord};
use base64::Engine;

use super::{timestamp, ACCOUNT, REGION};

/// One record of a [`Batch`]: a value (bytes, or text such as JSON), and what the producer and
/// the broker add to it. A plain value (`&str`, `String`) converts into a record with the
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    topic: Option<String>,
    partition: i64,
    offset: Option<i64>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// A record holding `value` on partition 0, with no key and no headers.
    pub fn new(value: impl Into<Vec<u8>>) -> Self {
        Record { value: Some(value.into()), ..Record::tombstone() }
    }

    /// A record with no value (a compacted topic's delete marker).
    pub fn tombstone() -> Self {
        Record { topic: None, partition: 0, offset: None, key: None, value: None, headers: Vec::new() }
    }

    /// The topic (default: the batch's).
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// The partition (default 0). A producer's partitioner chooses it from the key; here the test
    /// does.
    pub fn partition(mut self, partition: i64) -> Self {
        self.partition = partition;
        self
    }

    /// The offset (default: one past the previous record of its topic-partition in the batch,
    /// from the batch's [`first_offset`](Batch::first_offset)). A record delivered again keeps
    /// its offset; a producer's retry of a lost send is the same value at a new one.
    pub fn offset(mut self, offset: i64) -> Self {
        self.offset = Some(offset);
        self
    }

    /// The record's key (the producer's, usually what it partitions by).
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// A header; a name may repeat, as Kafka allows.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

impl From<&str> for Record {
    fn from(value: &str) -> Self {
        Record::new(value)
    }
}

impl From<String> for Record {
    fn from(value: String) -> Self {
        Record::new(value)
    }
}

/// A batch of Kafka records, built into the [`KafkaEvent`] a function receives.
///
/// Records are grouped under `{topic}-{partition}` as Lambda's `records` map names them, in the
/// order added within each. Keys and values are carried in base64 and headers as lists of signed
/// bytes, as Lambda encodes them, so `effectively_once_lambda::kafka`'s `key_bytes`,
/// `value_bytes` and `header` read them back.
///
/// ```
/// use effectively_once_lambda::kafka::{header, key_bytes, value_bytes};
/// use effectively_once_lambda::testing::kafka::{Batch, Record};
///
/// let event = Batch::new("orders")
///     .record(Record::new(r#"{"order_id": "ord_1"}"#).key("customer-1").header("order-id", "ord_1"))
///     .record(Record::new(r#"{"order_id": "ord_2"}"#).partition(1).offset(41))
///     .record(r#"{"order_id": "ord_3"}"#)
///     .build();
/// let first = &event.records["orders-0"][0];
/// assert_eq!(first.key.as_deref(), Some("Y3VzdG9tZXItMQ=="));
/// assert_eq!(key_bytes(first).as_deref(), Some(&b"customer-1"[..]));
/// assert_eq!(value_bytes(first).as_deref(), Some(&br#"{"order_id": "ord_1"}"#[..]));
/// assert_eq!(header(first, "order-id").as_deref(), Some(&b"ord_1"[..]));
/// assert_eq!(event.records["orders-0"][1].offset, 1);
/// assert_eq!(event.records["orders-1"][0].offset, 41);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    topic: String,
    first_offset: i64,
    self_managed: Option<String>,
    records: Vec<Record>,
}

impl Batch {
    /// An empty batch of `topic` on the MSK cluster `test-cluster`.
    pub fn new(topic: impl Into<String>) -> Self {
        Batch { topic: topic.into(), first_offset: 0, self_managed: None, records: Vec::new() }
    }

    /// The offset the first record of each topic-partition gets when it sets none (default 0): a
    /// later batch starts past the earlier one's.
    pub fn first_offset(mut self, offset: i64) -> Self {
        self.first_offset = offset;
        self
    }

    /// A self-managed Apache Kafka cluster's event (`eventSource` `SelfManagedKafka`, no ARN) on
    /// these bootstrap servers, not an MSK one's.
    pub fn self_managed(mut self, bootstrap_servers: impl Into<String>) -> Self {
        self.self_managed = Some(bootstrap_servers.into());
        self
    }

    /// Adds a record: a [`Record`], or a value with the defaults.
    pub fn record(mut self, record: impl Into<Record>) -> Self {
        self.records.push(record.into());
        self
    }

    /// Adds a record per item, in order.
    pub fn records<R: Into<Record>>(mut self, records: impl IntoIterator<Item = R>) -> Self {
        self.records.extend(records.into_iter().map(Into::into));
        self
    }

    /// The event. Timestamps are fixed (a millisecond per offset), so it is the same every run.
    pub fn build(&self) -> KafkaEvent {
        let mut next_offset: BTreeMap<(String, i64), i64> = BTreeMap::new();
        let mut records: HashMap<String, Vec<KafkaRecord>> = HashMap::new();
        for record in &self.records {
            let topic = record.topic.clone().unwrap_or_else(|| self.topic.clone());
            let next = next_offset.entry((topic.clone(), record.partition)).or_insert(self.first_offset);
            let offset = record.offset.unwrap_or(*next);
            *next = offset + 1;
            let built = built(record, topic, offset);
            records
                .entry(format!("{}-{}", built.topic.as_deref().unwrap_or_default(), built.partition))
                .or_default()
                .push(built);
        }
        let mut event = KafkaEvent::default();
        match &self.self_managed {
            Some(servers) => {
                event.event_source = Some("SelfManagedKafka".into());
                event.bootstrap_servers = Some(servers.clone());
            }
            None => {
                event.event_source = Some("aws:kafka".into());
                event.event_source_arn = Some(format!(
                    "arn:aws:kafka:{REGION}:{ACCOUNT}:cluster/test-cluster/abcd1234-0123-4567-89ab-cdef01234567-1"
                ));
                event.bootstrap_servers = Some(format!("b-1.test-cluster.abcd12.c1.kafka.{REGION}.amazonaws.com:9098"));
            }
        }
        event.records = records;
        event
    }
}

/// A record as Lambda encodes it: key and value in base64, each header a one-entry map of its
/// name to signed bytes.
fn built(record: &Record, topic: String, offset: i64) -> KafkaRecord {
    let base64 = |bytes: &Vec<u8>| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut built = KafkaRecord::default();
    built.topic = Some(topic);
    built.partition = record.partition;
    built.offset = offset;
    built.timestamp = timestamp(serde_json::json!(1_795_000_000_000_i64 + offset));
    built.timestamp_type = Some("CREATE_TIME".into());
    built.key = record.key.as_ref().map(base64);
    built.value = record.value.as_ref().map(base64);
    built.headers = record
        .headers
        .iter()
        .map(|(name, value)| HashMap::from([(name.clone(), value.iter().map(|&byte| byte as i8).collect())]))
        .collect();
    built
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::{header, key_bytes, topic_partition, value_bytes};

    #[test]
    fn offsets_count_on_within_each_topic_partition() {
        let event = Batch::new("orders")
            .first_offset(10)
            .records(["a", "b"])
            .record(Record::new("c").partition(2))
            .record(Record::new("d").offset(40))
            .record("e")
            .record(Record::new("f").topic("refunds"))
            .build();
        let offsets = |name: &str| event.records[name].iter().map(|r| r.offset).collect::<Vec<_>>();
        assert_eq!(offsets("orders-0"), [10, 11, 40, 41]);
        assert_eq!(offsets("orders-2"), [10]);
        assert_eq!(offsets("refunds-0"), [10]);
        assert!(event.records.iter().all(|(name, records)| records.iter().all(|r| topic_partition(r) == *name)));
    }

    /// Keys, values and headers read back through the driver's own decoders: what a handler sees
    /// is what the test put in, bytes that are not UTF-8 included.
    #[test]
    fn keys_values_and_headers_decode_as_the_driver_reads_them() {
        let event = Batch::new("t")
            .record(Record::new(vec![0xff, 0x00]).key("k").header("h", vec![0xc3, 0x28]).header("h", "second"))
            .record(Record::tombstone().key("k"))
            .build();
        let [first, tombstone] = &event.records["t-0"][..] else { panic!("two records") };
        assert_eq!(value_bytes(first), Some(vec![0xff, 0x00]));
        assert_eq!(key_bytes(first), Some(b"k".to_vec()));
        assert_eq!(header(first, "h"), Some(vec![0xc3, 0x28]), "the first header of a repeated name");
        assert_eq!(first.headers.len(), 2);
        assert_eq!((tombstone.value.as_deref(), value_bytes(tombstone)), (None, None));
    }

    /// The built event reads back from the JSON Lambda sends and has the sample event's shape; a
    /// self-managed cluster's names no ARN.
    #[test]
    fn the_event_round_trips_through_its_json() {
        let event = Batch::new("orders").record(Record::new("{}").key("customer-alice").header("n", [1u8])).build();
        let json = serde_json::to_value(&event).unwrap();
        let back: KafkaEvent = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, event);
        assert_eq!(json["eventSource"], "aws:kafka");
        let record = &json["records"]["orders-0"][0];
        assert_eq!(record["key"], "Y3VzdG9tZXItYWxpY2U=");
        assert_eq!(record["headers"], serde_json::json!([{"n": [1]}]));

        let own = Batch::new("orders").self_managed("broker:9092").record("{}").build();
        assert_eq!((own.event_source.as_deref(), own.event_source_arn), (Some("SelfManagedKafka"), None));
        assert_eq!(own.bootstrap_servers.as_deref(), Some("broker:9092"));
    }
}
