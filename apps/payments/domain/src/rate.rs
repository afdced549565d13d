//! The receipts rate limit: at most N receipts per account per window, counted in one item per
//! account and window in the idempotency table (`id = receipt-rate#{account_id}#{window}`,
//! `window` the window's index since the epoch), which expires (TTL) a day after its window.
//!
//! The item holds the set of event ids admitted, not a number: the relay's stream records are
//! delivered at least once, and a number `ADD`ed twice for one receipt (a retry after a crash
//! between counting and sending) would spend a customer's allowance on nothing. One conditional
//! `UpdateItem` adds the event id to the set when the set has room or already holds it; two
//! relays racing for the last slot are serialised by DynamoDB on the item, and one of them gets
//! the failed condition. The set's size is bounded by [`RateLimit::MAX_PER_WINDOW`] so the item
//! stays far below DynamoDB's 400 KB (event ids are at most 200 characters).

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use effectively_once::StoreError;

/// The key prefix of the counters in the idempotency table.
pub const RATE_PREFIX: &str = "receipt-rate";

/// How long a counter outlives its window before DynamoDB's TTL removes it.
const KEPT_AFTER_WINDOW_S: u64 = 86_400;

/// At most `per_window` receipts per account in each `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Receipts admitted per account per window, 1 to [`MAX_PER_WINDOW`](Self::MAX_PER_WINDOW).
    pub per_window: u32,
    /// The window's length, whole seconds (windows are aligned on the epoch).
    pub window: Duration,
}

impl RateLimit {
    /// The largest limit: 1,000 event ids of at most 200 characters stay below half of an
    /// item's 400 KB.
    pub const MAX_PER_WINDOW: u32 = 1_000;

    /// The limit an environment names: `per_window` (`RECEIPT_RATE_PER_ACCOUNT`; unset, empty
    /// or `0` is no limit) in windows of `window_s` seconds (`RECEIPT_RATE_WINDOW_SECONDS`;
    /// unset or empty is 3600). The error names the variable.
    ///
    /// ```
    /// use payments::RateLimit;
    /// assert_eq!(RateLimit::from_env_values(None, None), Ok(None));
    /// let limit = RateLimit::from_env_values(Some("20"), Some("86400")).unwrap().unwrap();
    /// assert_eq!((limit.per_window, limit.window.as_secs()), (20, 86_400));
    /// assert!(RateLimit::from_env_values(Some("lots"), None).unwrap_err().contains("RECEIPT_RATE_PER_ACCOUNT"));
    /// ```
    pub fn from_env_values(per_window: Option<&str>, window_s: Option<&str>) -> Result<Option<RateLimit>, String> {
        let per_window = match per_window.map(str::trim).filter(|v| !v.is_empty()) {
            None => return Ok(None),
            Some(text) => text.parse::<u32>().ok().filter(|n| *n <= Self::MAX_PER_WINDOW).ok_or_else(|| {
                format!("RECEIPT_RATE_PER_ACCOUNT must be 0 (no limit) to {}, is {text:?}", Self::MAX_PER_WINDOW)
            })?,
        };
        if per_window == 0 {
            return Ok(None);
        }
        let window_s =
            match window_s.map(str::trim).filter(|v| !v.is_empty()) {
                None => 3_600,
                Some(text) => text.parse::<u64>().ok().filter(|s| (60..=31 * 86_400).contains(s)).ok_or_else(|| {
                    format!("RECEIPT_RATE_WINDOW_SECONDS must be 60 to 2678400 (31 days), is {text:?}")
                })?,
            };
        Ok(Some(RateLimit { per_window, window: Duration::from_secs(window_s) }))
    }

    /// The counter's key for `account_id` at `now_ms`, and when it may expire (epoch seconds).
    /// The window's index is the last `#`-separated part, so account ids holding `#` keep
    /// their keys apart.
    pub fn counter(&self, account_id: &str, now_ms: u64) -> (String, u64) {
        let window_s = self.window.as_secs().max(1);
        let index = now_ms / 1000 / window_s;
        (format!("{RATE_PREFIX}#{account_id}#{index}"), (index + 1) * window_s + KEPT_AFTER_WINDOW_S)
    }
}

/// The counters, in the idempotency table.
#[derive(Debug, Clone)]
pub struct ReceiptRate {
    client: Client,
    table: String,
    limit: RateLimit,
}

impl ReceiptRate {
    /// Counters in the idempotency `table`, through `client`, holding to `limit`.
    pub fn new(client: Client, table: impl Into<String>, limit: RateLimit) -> Self {
        ReceiptRate { client, table: table.into(), limit }
    }

    /// The limit.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Whether `event_id`'s receipt fits its account's allowance for the window holding
    /// `now_ms`: `true` when admitted now or earlier (a retry), `false` when the window's
    /// allowance went to other receipts. One conditional write.
    pub async fn admit(&self, account_id: &str, event_id: &str, now_ms: u64) -> Result<bool, StoreError> {
        let (id, expires_s) = self.limit.counter(account_id, now_ms);
        let written = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id))
            .update_expression("ADD #events :event SET #expiration = :expiration")
            // Room left, or this event admitted already (a redelivery): the set's size is the
            // count, and `contains` makes a retry free.
            .condition_expression("attribute_not_exists(#events) OR contains(#events, :id) OR size(#events) < :limit")
            .expression_attribute_names("#events", "events")
            .expression_attribute_names("#expiration", "expiration")
            .expression_attribute_values(":event", AttributeValue::Ss(vec![event_id.to_owned()]))
            .expression_attribute_values(":id", AttributeValue::S(event_id.to_owned()))
            .expression_attribute_values(":limit", AttributeValue::N(self.limit.per_window.to_string()))
            .expression_attribute_values(":expiration", AttributeValue::N(expires_s.to_string()))
            .send()
            .await;
        crate::outbox::updated(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_aligned_and_account_ids_with_hashes_stay_apart() {
        let limit = RateLimit { per_window: 3, window: Duration::from_secs(3600) };
        let (key, expires) = limit.counter("acct_1", 7_200_000);
        assert_eq!((key.as_str(), expires), ("receipt-rate#acct_1#2", 3 * 3600 + 86_400));
        assert_eq!(limit.counter("acct_1", 10_799_999).0, key, "the same hour");
        assert_eq!(limit.counter("acct_1", 10_800_000).0, "receipt-rate#acct_1#3", "the next");
        assert_ne!(limit.counter("a#1", 0).0, limit.counter("a", 3_600_000).0);
    }

    #[test]
    fn the_environment_is_bounded() {
        assert_eq!(RateLimit::from_env_values(Some("0"), Some("60")), Ok(None), "0 is off");
        assert_eq!(RateLimit::from_env_values(Some(" "), None), Ok(None), "empty is off");
        assert!(RateLimit::from_env_values(Some("1001"), None).is_err());
        assert!(RateLimit::from_env_values(Some("5"), Some("59")).unwrap_err().contains("RECEIPT_RATE_WINDOW_SECONDS"));
        assert_eq!(
            RateLimit::from_env_values(Some("5"), None).unwrap(),
            Some(RateLimit { per_window: 5, window: Duration::from_secs(3600) })
        );
    }
}
