//! SDK errors into store errors, in one place.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use effectively_once::{StoreError, StoreErrorKind};

/// The [`StoreError`] any DynamoDB SDK error means. Only a verdict on the request itself is permanent (a
/// validation error, an item too large); everything a moment or an operator fixes is
/// retryable: throttling and contention, an unreachable or failing service (any 5xx, whatever
/// its body says), and a missing table or refused credentials. Callers give a message up for
/// good on a permanent answer (the Streams driver goes past it, a FIFO group goes on without
/// it), so a fault that is not the message's own must never be reported permanent.
///
/// Conditional-check failures are not errors to callers; the store turns them into outcomes
/// before they get here. The SDK's error is the [`StoreError`]'s source: the code and message
/// DynamoDB answered show in its chain ([`ErrorChain`](effectively_once::ErrorChain)).
pub fn store_error<E>(operation: &str, err: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let kind = match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreErrorKind::Unavailable
        }
        SdkError::ServiceError(service) => {
            service_kind(service.raw().status().as_u16(), service.err().code(), service.err().message())
        }
        _ => StoreErrorKind::Other,
    };
    // The SDK's error is the source: the message names the operation (and the HTTP status,
    // which no level of the SDK's chain shows), never what the chain says again.
    let message = match &err {
        SdkError::ServiceError(service) => {
            format!("DynamoDB {operation} failed (HTTP {})", service.raw().status().as_u16())
        }
        _ => format!("DynamoDB {operation} failed"),
    };
    StoreError::new(kind, message).with_source(err)
}

/// The kind of an answer DynamoDB gave, from its error code first, then its HTTP status (a
/// load balancer's or proxy's 5xx carries no code the service documents).
fn service_kind(status: u16, code: Option<&str>, message: Option<&str>) -> StoreErrorKind {
    match code {
        Some(
            "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "RequestLimitExceeded"
            | "LimitExceededException"
            // A single-item write that met an item a transaction holds, and a transaction whose
            // client token is still being processed: documented as retryable, after a backoff.
            | "TransactionConflictException"
            | "TransactionInProgressException",
        ) => StoreErrorKind::Throttled,
        Some(
            "InternalServerError"
            | "ServiceUnavailable"
            | "InternalFailure"
            // The server gave up waiting for the request; the SDK's runtime refreshes expired
            // session credentials, so the next delivery signs with new ones.
            | "RequestTimeout"
            | "RequestTimeoutException"
            | "ExpiredTokenException",
        ) => StoreErrorKind::Unavailable,
        // A table not there (a deploy order, a restore under a new name) or credentials
        // refused: an operator fixes these, and the message must wait for the fix, not be
        // given up on.
        Some(
            "ResourceNotFoundException"
            | "AccessDeniedException"
            | "UnrecognizedClientException"
            | "InvalidClientTokenId"
            | "MissingAuthenticationToken"
            | "MissingAuthenticationTokenException"
            | "InvalidSignatureException"
            | "IncompleteSignatureException"
            // A partition key's items under a local secondary index reached 10 GB: every write
            // to it fails until an operator moves data or the index, whatever the message.
            | "ItemCollectionSizeLimitExceededException",
        ) => StoreErrorKind::Misconfigured,
        Some("ValidationException") if message.is_some_and(|m| m.contains("Item size")) => StoreErrorKind::TooLarge,
        _ if status >= 500 => StoreErrorKind::Unavailable,
        _ if status == 429 => StoreErrorKind::Throttled,
        _ if status == 408 => StoreErrorKind::Unavailable,
        _ if status == 403 => StoreErrorKind::Misconfigured,
        _ => StoreErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::put_item::PutItemError;

    fn kind(status: u16, code: Option<&str>) -> StoreErrorKind {
        let mut meta = ErrorMetadata::builder().message("refused");
        if let Some(code) = code {
            meta = meta.code(code);
        }
        let err = SdkError::service_error(
            PutItemError::generic(meta.build()),
            HttpResponse::new(status.try_into().unwrap(), "".into()),
        );
        store_error("PutItem", err).kind()
    }

    #[test]
    fn operator_fixable_refusals_wait_for_the_fix_and_are_named() {
        for code in [
            "ResourceNotFoundException",
            "AccessDeniedException",
            "UnrecognizedClientException",
            "ItemCollectionSizeLimitExceededException",
        ] {
            assert_eq!(kind(400, Some(code)), StoreErrorKind::Misconfigured, "{code}");
            assert_eq!(kind(400, Some(code)).retry(), effectively_once::Retry::AfterFix, "{code}");
        }
        assert_eq!(kind(403, None), StoreErrorKind::Misconfigured);
    }

    #[test]
    fn a_verdict_on_the_request_stays_permanent() {
        assert_eq!(kind(400, Some("ValidationException")), StoreErrorKind::Other);
        assert_eq!(kind(400, Some("SerializationException")).retry(), effectively_once::Retry::Never);
        assert_eq!(kind(400, None).retry(), effectively_once::Retry::Never);
    }

    /// The store error names the operation and the status; the code and message are the SDK
    /// error's, its source, and appear once in the chain.
    #[test]
    fn the_sdk_error_is_the_source_and_chains_once() {
        let err = SdkError::service_error(
            PutItemError::generic(ErrorMetadata::builder().code("ValidationException").message("refused").build()),
            HttpResponse::new(400.try_into().unwrap(), "".into()),
        );
        let err = store_error("PutItem", err);
        assert_eq!(err.to_string(), "store Other: DynamoDB PutItem failed (HTTP 400)");
        let chain = effectively_once::ErrorChain(&err).to_string();
        for part in ["PutItem", "ValidationException", "refused", "HTTP 400", "service error"] {
            assert!(chain.contains(part), "{chain}");
        }
        let messages: Vec<String> =
            std::iter::successors(Some(&err as &(dyn std::error::Error + 'static)), |e| e.source())
                .map(ToString::to_string)
                .collect();
        for (i, outer) in messages.iter().enumerate() {
            for inner in &messages[i + 1..] {
                assert!(!outer.contains(inner.as_str()), "{outer:?} repeats {inner:?}: {messages:?}");
            }
        }
        let unreachable = SdkError::<PutItemError, HttpResponse>::timeout_error("no answer");
        let err = store_error("GetItem", unreachable);
        assert_eq!(err.to_string(), "store Unavailable: DynamoDB GetItem failed");
        assert_eq!(
            effectively_once::ErrorChain(&err).to_string(),
            "store Unavailable: DynamoDB GetItem failed: request has timed out: no answer"
        );
    }

    #[test]
    fn throttling_and_contention_are_throttled() {
        for code in ["ThrottlingException", "TransactionConflictException", "TransactionInProgressException"] {
            assert_eq!(kind(400, Some(code)), StoreErrorKind::Throttled, "{code}");
        }
        assert_eq!(kind(429, None), StoreErrorKind::Throttled);
    }
}
