//! The API's answers: `202` with the event id, and the errors, `{"error": CODE, "message": TEXT}`.

use effectively_once::ErrorChain;
use effectively_once_redact::redact_emails;
use lambda_http::http::{header, HeaderValue, StatusCode};
use lambda_http::{Body, Response};
use payments::PaymentEvent;
use serde_json::json;

use crate::Answer;

/// `202 {"event_id": KEY}`: the event is on the queue.
pub fn accepted(event: &PaymentEvent) -> Answer {
    Answer::json(StatusCode::ACCEPTED, &json!({ "event_id": event.event_id }))
}

/// `422`: the key is bound to another body (the layer's refusal).
pub fn key_reused(event: &PaymentEvent) -> Answer {
    Answer::key_reused(&event.event_id)
}

/// `503 key_held`, stored for good: the key's claim replaced a record that could not be read,
/// which may be another body's send ([`rules::OnClaim::Hold`](effectively_once_http::rules::OnClaim::Hold)).
pub fn key_held(event: &PaymentEvent) -> Answer {
    Answer::key_held(&event.event_id)
}

/// An error answer, `{"error": CODE, "message": TEXT}`.
pub fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Answer {
    Answer::error(status, code, message)
}

/// `503` with `Retry-After: 1`: the queue failed; a retry starts over, or waits for the key's
/// lease where the layer holds it (it then sets `Retry-After` to the lease's seconds).
pub(crate) fn unavailable(event_id: &str, cause: &(dyn std::error::Error + 'static)) -> Response<Body> {
    tracing::warn!(event_id, error = %redact_emails(&ErrorChain(cause).to_string()), "unavailable");
    let mut response = reply(error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "try again"));
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The HTTP response of an answer.
pub fn reply(answer: Answer) -> Response<Body> {
    answer.into_response()
}
