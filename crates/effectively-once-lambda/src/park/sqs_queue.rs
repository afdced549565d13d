//! [`SqsQueue`]: an SQS queue as the park destination (feature `sqs`).

use std::sync::Arc;

use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;
use tokio::sync::OnceCell;

use super::{body, Destination, Parcel, ParkFuture, MAX_BODY, PARK_QUEUE_URL};

/// An SQS queue that takes parked records, ten a `SendMessageBatch` (one request for a batch's
/// poison, not one a record). Give the queue a retention of 14 days, a `MaximumMessageSize` of
/// 1 MiB and an alarm on its depth. The function needs `sqs:SendMessage` and
/// `sqs:GetQueueAttributes` on it: the queue's `MaximumMessageSize` is read once, at the first
/// park, so a parcel too large for that queue goes without its record rather than refused (a
/// refusal would hold the position at the record until the stream gives the batch up). A read
/// that fails is logged and parking goes on at [`with_max_body`](Self::with_max_body)'s limit.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    queue_url: String,
    max_body: usize,
    /// The queue's `MaximumMessageSize`, once read.
    queue_max: Arc<OnceCell<usize>>,
}

impl SqsQueue {
    /// Parks into the queue at `queue_url` through `client`.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        SqsQueue { client, queue_url: queue_url.into(), max_body: MAX_BODY, queue_max: Arc::default() }
    }

    /// Parks into the queue the environment names ([`PARK_QUEUE_URL`]); an error naming the
    /// variable when it is unset or empty.
    pub fn from_env(client: Client) -> Result<Self, lambda_runtime::Error> {
        match std::env::var(PARK_QUEUE_URL) {
            // A FIFO queue refuses a message without a group id: every park would fail.
            Ok(url) if url.trim().ends_with(".fifo") => {
                Err(format!("{PARK_QUEUE_URL} names a FIFO queue ({url}): park in a standard queue").into())
            }
            Ok(url) if !url.trim().is_empty() => Ok(SqsQueue::new(client, url.trim())),
            _ => Err(format!(
                "{PARK_QUEUE_URL} is not set: a stream function parks records that fail permanently in an SQS queue \
                 (set {PARK_QUEUE_URL}), or drops them only when told to (Options::drop_poison)"
            )
            .into()),
        }
    }

    /// A message body of at most `max_body` bytes with the record in it; a larger parcel goes
    /// without its record (default [`MAX_BODY`], SQS's limit; the queue's own
    /// `MaximumMessageSize` applies too, when lower).
    pub fn with_max_body(mut self, max_body: usize) -> Self {
        self.max_body = max_body;
        self
    }

    /// The largest body the queue takes: its `MaximumMessageSize`, read at the first call.
    async fn queue_max(&self) -> Result<usize, String> {
        let read = || async {
            let out = self
                .client
                .get_queue_attributes()
                .queue_url(&self.queue_url)
                .attribute_names(QueueAttributeName::MaximumMessageSize)
                .send()
                .await
                .map_err(|e| format!("park queue unreachable: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?;
            let size = out.attributes().and_then(|a| a.get(&QueueAttributeName::MaximumMessageSize));
            Ok::<usize, String>(size.and_then(|s| s.parse().ok()).unwrap_or(MAX_BODY))
        };
        self.queue_max.get_or_try_init(read).await.copied()
    }

    async fn send(&self, parcels: &[Parcel]) -> Vec<Result<(), String>> {
        let max = match self.queue_max().await {
            Ok(queue_max) => queue_max.min(self.max_body),
            // Not cached: read again at the next park. Parking goes on meanwhile (a role without
            // the permission, say); only a parcel over the queue's own limit is then refused.
            Err(error) => {
                tracing::warn!(%error, "reading the park queue's MaximumMessageSize failed; parking as if it were {} bytes", self.max_body);
                self.max_body
            }
        };
        let bodies: Vec<String> = parcels.iter().map(|parcel| body(parcel, max)).collect();
        let mut results: Vec<Result<(), String>> = vec![Ok(()); parcels.len()];
        // The batches at once: a batch's poison parks in one round trip's time.
        let sends = chunks(&bodies, MAX_BODY).into_iter().map(|chunk| self.send_chunk(&bodies, chunk));
        for (chunk, outcome) in futures_util::future::join_all(sends).await {
            for (at, result) in chunk.into_iter().zip(outcome) {
                results[at] = result;
            }
        }
        results
    }

    /// One `SendMessageBatch` of the bodies at `chunk`; each one's result, in order.
    async fn send_chunk(&self, bodies: &[String], chunk: Vec<usize>) -> (Vec<usize>, Vec<Result<(), String>>) {
        let entries: Vec<SendMessageBatchRequestEntry> = chunk
            .iter()
            .filter_map(|&at| {
                SendMessageBatchRequestEntry::builder().id(at.to_string()).message_body(&bodies[at]).build().ok()
            })
            .collect();
        let sent = self.client.send_message_batch().queue_url(&self.queue_url).set_entries(Some(entries)).send().await;
        let results = match sent {
            // Only an entry SQS names as successful is durable; anything else failed.
            Ok(output) => chunk
                .iter()
                .map(|at| {
                    let id = at.to_string();
                    if output.successful().iter().any(|s| s.id() == id) {
                        return Ok(());
                    }
                    let why = output.failed().iter().find(|f| f.id() == id);
                    let why = why.map_or("not in the answer".to_owned(), |f| {
                        format!("{}: {}", f.code(), f.message().unwrap_or_default())
                    });
                    Err(format!("park queue refused the record ({why})"))
                })
                .collect(),
            Err(error) => {
                let why = aws_sdk_sqs::error::DisplayErrorContext(&error).to_string();
                vec![Err(format!("park queue unreachable: {why}")); chunk.len()]
            }
        };
        (chunk, results)
    }
}

/// Positions of `bodies` in batches SQS takes: at most 10 entries, at most `max` bytes in all.
fn chunks(bodies: &[String], max: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut size = 0;
    for (at, body) in bodies.iter().enumerate() {
        match out.last_mut() {
            Some(last) if last.len() < 10 && size + body.len() <= max => {
                last.push(at);
                size += body.len();
            }
            _ => {
                out.push(vec![at]);
                size = body.len();
            }
        }
    }
    out
}

impl Destination for SqsQueue {
    fn park<'a>(&'a self, parcels: &'a [Parcel]) -> ParkFuture<'a> {
        Box::pin(self.send(parcels))
    }
}

#[cfg(test)]
mod tests {
    use super::chunks;

    #[test]
    fn batches_hold_ten_entries_and_the_size_limit() {
        let bodies: Vec<String> = (0..23).map(|_| "x".repeat(10)).collect();
        let sizes: Vec<usize> = chunks(&bodies, 1000).iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 10, 3]);
        let sizes: Vec<usize> = chunks(&bodies[..5], 25).iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 2, 1]);
    }
}
