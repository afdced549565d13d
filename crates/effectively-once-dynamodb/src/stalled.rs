//! The SDK's stalled-stream protection for programs whose requests are small: on for answers,
//! off for requests, so nothing wakes a task while a request is outstanding.

use aws_sdk_dynamodb::config::StalledStreamProtectionConfig;

/// Stalled-stream protection for the SDK config of a program that sends small requests (DynamoDB
/// transactions, SQS and SES calls of a few kilobytes): download protection on, upload protection
/// off. Give it to `aws_config::defaults(..).stalled_stream_protection(..)`.
///
/// Why: with upload protection on, the SDK wraps every request in a check that sets a 100 ms
/// timer (a tenth of its 1 s window) and re-arms it until the answer arrives, although once the
/// body is sent the check can no longer fail (it reports the upload complete). Each tick wakes the
/// invocation's task, which re-polls its whole future tree: 1 to 9 ms of CPU for every second a
/// request is outstanding (issue 38; docs/bench.md, table 5), which a small Lambda function pays
/// as wall time. A body of a few kilobytes leaves in one write, so the check guards nothing here;
/// the wait for the answer is the program's timeouts' to bound, and the answer's body stays under
/// download protection.
///
/// ```no_run
/// # async fn example() {
/// let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
///     .stalled_stream_protection(effectively_once_dynamodb::stalled_stream_protection())
///     .load()
///     .await;
/// let client = aws_sdk_dynamodb::Client::new(&sdk);
/// # }
/// ```
pub fn stalled_stream_protection() -> StalledStreamProtectionConfig {
    StalledStreamProtectionConfig::enabled().upload_enabled(false).build()
}

/// `aws_config::defaults(version)` with [`stalled_stream_protection`]: the SDK config of this
/// workspace's functions, in one place. The HTTP client and the runtime stay the program's
/// choice (its own `aws-config` features).
///
/// ```no_run
/// # async fn example() {
/// let sdk = effectively_once_dynamodb::sdk_defaults(aws_config::BehaviorVersion::latest()).load().await;
/// let client = aws_sdk_dynamodb::Client::new(&sdk);
/// # }
/// ```
#[cfg(feature = "sdk-defaults")]
pub fn sdk_defaults(version: aws_config::BehaviorVersion) -> aws_config::ConfigLoader {
    aws_config::defaults(version).stalled_stream_protection(stalled_stream_protection())
}

#[cfg(test)]
mod tests {
    use super::stalled_stream_protection;
    use aws_sdk_dynamodb::config::{AsyncSleep, Credentials, Region, Sleep};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// The SDK's sleeps, counted: every timer the client sets goes through it.
    #[derive(Debug, Clone, Default)]
    struct CountingSleep(Arc<AtomicUsize>);

    impl AsyncSleep for CountingSleep {
        fn sleep(&self, duration: Duration) -> Sleep {
            self.0.fetch_add(1, Ordering::SeqCst);
            Sleep::new(tokio::time::sleep(duration))
        }
    }

    #[test]
    fn keeps_download_protection_and_drops_upload() {
        let config = stalled_stream_protection();
        assert!(config.is_enabled() && config.download_enabled());
        assert!(!config.upload_enabled());
    }

    /// Timers the SDK sets in 500 ms while a request sent with `loader`'s config is held by a
    /// server that accepts and never answers.
    async fn timers_while_held(loader: aws_config::ConfigLoader) -> usize {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let held: Vec<_> = listener.incoming().take(2).collect();
            std::thread::sleep(Duration::from_secs(30));
            drop(held);
        });
        let sleeps = CountingSleep::default();
        let sdk = loader
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "test"))
            .endpoint_url(endpoint)
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .sleep_impl(sleeps.clone())
            .load()
            .await;
        let client = aws_sdk_dynamodb::Client::new(&sdk);
        let request = tokio::spawn(async move { client.describe_table().table_name("held").send().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sent = sleeps.0.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!request.is_finished(), "the server never answers: {:?}", request.await);
        let waited = sleeps.0.load(Ordering::SeqCst);
        request.abort();
        waited - sent
    }

    // The CPU of issue 38: with upload protection on, the SDK sets a timer every 100 ms while
    // the request is outstanding, and each one wakes the task.
    #[tokio::test(flavor = "current_thread")]
    async fn an_outstanding_request_sets_no_timer() {
        let loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .stalled_stream_protection(stalled_stream_protection());
        assert_eq!(timers_while_held(loader).await, 0);
    }

    #[cfg(feature = "sdk-defaults")]
    #[tokio::test(flavor = "current_thread")]
    async fn the_functions_sdk_config_sets_no_timer_while_a_request_is_outstanding() {
        let loader = super::sdk_defaults(aws_config::BehaviorVersion::latest());
        assert_eq!(timers_while_held(loader).await, 0);
    }

    // The test above can fail: the SDK's defaults do set those timers.
    #[tokio::test(flavor = "current_thread")]
    async fn the_sdk_defaults_set_a_timer_every_100_ms_while_a_request_is_outstanding() {
        let loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        assert!(timers_while_held(loader).await >= 3);
    }
}
