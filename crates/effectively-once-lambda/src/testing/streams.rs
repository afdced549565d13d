//! DynamoDB Streams events built in code: item changes with images from serde values.

use aws_lambda_events::event::dynamodb::{Event, EventRecord, StreamRecord, StreamViewType};
use serde::Serialize;
use serde_dynamo::Item;

use super::{ACCOUNT, REGION};

/// The first sequence number a [`Batch`] gives (the sample events' numbering).
pub const FIRST_SEQUENCE: u128 = 111_000_000_000_000_000_000_001;

/// A batch of item changes on one table, built into the [`Event`] a Streams function receives.
///
/// Images are serde values (`serde_json::json!`, or the item's own struct) converted as
/// `serde_dynamo` does; the `Keys` of each record are the key attributes read from its image.
/// Each record gets the next sequence number (from [`FIRST_SEQUENCE`], or
/// [`sequence_from`](Self::sequence_from)), 24 digits as DynamoDB writes them, and the event id
/// `ev-{sequence}`. What the records carry follows the stream's view type, as DynamoDB's do:
/// [`StreamViewType::NewAndOldImages`] by default.
///
/// ```
/// use effectively_once_lambda::testing::streams::Batch;
/// use serde_json::json;
///
/// let event = Batch::new("outbox", &["pk"])
///     .insert(json!({"pk": "receipt#pay_1", "status": "PENDING"}))
///     .modify(json!({"pk": "receipt#pay_1", "status": "PENDING"}), json!({"pk": "receipt#pay_1", "status": "SENT"}))
///     .remove(json!({"pk": "receipt#pay_1", "status": "SENT"}))
///     .build();
/// let names: Vec<_> = event.records.iter().map(|r| r.event_name.as_str()).collect();
/// assert_eq!(names, ["INSERT", "MODIFY", "REMOVE"]);
/// assert_eq!(event.records[2].change.keys.len(), 1);
/// assert_eq!(event.records[0].change.sequence_number.as_deref(), Some("111000000000000000000001"));
/// ```
#[derive(Debug, Clone)]
pub struct Batch {
    table: String,
    key: Vec<String>,
    view: StreamViewType,
    next_sequence: u128,
    changes: Vec<Change>,
}

#[derive(Debug, Clone)]
struct Change {
    name: &'static str,
    old: Option<Item>,
    new: Option<Item>,
    sequence: u128,
}

impl Batch {
    /// An empty batch of `table`'s stream, whose key attributes are `key` (the partition key,
    /// then the sort key if any).
    pub fn new(table: impl Into<String>, key: &[&str]) -> Self {
        assert!(!key.is_empty() && key.len() <= 2, "a key is a partition key and at most a sort key: {key:?}");
        Batch {
            table: table.into(),
            key: key.iter().map(|k| (*k).to_owned()).collect(),
            view: StreamViewType::NewAndOldImages,
            next_sequence: FIRST_SEQUENCE,
            changes: Vec::new(),
        }
    }

    /// The stream's view type: which images the records carry.
    pub fn view(mut self, view: StreamViewType) -> Self {
        self.view = view;
        self
    }

    /// The sequence number of the next record added (those after it count on from it).
    pub fn sequence_from(mut self, sequence: u128) -> Self {
        self.next_sequence = sequence;
        self
    }

    /// An item written where none was: `INSERT`, with its new image.
    pub fn insert(self, new: impl Serialize) -> Self {
        self.push("INSERT", None, Some(image(new)))
    }

    /// An item changed: `MODIFY`, with the images before and after.
    pub fn modify(self, old: impl Serialize, new: impl Serialize) -> Self {
        self.push("MODIFY", Some(image(old)), Some(image(new)))
    }

    /// An item deleted (by a call or by TTL): `REMOVE`, with the image before.
    pub fn remove(self, old: impl Serialize) -> Self {
        self.push("REMOVE", Some(image(old)), None)
    }

    /// A change whose images are already DynamoDB items (a table's item read through the SDK and
    /// converted with `serde_dynamo::Item::from`, say), taken as they are: `event_name` is
    /// `INSERT` (a new image), `MODIFY` (both) or `REMOVE` (an old image).
    pub fn change(self, event_name: &str, old: Option<Item>, new: Option<Item>) -> Self {
        let name = match (event_name, &old, &new) {
            ("INSERT", None, Some(_)) => "INSERT",
            ("MODIFY", Some(_), Some(_)) => "MODIFY",
            ("REMOVE", Some(_), None) => "REMOVE",
            _ => panic!("{event_name} with an old image {} and a new one {}", old.is_some(), new.is_some()),
        };
        self.push(name, old, new)
    }

    fn push(mut self, name: &'static str, old: Option<Item>, new: Option<Item>) -> Self {
        self.changes.push(Change { name, old, new, sequence: self.next_sequence });
        self.next_sequence += 1;
        self
    }

    /// The event, records in the order added.
    pub fn build(&self) -> Event {
        let arn = format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{}/stream/2026-11-18T00:00:00.000", self.table);
        let (with_new, with_old) = match self.view {
            StreamViewType::NewImage => (true, false),
            StreamViewType::OldImage => (false, true),
            StreamViewType::NewAndOldImages => (true, true),
            // KeysOnly, and any view a later aws_lambda_events adds: keys alone.
            _ => (false, false),
        };
        let mut event = Event::default();
        event.records = self
            .changes
            .iter()
            .map(|change| {
                let imaged = change.new.as_ref().or(change.old.as_ref()).expect("a change has an image");
                let keys = self
                    .key
                    .iter()
                    .map(|k| {
                        let value = imaged.get(k).unwrap_or_else(|| panic!("the image has no key attribute {k:?}"));
                        (k.clone(), value.clone())
                    })
                    .collect::<std::collections::HashMap<_, _>>();
                let mut stream = StreamRecord::default();
                stream.keys = Item::from(keys);
                if with_new {
                    stream.new_image = change.new.clone().unwrap_or_default();
                }
                if with_old {
                    stream.old_image = change.old.clone().unwrap_or_default();
                }
                let sequence = format!("{:024}", change.sequence);
                stream.sequence_number = Some(sequence.clone());
                stream.size_bytes = serde_json::to_string(&stream.new_image).map_or(0, |s| s.len() as i64);
                stream.stream_view_type = Some(self.view.clone());
                let mut record = EventRecord::default();
                record.event_id = format!("ev-{sequence}");
                record.event_name = change.name.to_owned();
                record.event_source = Some("aws:dynamodb".into());
                record.event_version = Some("1.1".into());
                record.event_source_arn = Some(arn.clone());
                record.aws_region = REGION.into();
                record.change = stream;
                record
            })
            .collect();
        event
    }
}

/// A serde value as a DynamoDB item; panics (a test's mistake) when it is not a map.
fn image(value: impl Serialize) -> Item {
    serde_dynamo::to_item(value).unwrap_or_else(|e| panic!("an image must serialise to a map of attributes: {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn views_decide_the_images_and_keys_come_from_the_image() {
        let batch = Batch::new("t", &["pk", "sk"])
            .sequence_from(7)
            .modify(json!({"pk": "a", "sk": 1, "v": "old"}), json!({"pk": "a", "sk": 1, "v": "new"}))
            .remove(json!({"pk": "a", "sk": 2}));
        let both = batch.build();
        let change = &both.records[0].change;
        assert_eq!(change.keys.len(), 2);
        assert_eq!(change.old_image.get("v"), Some(&serde_dynamo::AttributeValue::S("old".into())));
        assert_eq!(change.new_image.get("v"), Some(&serde_dynamo::AttributeValue::S("new".into())));
        assert_eq!(change.keys.get("sk"), Some(&serde_dynamo::AttributeValue::N("1".into())));
        assert_eq!(change.sequence_number.as_deref(), Some("000000000000000000000007"));
        assert_eq!(both.records[1].change.sequence_number.as_deref(), Some("000000000000000000000008"));
        assert!(both.records[1].change.new_image.is_empty(), "a REMOVE has no new image");

        let new_only = batch.clone().view(StreamViewType::NewImage).build();
        assert!(new_only.records[0].change.old_image.is_empty());
        assert!(!new_only.records[0].change.new_image.is_empty());
        let keys_only = batch.view(StreamViewType::KeysOnly).build();
        assert!(keys_only.records[0].change.new_image.is_empty() && keys_only.records[0].change.old_image.is_empty());
        assert_eq!(keys_only.records[1].change.keys.len(), 2);
    }

    /// The built event reads back from the JSON Lambda sends, as the runtime would parse it,
    /// and matches the sample event's shape.
    #[test]
    fn the_event_round_trips_and_reads_like_the_sample() {
        let event = Batch::new("outbox", &["pk"])
            .view(StreamViewType::NewImage)
            .insert(json!({"pk": "receipt#pay_0001", "amount_cents": 1250}))
            .build();
        let json = serde_json::to_value(&event).unwrap();
        let back: Event = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, event);
        let record = &json["Records"][0];
        assert_eq!(record["eventName"], "INSERT");
        assert_eq!(record["dynamodb"]["NewImage"]["amount_cents"], json!({"N": "1250"}));
        assert_eq!(record["dynamodb"]["Keys"], json!({"pk": {"S": "receipt#pay_0001"}}));
        assert_eq!(record["dynamodb"]["StreamViewType"], "NEW_IMAGE");
    }

    #[test]
    fn items_in_dynamodb_form_are_taken_as_they_are() {
        let item: Item = serde_json::from_value(json!({"pk": {"S": "a"}, "blob": {"B": "AAEC"}})).unwrap();
        let event = Batch::new("t", &["pk"]).change("INSERT", None, Some(item.clone())).build();
        assert_eq!(event.records[0].change.new_image, item);
        assert_eq!(event.records[0].event_name, "INSERT");
    }

    #[test]
    #[should_panic(expected = "REMOVE with an old image false")]
    fn a_change_without_its_image_is_a_test_mistake() {
        Batch::new("t", &["pk"]).change("REMOVE", None, None);
    }

    #[test]
    #[should_panic(expected = "no key attribute")]
    fn an_image_without_its_key_is_a_test_mistake() {
        Batch::new("t", &["pk"]).insert(json!({"other": 1})).build();
    }
}
