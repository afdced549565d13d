//! The request side of HTTP: the route's path ([`route_path`]) and the event a request stands
//! for ([`parse`], [`parse_event`]), refusals naming the field; and the layer's fingerprint,
//! which hashes that event.

use effectively_once_http::IdempotencyKey;
use lambda_http::http::request::Parts;
use lambda_http::http::{HeaderMap, HeaderValue, StatusCode};
use lambda_http::{Body, Request, RequestExt};
use payments::{BodyError, PaymentEvent};
use serde_json::Value;

use crate::caller::Caller;
use crate::{error, Answer, IDEMPOTENCY_KEY};

/// The layer's fingerprint: the event the request stands for ([`parse_event`] of the scoped
/// key and the body), refused (`403`) when its account is not the caller's producer's, left
/// in the request's extensions for the send, and hashed as the payload, so "same body" means
/// the same validated event.
pub(crate) fn fingerprint(key: &IdempotencyKey, parts: &mut Parts, body: &bytes::Bytes) -> Result<Value, Answer> {
    let text = std::str::from_utf8(body)
        .map_err(|_| error(StatusCode::BAD_REQUEST, "invalid_body", "body: must be UTF-8 JSON"))?;
    let event = parse_event(key.scoped(), text)?;
    // Judged on the parsed event, before the claim: a refused account leaves no record that
    // would hold the caller's key.
    if let Some(caller) = parts.extensions.get::<Caller>().filter(|caller| !caller.may_post_to(&event.account_id)) {
        let producer = caller.producer().unwrap_or_default();
        tracing::warn!(producer, event_id = %event.event_id, "forbidden: an account the producer may not post to");
        let message = format!("account_id: producer {producer} may not post to account {}", event.account_id);
        return Err(error(StatusCode::FORBIDDEN, "forbidden", message));
    }
    let payload = serde_json::to_value(&event).map_err(|_| {
        error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "the payment event could not be hashed")
    })?;
    parts.extensions.insert(event);
    Ok(payload)
}

/// The event a request stands for: the body's fields and the key as `event_id`, validated by
/// [`PaymentEvent::parse`]. A refusal names the field (`Idempotency-Key` for the key).
pub fn parse(headers: &HeaderMap, body: &Body) -> Result<PaymentEvent, Answer> {
    let key_error = |message: String| error(StatusCode::BAD_REQUEST, "invalid_idempotency_key", message);
    let body_error = |message: String| error(StatusCode::BAD_REQUEST, "invalid_body", message);
    let key = match headers.get(IDEMPOTENCY_KEY).map(HeaderValue::to_str) {
        None => return Err(key_error("Idempotency-Key: the header is required".into())),
        Some(Err(_)) => return Err(key_error("Idempotency-Key: must be ASCII".into())),
        Some(Ok(key)) => key,
    };
    let text = match body {
        Body::Empty => "",
        Body::Text(text) => text.as_str(),
        Body::Binary(bytes) => std::str::from_utf8(bytes).map_err(|_| body_error("body: must be UTF-8 JSON".into()))?,
        _ => "",
    };
    parse_event(key, text)
}

/// The event of `event_id` (the key, within its caller's scope) and a body's text, validated
/// by [`PaymentEvent::parse_with_event_id`] (the rules of [`PaymentEvent::parse`], in one pass
/// over the text: no tree of the body is built); a refusal names the field (`Idempotency-Key`
/// for the event id).
pub fn parse_event(event_id: &str, text: &str) -> Result<PaymentEvent, Answer> {
    let key_error = |message: String| error(StatusCode::BAD_REQUEST, "invalid_idempotency_key", message);
    let body_error = |message: String| error(StatusCode::BAD_REQUEST, "invalid_body", message);
    PaymentEvent::parse_with_event_id(event_id, text).map_err(|refused| match refused {
        BodyError::NotAnObject => body_error("body: must be a JSON object with the payment's fields".into()),
        BodyError::NamesEventId => {
            body_error("event_id: not allowed in the body; the Idempotency-Key header is the event id".into())
        }
        BodyError::Invalid(invalid) => match invalid.field {
            Some("event_id") => key_error(format!("Idempotency-Key: {}", invalid.problem)),
            Some(field) => body_error(format!("{field}: {}", invalid.problem)),
            None => body_error(format!("body: {}", invalid.problem)),
        },
    })
}

/// The request's path without an API Gateway stage: an HTTP API on a named stage (`prod`)
/// sends `/prod/payments`, and `lambda_http` keeps the stage unless
/// `AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH` is set (then the path has none, and is kept). A
/// Function URL's stage, like the HTTP API's default one, is `$default`, never in the path.
pub fn route_path(request: &Request) -> &str {
    use lambda_http::request::RequestContext;
    let path = request.uri().path();
    #[allow(unreachable_patterns)] // one variant or several, as the workspace's features unify
    let stage = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(context)) => context.stage.as_deref(),
        _ => None,
    };
    match stage {
        Some(stage) if stage != "$default" && !stage.is_empty() => path
            .strip_prefix('/')
            .and_then(|rest| rest.strip_prefix(stage))
            .filter(|rest| rest.starts_with('/'))
            .unwrap_or(path),
        _ => path,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn headers(key: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(key) = key {
            headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_str(key).unwrap());
        }
        headers
    }

    fn refusal(key: Option<&str>, body: &str) -> (u16, String, String) {
        let answer = parse(&headers(key), &Body::Text(body.into())).unwrap_err();
        let body = answer.json_body().unwrap();
        (answer.status, body["error"].as_str().unwrap().into(), body["message"].as_str().unwrap().into())
    }

    const BODY: &str = r#"{"account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}"#;

    #[test]
    fn the_key_becomes_the_event_id() {
        let event = parse(&headers(Some("pay_0001")), &Body::Text(BODY.into())).unwrap();
        assert_eq!((event.event_id.as_str(), event.amount_cents), ("pay_0001", 1250));
        let empty = parse(&headers(Some("k")), &Body::Text("{}".into())).unwrap_err();
        assert!(empty.json_body().unwrap()["message"].as_str().unwrap().starts_with("account_id:"), "{empty:?}");
    }

    #[test]
    fn refusals_name_the_field() {
        let (status, code, message) = refusal(None, BODY);
        assert_eq!((status, code.as_str()), (400, "invalid_idempotency_key"));
        assert!(message.starts_with("Idempotency-Key:"), "{message}");
        let (_, code, message) = refusal(Some("pay 1"), BODY);
        assert_eq!(code, "invalid_idempotency_key");
        assert!(message.starts_with("Idempotency-Key: has the character ' '"), "{message}");
        let (_, code, message) = refusal(Some("k"), r#"{"account_id": "a", "amount_cents": 0, "currency": "USD"}"#);
        assert_eq!((code.as_str(), message.as_str()), ("invalid_body", "amount_cents: must not be zero"));
        let (_, _, message) = refusal(Some("k"), "[1]");
        assert!(message.starts_with("body:"), "{message}");
        let (_, _, message) =
            refusal(Some("k"), r#"{"event_id": "x", "account_id": "a", "amount_cents": 1, "currency": "USD"}"#);
        assert!(message.starts_with("event_id:"), "{message}");
    }

    /// The payload hash of a body is what stored records are compared with: a change to how
    /// the body is parsed must leave it as it is, or every retry of a stored key becomes `422`.
    #[test]
    fn the_fingerprint_of_a_body_is_pinned() {
        let hash = |key: &str, body: &str| {
            let (mut parts, ()) = lambda_http::http::Request::new(()).into_parts();
            let key = IdempotencyKey::from_headers(&headers(Some(key)), crate::PREFIX, None).unwrap();
            let payload = fingerprint(&key, &mut parts, &bytes::Bytes::copy_from_slice(body.as_bytes())).unwrap();
            effectively_once::Config::default().payload_hash(&payload).unwrap().as_str().to_owned()
        };
        let sample = r#"{"account_id": "acct_42", "amount_cents": 1250, "currency": "USD", "receipt_email": "alice@example.com"}"#;
        let pinned = "v2:198656cf0d87fcea1a1d29f7d43a334e8494466a84598aa4f65f7f95f3de7235";
        assert_eq!(hash("pay_http_0001", sample), pinned);
        let respelled = r#"{"receipt_email": "alice@example.com", "trace": {"x": [1]}, "currency": "USD",
            "amount_cents": 1.25e3, "account_id": "acct_42"}"#;
        assert_eq!(hash("pay_http_0001", respelled), pinned, "order, spelling and unknown fields do not count");
        assert_eq!(
            hash("pay_http_0002", r#"{"account_id": "acct_42", "amount_cents": 500, "currency": "USD"}"#),
            "v2:7d9a7d597b50416825ca9a89f6e181279d789bcfc6b8f617c0c44b1c0439cd40"
        );
    }

    #[test]
    fn a_named_stage_is_stripped_from_the_path() {
        let event = |path: &str, stage: &str| {
            let mut event: Value =
                serde_json::from_str(include_str!("../../../../events/apigw-http-payment.json")).unwrap();
            event["rawPath"] = json!(path);
            event["requestContext"]["stage"] = json!(stage);
            lambda_http::request::from_str(&event.to_string()).unwrap()
        };
        assert_eq!(route_path(&event("/prod/payments", "prod")), "/payments");
        assert_eq!(route_path(&event("/payments", "prod")), "/payments", "already stripped (IGNORE_STAGE_IN_PATH)");
        assert_eq!(route_path(&event("/payments", "$default")), "/payments");
        assert_eq!(route_path(&event("/production/payments", "prod")), "/production/payments");
    }
}
