//! SQS events built in code: the batch Lambda's event source mapping would hand a function.

use std::collections::BTreeMap;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};

use super::{ACCOUNT, REGION};

/// One message of a [`Batch`]: a body, and what SQS adds to it. A plain body (`&str`,
/// `String`) converts into a message with the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    body: String,
    id: Option<String>,
    receive_count: u32,
    group: Option<String>,
    deduplication_id: Option<String>,
    attributes: BTreeMap<String, String>,
    message_attributes: BTreeMap<String, String>,
}

impl Message {
    /// A message holding `body`, received for the first time.
    pub fn new(body: impl Into<String>) -> Self {
        Message {
            body: body.into(),
            id: None,
            receive_count: 1,
            group: None,
            deduplication_id: None,
            attributes: BTreeMap::new(),
            message_attributes: BTreeMap::new(),
        }
    }

    /// The SQS message id (default `m-{n}`, `n` counting the batch's messages from 1): what a
    /// partial batch failure reports.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// `ApproximateReceiveCount` (default 1): a redelivery is 2 or more.
    pub fn receive_count(mut self, count: u32) -> Self {
        self.receive_count = count;
        self
    }

    /// The FIFO `MessageGroupId`: the message is a FIFO queue's (the drivers keep each group's
    /// order), with a `SequenceNumber` and a `MessageDeduplicationId` (default: the message id).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// The FIFO `MessageDeduplicationId`.
    pub fn deduplication_id(mut self, id: impl Into<String>) -> Self {
        self.deduplication_id = Some(id.into());
        self
    }

    /// The `AWSTraceHeader` attribute (`Root=1-...;Parent=...;Sampled=1`), which the drivers
    /// read the X-Ray trace id from.
    pub fn trace_header(self, header: impl Into<String>) -> Self {
        self.attribute("AWSTraceHeader", header)
    }

    /// Any other system attribute, as SQS names it (`SentTimestamp`, say); set last, so it
    /// overrides what the other methods set.
    pub fn attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(name.into(), value.into());
        self
    }

    /// A `String` message attribute (the producer's own, `messageAttributes`).
    pub fn message_attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.message_attributes.insert(name.into(), value.into());
        self
    }
}

impl From<&str> for Message {
    fn from(body: &str) -> Self {
        Message::new(body)
    }
}

impl From<String> for Message {
    fn from(body: String) -> Self {
        Message::new(body)
    }
}

impl From<&String> for Message {
    fn from(body: &String) -> Self {
        Message::new(body.as_str())
    }
}

/// A batch of SQS messages, built into the [`SqsEvent`] a function receives.
///
/// ```
/// use effectively_once_lambda::testing::sqs::{Batch, Message};
///
/// let event = Batch::new()
///     .queue("orders.fifo")
///     .message(Message::new("first").group("customer_1"))
///     .message(Message::new("second").group("customer_1").id("m-last").trace_header("Root=1-5759e988-bd862e3fe1be46a994272793"))
///     .build();
/// let second = &event.records[1];
/// assert_eq!(second.message_id.as_deref(), Some("m-last"));
/// assert_eq!(second.attributes["MessageGroupId"], "customer_1");
/// assert_eq!(second.event_source_arn.as_deref(), Some("arn:aws:sqs:us-east-1:000000000000:orders.fifo"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    queue: String,
    messages: Vec<Message>,
}

impl Default for Batch {
    fn default() -> Self {
        Batch { queue: "test-queue".to_owned(), messages: Vec::new() }
    }
}

impl Batch {
    /// An empty batch from the queue `test-queue`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The queue's name, which the event source ARN carries (a FIFO queue's ends in `.fifo`).
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        self.queue = name.into();
        self
    }

    /// Adds a message: a [`Message`], or a body with the defaults.
    pub fn message(mut self, message: impl Into<Message>) -> Self {
        self.messages.push(message.into());
        self
    }

    /// Adds a message per item, in order.
    pub fn messages<M: Into<Message>>(mut self, messages: impl IntoIterator<Item = M>) -> Self {
        self.messages.extend(messages.into_iter().map(Into::into));
        self
    }

    /// The event, with messages in the order added. System attributes are fixed values (the
    /// same event every run); `md5OfBody` is left out (the drivers do not read it).
    pub fn build(&self) -> SqsEvent {
        let arn = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{}", self.queue);
        let mut event = SqsEvent::default();
        event.records = (1u64..)
            .zip(&self.messages)
            .map(|(n, message)| {
                let id = message.id.clone().unwrap_or_else(|| format!("m-{n}"));
                let mut attributes: std::collections::HashMap<String, String> = [
                    ("ApproximateReceiveCount", message.receive_count.to_string()),
                    ("SentTimestamp", "1795000000000".to_owned()),
                    ("ApproximateFirstReceiveTimestamp", "1795000000001".to_owned()),
                    ("SenderId", "AIDAEXAMPLE".to_owned()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
                if let Some(group) = &message.group {
                    attributes.insert("MessageGroupId".into(), group.clone());
                    let dedup = message.deduplication_id.clone().unwrap_or_else(|| id.clone());
                    attributes.insert("MessageDeduplicationId".into(), dedup);
                    // Increasing in batch order, as a FIFO queue numbers its messages.
                    attributes.insert(
                        "SequenceNumber".into(),
                        format!("{:020}", 18_849_496_460_467_696_128u128 + u128::from(n)),
                    );
                }
                attributes.extend(message.attributes.clone());
                let mut m = SqsMessage::default();
                m.receipt_handle = Some(format!("AQEB-{id}"));
                m.message_id = Some(id);
                m.body = Some(message.body.clone());
                m.attributes = attributes;
                m.message_attributes = message
                    .message_attributes
                    .iter()
                    .map(|(name, value)| {
                        let mut attribute = SqsMessageAttribute::default();
                        attribute.string_value = Some(value.clone());
                        attribute.data_type = Some("String".into());
                        (name.clone(), attribute)
                    })
                    .collect();
                m.event_source = Some("aws:sqs".into());
                m.event_source_arn = Some(arn.clone());
                m.aws_region = Some(REGION.into());
                m
            })
            .collect();
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let event = Batch::new()
            .messages(["a", "b"])
            .message(
                Message::new("c")
                    .id("x")
                    .receive_count(4)
                    .attribute("SentTimestamp", "1")
                    .message_attribute("tenant", "t1"),
            )
            .build();
        let ids: Vec<_> = event.records.iter().map(|m| m.message_id.as_deref().unwrap()).collect();
        assert_eq!(ids, ["m-1", "m-2", "x"]);
        assert_eq!(event.records[0].body.as_deref(), Some("a"));
        assert_eq!(event.records[0].attributes["ApproximateReceiveCount"], "1");
        assert!(!event.records[0].attributes.contains_key("MessageGroupId"), "a standard queue's");
        let last = &event.records[2];
        assert_eq!(last.attributes["ApproximateReceiveCount"], "4");
        assert_eq!(last.attributes["SentTimestamp"], "1");
        assert_eq!(last.message_attributes["tenant"].string_value.as_deref(), Some("t1"));
        assert_eq!(last.receipt_handle.as_deref(), Some("AQEB-x"));
        assert_eq!(last.event_source_arn.as_deref(), Some("arn:aws:sqs:us-east-1:000000000000:test-queue"));
    }

    #[test]
    fn fifo_messages_carry_group_deduplication_id_and_increasing_sequence_numbers() {
        let event = Batch::new()
            .queue("q.fifo")
            .message(Message::new("1").group("g"))
            .message(Message::new("2").group("g").deduplication_id("d-2"))
            .build();
        let (a, b) = (&event.records[0].attributes, &event.records[1].attributes);
        assert_eq!((a["MessageGroupId"].as_str(), a["MessageDeduplicationId"].as_str()), ("g", "m-1"));
        assert_eq!(b["MessageDeduplicationId"], "d-2");
        assert!(a["SequenceNumber"] < b["SequenceNumber"]);
        assert_eq!(a["SequenceNumber"].len(), 20);
    }

    /// The built event reads back from the JSON Lambda sends, as the runtime would parse it.
    #[test]
    fn the_event_round_trips_through_its_json() {
        let event = Batch::new().message(Message::new("{}").trace_header("Root=1-a-b")).build();
        let json = serde_json::to_string(&event).unwrap();
        let back: SqsEvent = serde_json::from_str(&json).unwrap();
        assert_eq!(back, event);
        assert!(json.contains(r#""AWSTraceHeader":"Root=1-a-b""#), "{json}");
    }
}
