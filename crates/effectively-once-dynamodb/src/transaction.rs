//! One `TransactWriteItems`, as the single commit ([`raw`](crate::raw)) and the batch both send
//! it: DynamoDB's limits checked before sending, the request sent, a cancellation read as typed
//! reasons ([`CancellationReason`]), and the one backoff between attempts.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason as SdkReason, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use effectively_once::{StoreError, StoreErrorKind};

use crate::error::store_error;

/// DynamoDB's limit on actions in one transaction.
pub(crate) const MAX_TRANSACTION_ITEMS: usize = 100;
/// DynamoDB's limit on the aggregate size of one transaction.
pub(crate) const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;
/// DynamoDB's limit on one item.
pub(crate) const MAX_ITEM_BYTES: usize = 400 * 1024;

/// A DynamoDB item.
type Item = HashMap<String, AttributeValue>;

/// Why DynamoDB cancelled one action of a transaction: its `CancellationReason` code, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CancellationReason {
    /// The action was fine; another one cancelled the transaction.
    None,
    /// The action's condition failed: a duplicate's record, or a business condition.
    ConditionalCheckFailed,
    /// Another transaction on the same items was in flight.
    TransactionConflict,
    /// `ThrottlingError`, `ProvisionedThroughputExceeded` or `RequestLimitExceeded`.
    Throttled,
    /// `ItemCollectionSizeLimitExceeded`: a partition key's items under a local secondary index
    /// reached 10 GB.
    ItemCollectionFull,
    /// `ValidationError`: the request was refused for this action's items.
    Validation,
    /// A code this crate does not know.
    Other(String),
}

impl CancellationReason {
    /// The reason a code names (no code, or `None`: [`CancellationReason::None`]).
    pub(crate) fn from_code(code: Option<&str>) -> Self {
        match code {
            None | Some("None") => CancellationReason::None,
            Some("ConditionalCheckFailed") => CancellationReason::ConditionalCheckFailed,
            Some("TransactionConflict") => CancellationReason::TransactionConflict,
            Some("ThrottlingError" | "ProvisionedThroughputExceeded" | "RequestLimitExceeded") => {
                CancellationReason::Throttled
            }
            Some("ItemCollectionSizeLimitExceeded") => CancellationReason::ItemCollectionFull,
            Some("ValidationError") => CancellationReason::Validation,
            Some(other) => CancellationReason::Other(other.to_owned()),
        }
    }

    /// The store error a reason that fails the transaction means; `None` for no reason, a
    /// failed condition or a conflict, which the caller reads apart.
    pub(crate) fn failure(&self) -> Option<StoreErrorKind> {
        match self {
            CancellationReason::None
            | CancellationReason::ConditionalCheckFailed
            | CancellationReason::TransactionConflict => None,
            CancellationReason::Throttled => Some(StoreErrorKind::Throttled),
            // An operator moves data or the index; no verdict on the message, which waits for
            // the fix.
            CancellationReason::ItemCollectionFull => Some(StoreErrorKind::Misconfigured),
            CancellationReason::Validation => Some(StoreErrorKind::Other),
            // A reason this code does not know is not a verdict on the message: giving the
            // message up for good on it could lose an event that a retry would post.
            CancellationReason::Other(_) => Some(StoreErrorKind::Unavailable),
        }
    }

    /// How a single commit ranks the reasons of one cancellation: the first of throttling, a
    /// full item collection, a refused request, then anything else, says what failed.
    fn rank(&self) -> u8 {
        match self {
            CancellationReason::Throttled => 0,
            CancellationReason::ItemCollectionFull => 1,
            CancellationReason::Validation => 2,
            _ => 3,
        }
    }
}

/// A cancelled transaction: one reason per action, in the order the actions were sent, each
/// with the item it returned (`ALL_OLD`), if any.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cancellation {
    reasons: Vec<CancellationReason>,
    /// The codes as DynamoDB sent them, for messages.
    codes: Vec<String>,
    items: Vec<Option<Item>>,
}

impl Cancellation {
    fn new(reasons: Vec<SdkReason>) -> Self {
        let mut cancellation = Cancellation::default();
        for reason in reasons {
            cancellation.reasons.push(CancellationReason::from_code(reason.code()));
            cancellation.codes.push(reason.code().unwrap_or("None").to_owned());
            cancellation.items.push(reason.item);
        }
        cancellation
    }

    /// A cancellation with these codes and no items (for tests).
    #[cfg(test)]
    pub(crate) fn of_codes(codes: &[&str]) -> Self {
        let reasons = codes.iter().map(|code| SdkReason::builder().code(*code).build()).collect();
        Cancellation::new(reasons)
    }

    /// A cancellation with these codes, the action at `at` returning `item` (for tests).
    #[cfg(test)]
    pub(crate) fn with_item(codes: &[&str], at: usize, item: Item) -> Self {
        let mut cancellation = Cancellation::of_codes(codes);
        cancellation.items[at] = Some(item);
        cancellation
    }

    /// The reason of the action at `at` ([`CancellationReason::None`] past the last).
    pub(crate) fn reason(&self, at: usize) -> &CancellationReason {
        self.reasons.get(at).unwrap_or(&CancellationReason::None)
    }

    /// Whether the condition of the action at `at` failed.
    pub(crate) fn condition_failed(&self, at: usize) -> bool {
        *self.reason(at) == CancellationReason::ConditionalCheckFailed
    }

    /// The first action whose condition failed.
    pub(crate) fn first_condition_failed(&self) -> Option<usize> {
        (0..self.reasons.len()).find(|&at| self.condition_failed(at))
    }

    /// The item the action at `at` returned.
    pub(crate) fn item(&self, at: usize) -> Option<&Item> {
        self.items.get(at).and_then(Option::as_ref)
    }

    /// Whether a conflicting transaction cancelled it.
    pub(crate) fn conflicted(&self) -> bool {
        self.reasons.contains(&CancellationReason::TransactionConflict)
    }

    /// What failed, as a single commit reads it: the highest ranked failing reason's kind, or
    /// [`StoreErrorKind::Unavailable`] when no reason says (no verdict on the message).
    pub(crate) fn failure(&self) -> StoreErrorKind {
        self.reasons
            .iter()
            .filter(|reason| reason.failure().is_some())
            .min_by_key(|reason| reason.rank())
            .and_then(CancellationReason::failure)
            .unwrap_or(StoreErrorKind::Unavailable)
    }

    /// What failed, as a batch reads it: the first failing reason's kind, if any reason fails
    /// the transaction (not a condition, not a conflict).
    pub(crate) fn first_failure(&self) -> Option<StoreErrorKind> {
        self.reasons.iter().find_map(CancellationReason::failure)
    }

    /// The codes other than `None` and `ConditionalCheckFailed`, as sent: what a message shows.
    pub(crate) fn codes(&self) -> Vec<&str> {
        self.codes
            .iter()
            .map(String::as_str)
            .filter(|code| !matches!(*code, "None" | "ConditionalCheckFailed"))
            .collect()
    }
}

/// What a sent transaction did.
#[derive(Debug)]
pub(crate) enum Sent {
    /// Every action was applied.
    Committed,
    /// Nothing was applied; here is why.
    Cancelled(Cancellation),
}

/// Sends `actions` as one `TransactWriteItems`. A cancellation is an answer, not an error; any
/// other failure is the store error it means.
pub(crate) async fn send(client: &Client, actions: Vec<TransactWriteItem>) -> Result<Sent, StoreError> {
    match client.transact_write_items().set_transact_items(Some(actions)).send().await {
        Ok(_) => Ok(Sent::Committed),
        Err(SdkError::ServiceError(service))
            if matches!(service.err(), TransactWriteItemsError::TransactionCanceledException(_)) =>
        {
            let TransactWriteItemsError::TransactionCanceledException(cancelled) = service.into_err() else {
                unreachable!("matched above")
            };
            Ok(Sent::Cancelled(Cancellation::new(cancelled.cancellation_reasons.unwrap_or_default())))
        }
        Err(error) => Err(store_error("TransactWriteItems", error)),
    }
}

/// The pause before attempt `attempt` (from 1) of a transaction a conflict cancelled: growing
/// by 10 ms an attempt up to 100 ms, plus up to 20 ms of jitter so the transactions that met do
/// not meet again.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let base = (10 * u64::from(attempt)).min(100);
    Duration::from_millis(base + fastrand::u64(0..20))
}

/// Checks DynamoDB's limits on one transaction before it is sent: actions, item size, total.
pub(crate) fn check_limits(actions: &[TransactWriteItem]) -> Result<(), StoreError> {
    if actions.len() > MAX_TRANSACTION_ITEMS {
        return Err(StoreError::new(
            StoreErrorKind::TooLarge,
            format!("transaction has {} actions; DynamoDB allows {MAX_TRANSACTION_ITEMS}", actions.len()),
        ));
    }
    let mut total = 0;
    for (position, action) in actions.iter().enumerate() {
        let size = action_size(action);
        if size > MAX_ITEM_BYTES {
            return Err(StoreError::new(
                StoreErrorKind::TooLarge,
                format!("transaction action {position} has an item of {size} bytes; DynamoDB allows {MAX_ITEM_BYTES}"),
            ));
        }
        total += size;
    }
    if total > MAX_TRANSACTION_BYTES {
        return Err(StoreError::new(
            StoreErrorKind::TooLarge,
            format!("transaction holds {total} bytes; DynamoDB allows {MAX_TRANSACTION_BYTES}"),
        ));
    }
    Ok(())
}

/// Whether a transaction of `actions` actions and `bytes` bytes is within DynamoDB's limits.
pub(crate) fn fits(actions: usize, bytes: usize) -> bool {
    actions <= MAX_TRANSACTION_ITEMS && bytes <= MAX_TRANSACTION_BYTES
}

/// Write units a transaction is modelled to cost. DynamoDB bills a transactional write at two
/// units per item per KB (prepare and commit). The local AWS reports no consumed capacity, so
/// these are computed from the actions' sizes; a cancelled transaction is modelled as its
/// prepare phase, one unit per item per KB, as a failed conditional write costs its unit.
/// Update and condition-check actions are sized by the attributes they send, a lower bound of
/// the item they touch (a balance item stays well under 1 KB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteUnits {
    /// When the transaction commits (a first delivery).
    pub committed: u64,
    /// When it is cancelled (a duplicate, or a failed business condition).
    pub cancelled: u64,
}

impl WriteUnits {
    /// The modelled units of a transaction of `actions`.
    pub(crate) fn of(actions: &[TransactWriteItem]) -> Self {
        let kb: Vec<u64> = actions.iter().map(|a| action_size(a).div_ceil(1024).max(1) as u64).collect();
        WriteUnits { committed: kb.iter().map(|k| 2 * k).sum(), cancelled: kb.iter().sum() }
    }
}

/// The size DynamoDB counts for an action's item: for a put, its item; otherwise the key and
/// the values it sends.
pub(crate) fn action_size(action: &TransactWriteItem) -> usize {
    let values = |v: Option<&HashMap<String, AttributeValue>>| v.map(|m| m.values().map(value_size).sum()).unwrap_or(0);
    if let Some(put) = action.put() {
        item_size(put.item())
    } else if let Some(update) = action.update() {
        item_size(update.key()) + values(update.expression_attribute_values())
    } else if let Some(check) = action.condition_check() {
        item_size(check.key())
    } else if let Some(delete) = action.delete() {
        item_size(delete.key())
    } else {
        0
    }
}

/// Item size rules: strings by UTF-8 length, numbers about one byte per two digits plus one.
fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(string) => string.len(),
        AttributeValue::N(number) => number.len().div_ceil(2) + 1,
        AttributeValue::B(bytes) => bytes.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(strings) => strings.iter().map(String::len).sum(),
        AttributeValue::Ns(numbers) => numbers.iter().map(|n| n.len().div_ceil(2) + 1).sum(),
        AttributeValue::L(list) => 3 + list.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        AttributeValue::M(map) => 3 + map.iter().map(|(k, v)| 1 + k.len() + value_size(v)).sum::<usize>(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each code DynamoDB documents is its reason; an unknown one is kept by name.
    #[test]
    fn codes_are_read_as_typed_reasons() {
        use CancellationReason as R;
        for (code, reason) in [
            (None, R::None),
            (Some("None"), R::None),
            (Some("ConditionalCheckFailed"), R::ConditionalCheckFailed),
            (Some("TransactionConflict"), R::TransactionConflict),
            (Some("ThrottlingError"), R::Throttled),
            (Some("ProvisionedThroughputExceeded"), R::Throttled),
            (Some("RequestLimitExceeded"), R::Throttled),
            (Some("ItemCollectionSizeLimitExceeded"), R::ItemCollectionFull),
            (Some("ValidationError"), R::Validation),
            (Some("SomethingNew"), R::Other("SomethingNew".into())),
        ] {
            assert_eq!(R::from_code(code), reason, "{code:?}");
        }
    }

    /// A full item collection waits for an operator (after a fix), throttling is throttling, a
    /// refused request is permanent, an unknown reason is no verdict on the message.
    #[test]
    fn each_failing_reason_is_a_store_error_kind() {
        let kind = |codes: &[&str]| Cancellation::of_codes(codes).failure();
        assert_eq!(kind(&["ItemCollectionSizeLimitExceeded", "None"]), StoreErrorKind::Misconfigured);
        assert_eq!(StoreErrorKind::Misconfigured.retry(), effectively_once::Retry::AfterFix);
        assert_eq!(kind(&["None", "ThrottlingError"]), StoreErrorKind::Throttled);
        assert_eq!(kind(&["ValidationError"]), StoreErrorKind::Other);
        assert_eq!(kind(&["Mystery"]), StoreErrorKind::Unavailable);
        assert_eq!(kind(&["None", "None"]), StoreErrorKind::Unavailable);
        let first = |codes: &[&str]| Cancellation::of_codes(codes).first_failure();
        assert_eq!(first(&["ItemCollectionSizeLimitExceeded"]), Some(StoreErrorKind::Misconfigured));
        assert_eq!(first(&["RequestLimitExceeded"]), Some(StoreErrorKind::Throttled));
        assert_eq!(first(&["ValidationError"]), Some(StoreErrorKind::Other));
        assert_eq!(first(&["Mystery"]), Some(StoreErrorKind::Unavailable));
        assert_eq!(first(&["None", "ConditionalCheckFailed", "TransactionConflict"]), None);
    }

    /// A single commit names the most telling reason whatever the order; a batch the first.
    #[test]
    fn a_single_commit_ranks_reasons_and_a_batch_takes_the_first() {
        let both = Cancellation::of_codes(&["ValidationError", "ItemCollectionSizeLimitExceeded", "ThrottlingError"]);
        assert_eq!(both.failure(), StoreErrorKind::Throttled);
        assert_eq!(both.first_failure(), Some(StoreErrorKind::Other));
        let full = Cancellation::of_codes(&["Mystery", "ValidationError", "ItemCollectionSizeLimitExceeded"]);
        assert_eq!(full.failure(), StoreErrorKind::Misconfigured);
        let refused = Cancellation::of_codes(&["Mystery", "ValidationError"]);
        assert_eq!(refused.failure(), StoreErrorKind::Other);
    }

    #[test]
    fn conditions_and_conflicts_are_found_by_position() {
        let c = Cancellation::of_codes(&["None", "ConditionalCheckFailed", "TransactionConflict"]);
        assert!(!c.condition_failed(0) && c.condition_failed(1) && !c.condition_failed(9));
        assert_eq!(c.first_condition_failed(), Some(1));
        assert!(c.conflicted());
        assert_eq!(c.codes(), vec!["TransactionConflict"]);
        assert_eq!(c.reason(9), &CancellationReason::None);
        assert!(c.item(1).is_none());
        let quiet = Cancellation::of_codes(&["None"]);
        assert!(!quiet.conflicted() && quiet.first_condition_failed().is_none());
    }

    /// Attempts back off 10 ms more each, capped at 100 ms, with under 20 ms of jitter.
    #[test]
    fn the_backoff_grows_is_capped_and_jittered() {
        for (attempt, base) in [(1, 10), (2, 20), (8, 80), (10, 100), (50, 100)] {
            for _ in 0..50 {
                let pause = backoff(attempt).as_millis() as u64;
                assert!((base..base + 20).contains(&pause), "attempt {attempt}: {pause} ms");
            }
        }
    }

    #[test]
    fn limits_count_actions_and_bytes() {
        assert!(fits(MAX_TRANSACTION_ITEMS, MAX_TRANSACTION_BYTES));
        assert!(!fits(MAX_TRANSACTION_ITEMS + 1, 0));
        assert!(!fits(1, MAX_TRANSACTION_BYTES + 1));
    }
}
