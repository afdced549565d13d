//! Counts the HTTP requests a client sends, by operation: what DynamoDB bills.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};

/// An SDK interceptor counting every request sent (retries included), by operation.
///
/// ```no_run
/// # async fn example(sdk: aws_config::SdkConfig) {
/// let counter = effectively_once_dynamodb::RequestCounter::default();
/// let config = aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(counter.clone()).build();
/// let client = aws_sdk_dynamodb::Client::from_conf(config);
/// // ... use the client ...
/// println!("{} requests: {:?}", counter.total(), counter.by_operation());
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl RequestCounter {
    /// Requests sent so far.
    pub fn total(&self) -> u64 {
        self.lock().values().sum()
    }

    /// Requests sent so far by operation (`PutItem`, `UpdateItem`, ...).
    pub fn by_operation(&self) -> BTreeMap<String, u64> {
        self.lock().clone()
    }

    /// Counts from zero again.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    // Runs once per attempt, just before the request goes on the wire, so SDK retries count.
    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let operation = context
            .request()
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or("unknown")
            .to_owned();
        *self.lock().entry(operation).or_default() += 1;
        Ok(())
    }
}
