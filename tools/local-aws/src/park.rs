//! The park queues read back: every [`Parcel`] a stream function parked in an SQS queue
//! (`PARK_QUEUE_URL`; `InProcess::park_in` in process), parsed, and the record each one holds.
//! The chaos scenario counts its parked records from them and the tests assert on them: a
//! record is parked when its parcel is in the queue, not when a counter says so.
//!
//! A record may be parked more than once (a batch delivered again after its invocation failed,
//! two mappings on one stream, a lost answer to the send): [`distinct`] keeps one parcel per
//! coordinates.

use std::collections::BTreeMap;

use aws_lambda_events::encodings::Base64Data;
use effectively_once_lambda::park::{Parcel, SqsQueue};

use crate::error::{Result, ResultExt};
use crate::resources::Clients;

/// Every parcel in the queue at `url`, left in place (read as [`crate::esm::peek_bodies`]
/// reads). A message that is not a parcel is an error: nothing else goes to a park queue.
pub async fn parcels(clients: &Clients, url: &str) -> Result<Vec<Parcel>> {
    let bodies = crate::esm::peek_bodies(clients, url).await?;
    bodies
        .iter()
        .map(|body| serde_json::from_str(body).context(format!("a park message that is no parcel: {body}")))
        .collect()
}

/// One parcel per coordinates (`topic-partition@offset`, `shard:sequence`), keyed by them.
pub fn distinct(parcels: Vec<Parcel>) -> BTreeMap<String, Parcel> {
    parcels.into_iter().map(|p| (p.coordinates.to_string(), p)).collect()
}

/// The bytes the parked record carried: a Kafka record's value, a Kinesis record's data
/// (both base64 in the parcel, as Lambda delivered them); `None` for a record without one
/// (a Kafka record with no value, a DynamoDB Streams record, a parcel parked without its
/// record).
pub fn payload(parcel: &Parcel) -> Option<Vec<u8>> {
    let field = match parcel.trigger.as_str() {
        "aws:kafka" => &parcel.record["value"],
        "aws:kinesis" => &parcel.record["kinesis"]["data"],
        _ => return None,
    };
    let data: Base64Data = serde_json::from_value(field.clone()).ok()?;
    Some(data.0)
}

/// A park queue of its own for a test: created fresh, read back, deleted.
#[derive(Debug, Clone)]
pub struct ParkQueue {
    clients: Clients,
    /// The queue's URL.
    pub url: String,
}

impl ParkQueue {
    /// A new queue named after `prefix` and a unique suffix.
    pub async fn fresh(clients: &Clients, prefix: &str) -> Result<ParkQueue> {
        ParkQueue::taking(clients, prefix, None).await
    }

    /// A new queue as [`fresh`](Self::fresh), whose `MaximumMessageSize` is `max_bytes` (`None`:
    /// SQS's default).
    pub async fn taking(clients: &Clients, prefix: &str, max_bytes: Option<u32>) -> Result<ParkQueue> {
        let name = effectively_once_dynamodb::testing::unique_name(prefix);
        let create = clients.sqs.create_queue().queue_name(&name);
        let create = match max_bytes {
            Some(max) => create.attributes(aws_sdk_sqs::types::QueueAttributeName::MaximumMessageSize, max.to_string()),
            None => create,
        };
        let out = create.send().await.context(format!("create queue {name}"))?;
        let url = out.queue_url().ok_or("a created queue without its URL")?.to_owned();
        Ok(ParkQueue { clients: clients.clone(), url })
    }

    /// The queue as a driver's park destination.
    pub fn destination(&self) -> SqsQueue {
        SqsQueue::new(self.clients.sqs.clone(), &self.url)
    }

    /// Every parcel parked in it so far, in no particular order.
    pub async fn parcels(&self) -> Result<Vec<Parcel>> {
        parcels(&self.clients, &self.url).await
    }

    /// Every parcel parked in it, then the queue deleted.
    pub async fn drain(self) -> Result<Vec<Parcel>> {
        let parcels = self.parcels().await?;
        self.clients.sqs.delete_queue().queue_url(&self.url).send().await.context("delete the park queue")?;
        Ok(parcels)
    }
}
