//! The payments queue: [`Queue`], [`SqsQueue`] (one attempt per send, FIFO ids through
//! [`fifo_id`]), and [`EnqueueError`], which says whether a failed send may have landed.

use std::future::Future;

use effectively_once::ErrorChain;
use payments::PaymentEvent;

/// Why a payment event could not be put on the queue. Built from an error alone
/// (`EnqueueError(e)`), it is **ambiguous**: the message may have landed (a timeout, a lost
/// answer), so the key keeps its payload until a retry of the same body sends again.
/// [`EnqueueError::refused`] is a definite refusal (access denied, no such queue, an invalid
/// request): nothing was sent, and the key's record is released.
#[derive(Debug)]
pub struct EnqueueError(pub Box<dyn std::error::Error + Send + Sync>);

/// The cause of a definite refusal, inside an [`EnqueueError`].
#[derive(Debug)]
struct Refused(Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused: {}", ErrorChain(&*self.0))
    }
}

impl std::error::Error for Refused {}

impl EnqueueError {
    /// A definite refusal: the queue answered, and the message is not on it.
    pub fn refused(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        EnqueueError(Box::new(Refused(cause.into())))
    }

    /// Whether the message is known not to be on the queue ([`EnqueueError::refused`]);
    /// otherwise it may have landed.
    pub fn is_refused(&self) -> bool {
        self.0.is::<Refused>()
    }
}

impl std::fmt::Display for EnqueueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "could not enqueue the payment event: {}", ErrorChain(&*self.0))
    }
}

impl std::error::Error for EnqueueError {}

/// The longest `MessageDeduplicationId` and `MessageGroupId` SQS takes.
pub const MAX_FIFO_ID: usize = 128;

/// A FIFO queue's id for `value` (an event id or an account id, up to 200 characters by the
/// contract): the value itself when it fits SQS's 128 characters, else `~` and the lower-case
/// hex SHA-256 of it (65 characters). Deterministic, so a resend carries the same ids; the
/// contract's characters are all allowed in these ids, and none is a `~`, so a hashed id never
/// equals a value kept as it is (another event's key that spells this one's hash).
pub fn fifo_id(value: &str) -> String {
    use sha2::{Digest, Sha256};
    if value.len() <= MAX_FIFO_ID {
        return value.to_owned();
    }
    let hex: String = Sha256::digest(value.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    format!("~{hex}")
}

/// Where accepted payment events go: [`SqsQueue`], or a test's wrapper around it.
pub trait Queue: Send + Sync {
    /// Sends one event.
    fn send(&self, event: &PaymentEvent) -> impl Future<Output = Result<(), EnqueueError>> + Send;
}

impl<Q: Queue + ?Sized> Queue for std::sync::Arc<Q> {
    fn send(&self, event: &PaymentEvent) -> impl Future<Output = Result<(), EnqueueError>> + Send {
        (**self).send(event)
    }
}

/// The payments queue on SQS, standard or FIFO.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    url: String,
    fifo: bool,
}

impl SqsQueue {
    /// The queue at `url`; `fifo` adds the message group (the account) and the deduplication id
    /// (the event id), each through [`fifo_id`].
    ///
    /// Each send is one attempt: the client's retries are turned off here. A refusal must mean
    /// that nothing landed, since it releases a free key
    /// ([`rules::on_failure`](effectively_once_http::rules::on_failure)); with the SDK's retries,
    /// an attempt that may have landed (a 500, a timeout) followed by a refused one (throttled)
    /// would read as a refusal, and the key would be freed for another body
    /// while the first may be on the queue. The caller retries instead (a `503`).
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>, fifo: bool) -> Self {
        let once = client.config().to_builder().retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled());
        SqsQueue { client: aws_sdk_sqs::Client::from_conf(once.build()), url: url.into(), fifo }
    }
}

impl Queue for SqsQueue {
    async fn send(&self, event: &PaymentEvent) -> Result<(), EnqueueError> {
        let body = serde_json::to_string(event).map_err(|e| EnqueueError(e.into()))?;
        let mut request = self.client.send_message().queue_url(&self.url).message_body(body);
        if self.fifo {
            // Per-account order, as the consumer's FIFO mode expects; SQS drops a copy of the
            // same event id within its 5-minute window, the consumer's record any later one.
            request =
                request.message_group_id(fifo_id(&event.account_id)).message_deduplication_id(fifo_id(&event.event_id));
        }
        request.send().await.map(drop).map_err(|e| {
            use aws_sdk_sqs::error::SdkError;
            // Refused for sure: never sent, or SQS answered 4xx (access denied, no such queue,
            // invalid parameter, throttled). A timeout, a dropped connection, an unreadable
            // answer or a 5xx may hide a message that landed.
            let refused = match &e {
                SdkError::ConstructionFailure(_) => true,
                SdkError::ServiceError(service) => service.raw().status().is_client_error(),
                _ => false,
            };
            if refused {
                EnqueueError::refused(e)
            } else {
                EnqueueError(e.into())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_ids_keep_what_fits_and_hash_the_rest() {
        let fits = format!("pay_{}", "k".repeat(124));
        assert_eq!(fifo_id(&fits), fits, "128 characters are kept as they are");
        let long = format!("pay_{}", "k".repeat(125));
        let hashed = fifo_id(&long);
        let hex = hashed.strip_prefix('~').expect("a hashed id starts with ~");
        assert_eq!(hex.len(), 64);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{hashed}");
        assert_eq!(fifo_id(&long), hashed, "deterministic: a resend carries the same id");
        assert_ne!(fifo_id(&format!("{long}x")), hashed);
    }

    /// A hashed id is never a key as it is: a caller whose next key is the hash of its long key
    /// would otherwise share that key's deduplication id, and SQS would drop the second event
    /// after the API answered 202.
    #[test]
    fn a_hashed_id_never_equals_a_key_kept_as_it_is() {
        let long = "k".repeat(200);
        let hashed = fifo_id(&long);
        let key_of_the_hash = hashed.trim_start_matches('~');
        let mut headers = lambda_http::http::HeaderMap::new();
        headers.insert(effectively_once_http::HEADER, key_of_the_hash.parse().unwrap());
        let key = effectively_once_http::IdempotencyKey::from_headers(&headers, "api", None);
        assert!(key.is_ok(), "a valid Idempotency-Key: {key_of_the_hash}");
        assert_ne!(fifo_id(key_of_the_hash), hashed, "two events, one deduplication id");
    }
}
