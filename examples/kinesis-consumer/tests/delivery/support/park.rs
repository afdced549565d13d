//! A park queue of a test's own on the local SQS: the destination the driver parks poison in,
//! as `main` parks in `PARK_QUEUE_URL`, and the parcels read back from it.

use effectively_once_dynamodb::testing::{sdk_config, unique_name};
use effectively_once_lambda::park::{Parcel, SqsQueue};

/// A fresh SQS queue, read back and deleted by [`drain`](Self::drain).
pub struct ParkQueue {
    client: aws_sdk_sqs::Client,
    /// The queue's URL.
    pub url: String,
}

impl ParkQueue {
    /// A new queue named after `prefix`, with SQS's default `MaximumMessageSize`.
    pub async fn fresh(prefix: &str) -> ParkQueue {
        ParkQueue::taking(prefix, None).await
    }

    /// A new queue whose `MaximumMessageSize` is `max_bytes` (`None`: SQS's default).
    pub async fn taking(prefix: &str, max_bytes: Option<u32>) -> ParkQueue {
        let client = aws_sdk_sqs::Client::new(&sdk_config().await);
        let create = client.create_queue().queue_name(unique_name(prefix));
        let create = match max_bytes {
            Some(max) => create.attributes(aws_sdk_sqs::types::QueueAttributeName::MaximumMessageSize, max.to_string()),
            None => create,
        };
        let out = create.send().await.expect("a park queue on the local SQS");
        let url = out.queue_url().expect("a created queue has a URL").to_owned();
        ParkQueue { client, url }
    }

    /// The queue as the driver's park destination.
    pub fn destination(&self) -> SqsQueue {
        SqsQueue::new(self.client.clone(), &self.url)
    }

    /// Every parcel parked in it, in no particular order; then the queue is deleted. Each
    /// message received stays invisible for SQS's default 30 seconds, so none is read twice.
    pub async fn drain(self) -> Vec<Parcel> {
        let mut parcels = Vec::new();
        loop {
            let received = self.client.receive_message().queue_url(&self.url).max_number_of_messages(10);
            let out = received.send().await.expect("receive from the park queue");
            if out.messages().is_empty() {
                break;
            }
            for message in out.messages() {
                let body = message.body().unwrap_or_default();
                parcels.push(serde_json::from_str(body).unwrap_or_else(|e| panic!("a parcel, not {body}: {e}")));
            }
        }
        self.client.delete_queue().queue_url(&self.url).send().await.expect("delete the park queue");
        parcels
    }
}
