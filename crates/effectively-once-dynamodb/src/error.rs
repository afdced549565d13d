//! SDK errors into store errors, in one place.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use effectively_once::{StoreError, StoreErrorKind};

/// Classifies any DynamoDB SDK error. Only a verdict on the request itself is permanent (a
/// validation error, an item too large); everything a moment or an operator fixes is
/// retryable: throttling and contention, an unreachable or failing service (any 5xx, whatever
/// its body says), and a missing table or refused credentials. Callers give a message up for
/// good on a permanent answer (the Streams driver goes past it, a FIFO group goes on without
/// it), so a fault that is not the message's own must never be reported permanent.
///
/// Conditional-check failures are not errors to callers; the store turns them into outcomes
/// before they get here.
pub fn classify<E>(operation: &str, err: SdkError<E, HttpResponse>) -> StoreError
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
    let detail = match &err {
        SdkError::ServiceError(service) => format!(
            "HTTP {} {}: {}",
            service.raw().status().as_u16(),
            service.err().code().unwrap_or("unknown"),
            service.err().message().unwrap_or("")
        ),
        other => other.to_string(),
    };
    StoreError::new(kind, format!("DynamoDB {operation} failed ({detail})")).with_source(err)
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
            | "IncompleteSignatureException",
        ) => StoreErrorKind::Misconfigured,
        Some("ItemCollectionSizeLimitExceededException") => StoreErrorKind::TooLarge,
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
        classify("PutItem", err).kind()
    }

    #[test]
    fn operator_fixable_refusals_are_retryable_and_named() {
        for code in ["ResourceNotFoundException", "AccessDeniedException", "UnrecognizedClientException"] {
            assert_eq!(kind(400, Some(code)), StoreErrorKind::Misconfigured, "{code}");
            assert!(kind(400, Some(code)).is_retryable(), "{code}");
        }
        assert_eq!(kind(403, None), StoreErrorKind::Misconfigured);
    }

    #[test]
    fn a_verdict_on_the_request_stays_permanent() {
        assert_eq!(kind(400, Some("ValidationException")), StoreErrorKind::Other);
        assert!(!kind(400, Some("SerializationException")).is_retryable());
        assert!(!kind(400, None).is_retryable());
        assert_eq!(kind(400, Some("ItemCollectionSizeLimitExceededException")), StoreErrorKind::TooLarge);
    }

    #[test]
    fn throttling_and_contention_are_throttled() {
        for code in ["ThrottlingException", "TransactionConflictException", "TransactionInProgressException"] {
            assert_eq!(kind(400, Some(code)), StoreErrorKind::Throttled, "{code}");
        }
        assert_eq!(kind(429, None), StoreErrorKind::Throttled);
    }
}
