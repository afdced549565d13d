//! An SQS consumer that charges each payment through a provider's HTTP API once: the call
//! carries an `Idempotency-Key` derived from the record's own `Key`, the provider's answer is
//! stored when it is a verdict (2xx, 4xx) and retried when it is not (5xx, 409, 429).
#![warn(missing_docs)]

use effectively_once::outbound::{self, disposition};
use effectively_once::{Idempotency, Key, Outcome};
use effectively_once_dynamodb::DynamoDbStore;
use effectively_once_lambda::events::Context;
use effectively_once_lambda::events::SqsMessage;
use effectively_once_lambda::Handler;
use effectively_once_lambda::{Handled, RecordError, RecordResult};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The message body, and the charge sent to the provider.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Payment {
    /// The business id: the record's key, and so the provider's idempotency key.
    pub payment_id: String,
    /// How much.
    pub amount_cents: i64,
    /// In what.
    pub currency: String,
}

/// The provider's answer: the record's response, which every duplicate is answered with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body as the provider sent it.
    pub body: String,
}

/// Charges each payment once.
pub struct Charges {
    /// The payments' records, in the idempotency table.
    pub idempotency: Idempotency<DynamoDbStore>,
    /// The provider's API.
    pub provider: Provider,
}

impl Handler<SqsMessage> for Charges {
    async fn handle(&self, message: &SqsMessage, context: &Context) -> RecordResult {
        let payment = parse(message)?;
        let key = Key::new("charge", &payment.payment_id)?;
        let body = serde_json::to_string(&payment).map_err(|e| RecordError::permanent(e.to_string()))?;
        let call = || async {
            // Same record key, same provider key: a retry after a 500 or a lost answer is
            // deduplicated by the provider, a duplicate after completion never reaches it.
            let (status, retry_after, body) = self.provider.post("/charges", key.idempotency_header(), &body).await?;
            match disposition(status, retry_after.as_deref()) {
                outbound::StoreOrRetry::Store => Ok(Answer { status, body }),
                // Released, so the redelivery calls again (SQS's visibility timeout is the wait).
                outbound::StoreOrRetry::Retry { after } => {
                    Err(RecordError::retryable(format!("provider answered {status}, retry after {after:?}")))
                }
            }
        };
        let outcome = self.idempotency.with_deadline(context.deadline).run(&key, &payment, call).await?;
        Ok(match outcome {
            Outcome::Replayed(_) => Handled::Duplicate,
            Outcome::Fresh(answer) if answer.status >= 400 => Handled::Rejected,
            Outcome::Fresh(_) => Handled::Applied,
        })
    }

    /// Two copies of one payment in a batch run one after the other: the second is answered.
    fn key(&self, message: &SqsMessage) -> Option<String> {
        parse(message).ok().map(|payment| payment.payment_id)
    }
}

fn parse(message: &SqsMessage) -> Result<Payment, RecordError> {
    serde_json::from_str(message.body.as_deref().unwrap_or_default())
        .map_err(|e| RecordError::permanent(format!("not a payment: {e}")))
}

/// The provider's HTTP API at `addr` (`host:port`), plain HTTP/1.1. Written by hand so the
/// example needs no HTTP client crate; a real function uses its own (reqwest, hyper) with TLS.
#[derive(Debug, Clone)]
pub struct Provider {
    /// `host:port`.
    pub addr: String,
}

impl Provider {
    /// POSTs the JSON `body` to `path` with `header`; returns the status, `Retry-After` and
    /// the body. An I/O failure (no answer at all) is retryable: the call may have landed.
    pub async fn post(
        &self,
        path: &str,
        header: (&str, String),
        body: &str,
    ) -> Result<(u16, Option<String>, String), RecordError> {
        let failed = |e: std::io::Error| RecordError::retryable(format!("provider at {}: {e}", self.addr));
        let mut stream = tokio::net::TcpStream::connect(&self.addr).await.map_err(failed)?;
        let (addr, (name, value), length) = (&self.addr, header, body.len());
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{name}: {value}\r\nContent-Type: application/json\r\n\
             Content-Length: {length}\r\nConnection: close\r\n\r\n{body}"
        );
        stream.write_all(request.as_bytes()).await.map_err(failed)?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.map_err(failed)?;
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
        let status = status.ok_or_else(|| RecordError::retryable(format!("provider at {addr}: not an HTTP answer")))?;
        let retry_after = head.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("retry-after").then(|| value.trim().to_owned())
        });
        Ok((status, retry_after, body.to_owned()))
    }
}
