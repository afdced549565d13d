//! SDK errors into store errors, in one place.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use idempotency::{StoreError, StoreErrorKind};

/// Classifies any DynamoDB SDK error: throttling and unreachable or failing service are
/// retryable, the rest permanent. Conditional-check failures are not errors to callers; the
/// store turns them into outcomes before they get here.
pub fn classify<E, R>(operation: &str, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let kind = match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreErrorKind::Unavailable
        }
        SdkError::ServiceError(service) => match service.err().code() {
            Some(
                "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded"
                | "LimitExceededException",
            ) => StoreErrorKind::Throttled,
            Some("InternalServerError" | "ServiceUnavailable" | "InternalFailure") => StoreErrorKind::Unavailable,
            Some("ItemCollectionSizeLimitExceededException") => StoreErrorKind::TooLarge,
            Some("ValidationException") if service.err().message().is_some_and(|m| m.contains("Item size")) => {
                StoreErrorKind::TooLarge
            }
            _ => StoreErrorKind::Other,
        },
        _ => StoreErrorKind::Other,
    };
    let detail = match &err {
        SdkError::ServiceError(service) => {
            format!("{}: {}", service.err().code().unwrap_or("unknown"), service.err().message().unwrap_or(""))
        }
        other => other.to_string(),
    };
    StoreError::new(kind, format!("DynamoDB {operation} failed ({detail})")).with_source(err)
}
