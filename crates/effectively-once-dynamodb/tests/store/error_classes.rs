//! How `classify_sdk_error` classes a failed DynamoDB call: by its HTTP status as well as its error
//! code. A 5xx whose body names no known code (an empty or proxy-written body from a 502, 503
//! or 504, after the SDK's own retries ran out) is retryable, never permanent: the receipts
//! relay would mark the row failed, the Streams driver would go past the record for good, and
//! the SQS FIFO driver would go on with the group past the message.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use effectively_once::Retry;
use effectively_once_dynamodb::classify_sdk_error;

fn answer(status: u16, code: Option<&str>) -> SdkError<PutItemError, HttpResponse> {
    let mut meta = ErrorMetadata::builder().message("service is unavailable");
    if let Some(code) = code {
        meta = meta.code(code);
    }
    SdkError::service_error(
        PutItemError::generic(meta.build()),
        HttpResponse::new(status.try_into().unwrap(), "".into()),
    )
}

#[test]
fn server_errors_without_a_known_code_are_retryable() {
    let mut wrong = Vec::new();
    for status in [500u16, 502, 503, 504] {
        for code in [None, Some("ServiceUnavailableException"), Some("InternalServerErrorException")] {
            let e = classify_sdk_error("PutItem", answer(status, code));
            if e.retry() != Retry::Now {
                wrong.push(format!("HTTP {status} code {code:?} -> {:?}", e.kind()));
            }
        }
    }
    assert!(wrong.is_empty(), "server errors classified permanent:\n{}", wrong.join("\n"));
}

#[test]
fn transient_and_operator_fixable_codes_are_not_permanent() {
    // A single-item write that meets an in-flight transaction (documented as retryable),
    // expired session credentials (refreshed by the runtime), a request the server timed out.
    let mut wrong = Vec::new();
    for code in ["TransactionConflictException", "ExpiredTokenException", "RequestTimeout"] {
        let e = classify_sdk_error("PutItem", answer(400, Some(code)));
        if !matches!(e.retry(), Retry::Now | Retry::AfterFix) {
            wrong.push(format!("{code} -> {:?}", e.kind()));
        }
    }
    assert!(wrong.is_empty(), "classified permanent:\n{}", wrong.join("\n"));
}
