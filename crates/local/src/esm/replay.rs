//! The on-failure destination of a stream mapping, replayed after a fix: each invocation record
//! names a shard and a range of sequence numbers, whose records are read again from the stream
//! (`AT_SEQUENCE_NUMBER` the start, up to the end), handed to the function in batches, and the
//! record is deleted only once all of them succeeded. The records themselves are not in the
//! destination; they can be replayed while the stream still holds them (24 h by default).

use std::collections::HashMap;

use serde_json::Value;

use super::checkpoint::{Position, Resume, Settings, Source};
use super::queue::receive;
use crate::error::{Result, ResultExt};
use crate::resources::Clients;

/// What a replay of an on-failure destination did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Invocation records whose records all succeeded, deleted from the destination.
    pub batches: usize,
    /// Records handed to the function and answered as successes.
    pub records: usize,
    /// Invocation records left in the destination: a record still failed, or the stream no
    /// longer holds it.
    pub kept: usize,
}

/// Replays every invocation record in `settings.failures_url` through `source`.
pub(crate) async fn replay<S: Source>(clients: &Clients, settings: &Settings, source: &S) -> Result<Replayed> {
    let Some(url) = &settings.failures_url else { return Ok(Replayed::default()) };
    walk(clients, url, async |record: &Value| replay_batch(clients, settings, source, &record[S::BATCH_INFO]).await)
        .await
}

/// Hands every invocation record in the destination `url` to `replay` once: deleted when it
/// answers `Some(records replayed)`, kept when `None` (or when the record is not JSON). Kept
/// records stay invisible until the walk is over, so it reaches the records behind them however
/// many there are; then they are made visible again at once, for the next replay or an
/// operator's look.
pub(super) async fn walk(
    clients: &Clients,
    url: &str,
    mut replay: impl AsyncFnMut(&Value) -> Result<Option<usize>>,
) -> Result<Replayed> {
    let mut replayed = Replayed::default();
    // Message id to its latest receipt handle: a kept record received again is not tried again.
    let mut kept: HashMap<String, String> = HashMap::new();
    let walked: Result<()> = async {
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
                let answer = match serde_json::from_str::<Value>(message.body().unwrap_or_default()) {
                    Ok(record) => replay(&record).await?,
                    Err(error) => {
                        tracing::warn!(%error, id, "an invocation record that is not JSON; kept");
                        None
                    }
                };
                match answer {
                    Some(n) => {
                        let delete = clients.sqs.delete_message().queue_url(url).receipt_handle(&handle);
                        delete.send().await.context("delete")?;
                        replayed.batches += 1;
                        replayed.records += n;
                    }
                    None => {
                        kept.insert(id, handle);
                        replayed.kept += 1;
                    }
                }
            }
            if fresh == 0 {
                return Ok(());
            }
        }
    }
    .await;
    for handle in kept.values() {
        let visible = clients.sqs.change_message_visibility().queue_url(url).receipt_handle(handle);
        visible.visibility_timeout(0).send().await.context("change visibility")?;
    }
    walked.map(|()| replayed)
}

/// The records of one batch info, in batches; `None` when one failed or none could be read.
async fn replay_batch<S: Source>(
    clients: &Clients,
    settings: &Settings,
    source: &S,
    info: &Value,
) -> Result<Option<usize>> {
    let field = |name: &str| info[name].as_str().map(str::to_owned).ok_or(format!("batch info without {name}"));
    let (shard, start, end, arn) =
        (field("shardId")?, field("startSequenceNumber")?, field("endSequenceNumber")?, field("streamArn")?);
    let mut resume = Resume::At(start);
    let mut replayed = 0;
    loop {
        let from = Position { stream_arn: &arn, shard: &shard, resume: Some(&resume) };
        let read = source.read(clients, from, settings.batch_size).await?;
        let batch: Vec<_> = read.into_iter().take_while(|r| !after(&r.sequence, &end)).collect();
        let Some(last) = batch.last().map(|r| r.sequence.clone()) else {
            // Nothing left in range: done, unless the stream had already dropped every record.
            return Ok((replayed > 0).then_some(replayed));
        };
        let records: Vec<S::Record> = batch.into_iter().map(|r| r.record).filter(|r| source.passes(r)).collect();
        let n = records.len();
        if n > 0 {
            match source.invoke(records).await {
                Ok(failures) if failures.is_empty() || !settings.report_batch_item_failures => replayed += n,
                _ => return Ok(None),
            }
        }
        if last == end {
            return Ok(Some(replayed));
        }
        resume = Resume::After(last);
    }
}

/// Whether sequence number `a` comes after `b`: decimal strings of any length.
pub(super) fn after(a: &str, b: &str) -> bool {
    (a.len(), a) > (b.len(), b)
}
