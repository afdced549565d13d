//! The on-failure destination of a stream mapping, replayed after a fix: each invocation record
//! names a shard and a range of sequence numbers, whose records are read again from the stream
//! (`AT_SEQUENCE_NUMBER` the start, up to the end), handed to the function in batches, and the
//! record is deleted only once all of them succeeded. The records themselves are not in the
//! destination; they can be replayed while the stream still holds them (24 h by default). A
//! record that cannot be replayed is kept, with why, and the replay goes on to the next
//! (`sweep`, which the Kafka and park destination replays share).

use std::collections::HashMap;

use serde_json::Value;

use super::checkpoint::{Position, Resume, Settings, Source};
use super::queue::receive;
use crate::error::{Result, ResultExt};
use crate::resources::Clients;

/// What a replay of an on-failure destination (or a park destination) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Destination messages whose records all succeeded, deleted from the destination.
    pub batches: usize,
    /// Records handed to the function and answered as successes.
    pub records: usize,
    /// Destination messages left in the destination: a record still failed, or the source no
    /// longer gives them back. As many as [`Replayed::kept_messages`].
    pub kept: usize,
    /// Each message kept, and why.
    pub kept_messages: Vec<Kept>,
}

/// A destination message a replay left in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Its SQS message id.
    pub message_id: String,
    /// Which batch or record it names, and why it stays (email addresses redacted).
    pub why: String,
}

impl Replayed {
    fn keep(&mut self, message_id: String, why: &str) {
        let why = effectively_once_lambda::redact_emails(why);
        tracing::warn!(message_id, why, "kept in the destination");
        self.kept += 1;
        self.kept_messages.push(Kept { message_id, why });
    }

    /// `Ok` when nothing was kept; else an error naming each message kept and why, for a
    /// command to exit with.
    pub fn all_through(&self) -> Result<()> {
        if self.kept_messages.is_empty() {
            return Ok(());
        }
        let lines: Vec<String> = self.kept_messages.iter().map(|k| format!("  {}: {}", k.message_id, k.why)).collect();
        Err(format!("{} kept in the destination:\n{}", self.kept, lines.join("\n")).into())
    }
}

/// What replaying one destination message came to: `Ok(records replayed)`, and it is deleted;
/// `Err(which and why)`, and it is kept.
pub(super) type Verdict = std::result::Result<usize, String>;

/// Replays every invocation record in `settings.failures_url` through `source`.
pub(crate) async fn replay<S: Source>(clients: &Clients, settings: &Settings, source: &S) -> Result<Replayed> {
    let Some(url) = &settings.failures_url else { return Ok(Replayed::default()) };
    sweep(clients, url, async |record: &Value| replay_batch(clients, settings, source, &record[S::BATCH_INFO]).await)
        .await
}

/// [`sweep`] with an answer that says only whether the message is deleted (`Some(records
/// replayed)`) or kept (`None`, or `Err`), the replay having logged why.
pub(super) async fn walk(
    clients: &Clients,
    url: &str,
    mut replay: impl AsyncFnMut(&Value) -> Result<Option<usize>>,
) -> Result<Replayed> {
    sweep(clients, url, async |record: &Value| match replay(record).await {
        Ok(Some(n)) => Ok(n),
        Ok(None) => Err("a record still failed, or the source no longer holds them (see the log)".to_owned()),
        Err(error) => Err(crate::error::report(&*error)),
    })
    .await
}

/// Receives in a row that bring nothing new while the queue still shows visible messages, after
/// which a sweep ends anyway (those it already holds reappear once their 30 s run out).
const IDLE_RECEIVES: usize = 5;

/// Messages of `url` visible now (SQS's approximate count).
async fn visible(clients: &Clients, url: &str) -> Result<u64> {
    let out = clients
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .context("queue attributes")?;
    let count =
        out.attributes().and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages));
    Ok(count.and_then(|n| n.parse().ok()).unwrap_or(0))
}

/// Hands every message in the destination `url` to `replay` once: deleted when it answers
/// `Ok`, kept (with why) when `Err` or when the message is not JSON. A message that cannot be
/// replayed never stops the sweep. Kept messages stay invisible until the sweep is over, so it
/// reaches the messages behind them however many there are; then they are made visible again
/// at once, for the next replay or an operator's look.
pub(super) async fn sweep(
    clients: &Clients,
    url: &str,
    mut replay: impl AsyncFnMut(&Value) -> Verdict,
) -> Result<Replayed> {
    let mut replayed = Replayed::default();
    // Message id to its latest receipt handle: a kept message received again is not tried again.
    let mut kept: HashMap<String, String> = HashMap::new();
    let mut idle = 0;
    let swept: Result<()> = async {
        loop {
            let messages = receive(clients, url).await?;
            let mut fresh = 0;
            for message in &messages {
                let id = message.message_id().unwrap_or_default().to_owned();
                let handle = message.receipt_handle().unwrap_or_default().to_owned();
                if let Some(latest) = kept.get_mut(&id) {
                    *latest = handle;
                    continue;
                }
                fresh += 1;
                let verdict = match serde_json::from_str::<Value>(message.body().unwrap_or_default()) {
                    Ok(record) => replay(&record).await,
                    Err(error) => Err(format!("not JSON: {error}")),
                };
                match verdict {
                    Ok(n) => {
                        let delete = clients.sqs.delete_message().queue_url(url).receipt_handle(&handle);
                        delete.send().await.context("delete")?;
                        replayed.batches += 1;
                        replayed.records += n;
                    }
                    Err(why) => {
                        replayed.keep(id.clone(), &why);
                        kept.insert(id, handle);
                    }
                }
            }
            // Short polling samples some of SQS's servers: an answer with nothing new while the
            // queue still shows visible messages is asked again, a few times, before the sweep
            // calls the queue done.
            if fresh == 0 {
                idle += 1;
                if idle > IDLE_RECEIVES || visible(clients, url).await? == 0 {
                    return Ok(());
                }
            } else {
                idle = 0;
            }
        }
    }
    .await;
    for handle in kept.values() {
        let visible = clients.sqs.change_message_visibility().queue_url(url).receipt_handle(handle);
        visible.visibility_timeout(0).send().await.context("change visibility")?;
    }
    swept.map(|()| replayed)
}

/// The records of one batch info, in batches: `Ok(records)` once all of them succeeded,
/// `Err(which batch, and why)` when one failed, the stream did not give them back, or the
/// message names no batch.
async fn replay_batch<S: Source>(clients: &Clients, settings: &Settings, source: &S, info: &Value) -> Verdict {
    let field = |name: &str| info[name].as_str().map(str::to_owned).ok_or(format!("{} without {name}", S::BATCH_INFO));
    let (shard, start, end, arn) =
        (field("shardId")?, field("startSequenceNumber")?, field("endSequenceNumber")?, field("streamArn")?);
    let which = format!("{shard} from {start} to {end}");
    let mut resume = Resume::At(start.clone());
    let mut replayed = 0;
    loop {
        let from = Position { stream_arn: &arn, shard: &shard, resume: Some(&resume) };
        let read = source.read(clients, from, settings.batch_size).await;
        let read =
            read.map_err(|e| format!("{which}: the stream cannot give it back: {}", crate::error::report(&*e)))?;
        if matches!(resume, Resume::At(_)) && read.first().is_none_or(|r| r.sequence != start) {
            // Trimmed (or never there): replaying what is left would pass the lost records over.
            return Err(format!("{which}: the stream no longer holds its first record"));
        }
        let batch: Vec<_> = read.into_iter().take_while(|r| !after(&r.sequence, &end)).collect();
        let Some(last) = batch.last().map(|r| r.sequence.clone()) else { return Ok(replayed) };
        let records: Vec<S::Record> = batch.into_iter().map(|r| r.record).filter(|r| source.passes(r)).collect();
        let n = records.len();
        if n > 0 {
            // A failure the answer names is a failure, whatever the mapping's response types:
            // the mapping may not read it, but the replay would delete the record's only trace.
            match source.invoke(records).await {
                Ok(failures) if failures.is_empty() => replayed += n,
                Ok(failures) => {
                    let named: Vec<&str> = failures.iter().map(|f| f.as_deref().unwrap_or("null")).collect();
                    return Err(format!("{which}: the answer names {} failed", named.join(", ")));
                }
                Err(e) => return Err(format!("{which}: the function failed: {}", crate::error::report(&*e))),
            }
        }
        if last == end {
            return Ok(replayed);
        }
        resume = Resume::After(last);
    }
}

/// Whether sequence number `a` comes after `b`: decimal strings of any length.
pub(super) fn after(a: &str, b: &str) -> bool {
    (a.len(), a) > (b.len(), b)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use super::*;

    /// An SQS endpoint whose first `ReceiveMessage` answers nothing though a message is there
    /// (short polling missed the server holding it), then the message; its counts say so.
    async fn sampling_sqs() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (receives, deleted) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (receives, deleted) = (receives.clone(), deleted.clone());
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let target = request.headers().get("x-amz-target").map(|v| v.to_str().unwrap().to_owned());
                    let body = match target.as_deref().unwrap_or_default() {
                        "AmazonSQS.ReceiveMessage" if receives.fetch_add(1, Ordering::SeqCst) == 0 => "{}".to_owned(),
                        "AmazonSQS.ReceiveMessage" if deleted.load(Ordering::SeqCst) == 0 => {
                            r#"{"Messages":[{"MessageId":"m1","ReceiptHandle":"h1","Body":"{}"}]}"#.to_owned()
                        }
                        "AmazonSQS.DeleteMessage" => {
                            deleted.fetch_add(1, Ordering::SeqCst);
                            "{}".to_owned()
                        }
                        "AmazonSQS.GetQueueAttributes" => {
                            let left = 1 - deleted.load(Ordering::SeqCst).min(1);
                            format!(r#"{{"Attributes":{{"ApproximateNumberOfMessages":"{left}"}}}}"#)
                        }
                        _ => "{}".to_owned(),
                    };
                    async move {
                        let answer = hyper::Response::builder()
                            .header("content-type", "application/x-amz-json-1.0")
                            .body(Full::new(bytes::Bytes::from(body)));
                        Ok::<_, std::convert::Infallible>(answer.unwrap())
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(client), service),
                );
            }
        });
        url
    }

    #[tokio::test]
    async fn a_receive_that_misses_the_messages_left_does_not_end_the_sweep() {
        let url = sampling_sqs().await;
        let mut clients = Clients::local().await;
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(&url)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "test"))
            .load()
            .await;
        clients.sqs = aws_sdk_sqs::Client::new(&sdk);
        let replayed = sweep(&clients, &format!("{url}/000000000000/parked"), async |_: &Value| Ok(1)).await.unwrap();
        assert_eq!((replayed.batches, replayed.records), (1, 1), "the message behind the empty answer is replayed");
    }
}
