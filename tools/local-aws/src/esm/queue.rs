//! Queue utilities around the mappings: sending bodies as a producer does, a queue's depth, the
//! DLQ redrive, and a look at every body a queue holds without taking it.

use std::collections::HashSet;

use aws_sdk_sqs::types::QueueAttributeName;

use crate::error::{Result, ResultExt};
use crate::resources::Clients;

/// The largest SQS message body: 256 KiB, the limit queues had for years
/// (and still the limit of a queue whose `MaximumMessageSize` is left at it). Also the most one
/// `SendMessageBatch` may carry in total.
pub const SQS_BODY_LIMIT: usize = 262_144;

/// Message bodies of an SQS sample event file (`events/*.json`).
pub fn bodies_of_event_file(json: &str) -> Result<Vec<String>> {
    let value: serde_json::Value = serde_json::from_str(json).context("event file")?;
    let records = value["Records"].as_array().ok_or("no Records")?;
    Ok(records.iter().filter_map(|r| r["body"].as_str().map(str::to_owned)).collect())
}

/// Splits bodies into `SendMessageBatch` requests: ten at most, and at most [`SQS_BODY_LIMIT`]
/// bytes in all (a body at the limit goes alone).
pub fn batches(bodies: &[String]) -> Vec<&[String]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, body) in bodies.iter().enumerate() {
        if i > start && (i - start == 10 || bytes + body.len() > SQS_BODY_LIMIT) {
            out.push(&bodies[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += body.len();
    }
    if start < bodies.len() {
        out.push(&bodies[start..]);
    }
    out
}

/// Sends bodies in batches; each gets a new message id, as a producer's retry does.
pub async fn send(sqs: &aws_sdk_sqs::Client, queue_url: &str, bodies: &[String]) -> Result<usize> {
    use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
    for chunk in batches(bodies) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| SendMessageBatchRequestEntry::builder().id(i.to_string()).message_body(b).build())
            .collect::<Result<Vec<_>, _>>()?;
        let out =
            sqs.send_message_batch().queue_url(queue_url).set_entries(Some(entries)).send().await.context("send")?;
        if !out.failed().is_empty() {
            return Err(format!("send: {} messages refused", out.failed().len()).into());
        }
    }
    Ok(bodies.len())
}

/// Messages in a queue, visible and in flight.
pub async fn queue_depth(clients: &Clients, queue_url: &str) -> Result<u64> {
    let out = clients
        .sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .context("queue attributes")?;
    let attrs = out.attributes().cloned().unwrap_or_default();
    let count = |k: QueueAttributeName| attrs.get(&k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok(count(QueueAttributeName::ApproximateNumberOfMessages)
        + count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible))
}

/// Up to ten messages of `queue_url`, invisible for 30 s.
pub(super) async fn receive(clients: &Clients, queue_url: &str) -> Result<Vec<aws_sdk_sqs::types::Message>> {
    let out = clients
        .sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(10)
        .visibility_timeout(30)
        .send()
        .await
        .context(format!("receive from {queue_url}"))?;
    Ok(out.messages.unwrap_or_default())
}

/// Moves every message of `dlq_url` back to `queue_url`, as after a bug fix. Harmless: every
/// effect is keyed, so what was applied is not applied again. Returns how many moved.
pub async fn redrive(clients: &Clients, dlq_url: &str, queue_url: &str) -> Result<usize> {
    let mut moved = 0;
    loop {
        let messages = receive(clients, dlq_url).await?;
        if messages.is_empty() {
            return Ok(moved);
        }
        for m in messages {
            let body = m.body().unwrap_or_default();
            clients.sqs.send_message().queue_url(queue_url).message_body(body).send().await.context("redrive send")?;
            let handle = m.receipt_handle().unwrap_or_default();
            let delete = clients.sqs.delete_message().queue_url(dlq_url).receipt_handle(handle);
            delete.send().await.context("redrive delete")?;
            moved += 1;
        }
    }
}

/// Every message body in a queue, left in place: received, then made visible again at once.
pub async fn peek_bodies(clients: &Clients, queue_url: &str) -> Result<Vec<String>> {
    let mut bodies = Vec::new();
    let mut handles = Vec::new();
    let mut seen = HashSet::new();
    loop {
        let messages = receive(clients, queue_url).await?;
        let fresh: Vec<_> = messages.iter().filter(|m| seen.insert(m.message_id().unwrap_or("").to_owned())).collect();
        if fresh.is_empty() {
            break;
        }
        for m in fresh {
            bodies.push(m.body().unwrap_or_default().to_owned());
            handles.push(m.receipt_handle().unwrap_or_default().to_owned());
        }
    }
    for handle in handles {
        let visible = clients.sqs.change_message_visibility().queue_url(queue_url).receipt_handle(handle);
        visible.visibility_timeout(0).send().await.context("change visibility")?;
    }
    Ok(bodies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_ten_bodies_and_256_kib_at_most() {
        let small = vec!["x".repeat(100); 25];
        assert_eq!(batches(&small).iter().map(|b| b.len()).collect::<Vec<_>>(), vec![10, 10, 5]);
        let mut mixed = vec!["x".repeat(100); 3];
        mixed.insert(1, "y".repeat(SQS_BODY_LIMIT));
        let sizes: Vec<usize> = batches(&mixed).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, vec![1, 1, 2]);
        assert!(batches(&mixed).iter().all(|b| b.iter().map(String::len).sum::<usize>() <= SQS_BODY_LIMIT));
    }
}
