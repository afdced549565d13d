//! Queue utilities around the mappings: a queue's depth, the DLQ redrive, and a look at every
//! body a queue holds without taking it.

use std::collections::HashSet;

use aws_sdk_sqs::types::QueueAttributeName;

use crate::error::{Result, ResultExt};
use crate::resources::Clients;

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
