//! The answer a key's record stores and replays: an HTTP status, a few headers and the body,
//! exactly as the handler sent them; and the layer's own error answers.

use base64::Engine as _;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The error code of `422`: the key is bound to another body.
pub const KEY_REUSED: &str = "idempotency_key_reused";
/// The error code of `409`: the key's first request is still in flight.
pub const IN_PROGRESS: &str = "request_in_progress";
/// The error code of a held key's stored `503` ([`rules::OnClaim::Hold`](crate::rules::OnClaim::Hold)).
pub const KEY_HELD: &str = "key_held";
/// The error code of `400` for a missing or invalid key.
pub const INVALID_KEY: &str = "invalid_idempotency_key";
/// The error code of `413`.
pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
/// The error code of a `503` with `Retry-After: 1`: the store failed; nothing is stored.
pub const UNAVAILABLE: &str = "unavailable";
/// The error code of a `503` with `Retry-After: 1`: the handler outran its lease and was cut
/// off; nothing is stored, and a retry takes the key over.
pub const LEASE_ENDED: &str = "lease_ended";
/// The error code of the `500` a retry gets when the handler's answer was too large to store
/// (over `Config::max_response_bytes`): the request was done, and is not done again.
pub const RESPONSE_TOO_LARGE: &str = "response_too_large";

/// An HTTP answer as a record keeps it: what a retry of the same key and body is answered.
///
/// The body is kept byte for byte (as text when it is UTF-8, else base64), so a replay is the
/// first answer's bytes; only the headers the layer was told to keep are stored
/// ([`IdempotencyKeyLayer::store_headers`](crate::IdempotencyKeyLayer::store_headers)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The headers kept, lower-case names, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// The body: UTF-8 text, or base64 when [`base64`](Self::base64) is set.
    pub body: String,
    /// Whether [`body`](Self::body) is the base64 of a body that is not UTF-8.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub base64: bool,
    /// On a refusal stored (by earlier versions) over another body's attempt whose outcome was
    /// unknown: that body's payload hash. The key stays that body's: its retries wait for the
    /// refusal's window to end ([`rules::OnReused::WaitForWindow`](crate::rules::OnReused::WaitForWindow)),
    /// then take the key over, where the record alone would refuse them. Never in the HTTP answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    held_for: Option<String>,
}

/// The stored form, read leniently: records written by `payments-api` before this crate hold
/// their JSON body as a JSON value (`{"status": 202, "body": {"event_id": ..}}`) and no headers.
#[derive(Deserialize)]
struct Stored {
    status: u16,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body: Value,
    #[serde(default)]
    base64: bool,
    #[serde(default)]
    held_for: Option<String>,
}

impl From<Stored> for Answer {
    fn from(stored: Stored) -> Self {
        let Stored { status, mut headers, body, base64, held_for } = stored;
        let body = match body {
            Value::String(text) => text,
            Value::Null => String::new(),
            // The earlier form: a JSON body, always answered as JSON.
            json => {
                if headers.is_empty() {
                    headers.push((header::CONTENT_TYPE.as_str().to_owned(), "application/json".to_owned()));
                }
                json.to_string()
            }
        };
        Answer { status, headers, body, base64, held_for }
    }
}

impl Answer {
    /// A JSON answer (`content-type: application/json`).
    pub fn json(status: StatusCode, body: &Value) -> Answer {
        Answer {
            status: status.as_u16(),
            headers: vec![(header::CONTENT_TYPE.as_str().to_owned(), "application/json".to_owned())],
            body: body.to_string(),
            base64: false,
            held_for: None,
        }
    }

    /// An error answer, `{"error": CODE, "message": TEXT}`.
    pub fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Answer {
        Answer::json(status, &json!({ "error": code, "message": message.into() }))
    }

    /// `422 idempotency_key_reused`: `key` is bound to another body.
    pub fn key_reused(key: &str) -> Answer {
        Answer::error(
            StatusCode::UNPROCESSABLE_ENTITY,
            KEY_REUSED,
            format!("Idempotency-Key {key} was used with another body"),
        )
    }

    /// `503 key_held`, stored for good: the key's claim replaced a record that could not be
    /// read, which may be another body's attempt ([`rules::OnClaim::Hold`](crate::rules::OnClaim::Hold)).
    pub fn key_held(key: &str) -> Answer {
        let message =
            format!("Idempotency-Key {key} is held: its earlier request could not be read back; contact support");
        Answer::error(StatusCode::SERVICE_UNAVAILABLE, KEY_HELD, message)
    }

    /// The answer of a response whose body has been read: `keep` names the headers stored.
    pub fn of(status: StatusCode, headers: &HeaderMap, body: &[u8], keep: &[HeaderName]) -> Answer {
        let headers = keep
            .iter()
            .flat_map(|name| headers.get_all(name).iter().map(move |value| (name, value)))
            .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
            .collect();
        let (body, base64) = match std::str::from_utf8(body) {
            Ok(text) => (text.to_owned(), false),
            Err(_) => (base64::engine::general_purpose::STANDARD.encode(body), true),
        };
        Answer { status: status.as_u16(), headers, body, base64, held_for: None }
    }

    /// On a refusal stored over another body's attempt whose outcome was unknown (by earlier
    /// versions): that body's payload hash, whose retries wait for the refusal's window to end
    /// ([`rules::OnReused::WaitForWindow`](crate::rules::OnReused::WaitForWindow)). Never in
    /// the HTTP answer.
    pub fn held_for(&self) -> Option<&str> {
        self.held_for.as_deref()
    }

    /// This answer, stored as a refusal held for the body whose payload hash is `held_for`
    /// ([`Answer::held_for`]).
    pub fn holding_for(mut self, held_for: Option<String>) -> Answer {
        self.held_for = held_for;
        self
    }

    /// The body's bytes.
    pub fn body_bytes(&self) -> Bytes {
        if self.base64 {
            // A body this crate encoded; anything else stored there is read as empty.
            Bytes::from(base64::engine::general_purpose::STANDARD.decode(&self.body).unwrap_or_default())
        } else {
            Bytes::from(self.body.clone())
        }
    }

    /// The body as JSON, when it is.
    pub fn json_body(&self) -> Option<Value> {
        (!self.base64).then(|| serde_json::from_str(&self.body).ok()).flatten()
    }

    /// The `error` code of a JSON error answer.
    pub fn error_code(&self) -> Option<String> {
        self.json_body()?.get("error")?.as_str().map(str::to_owned)
    }

    /// Whether this is the layer's stored refusal (`422 idempotency_key_reused`), not an answer
    /// of the handler's.
    pub fn is_refusal(&self) -> bool {
        self.status == StatusCode::UNPROCESSABLE_ENTITY && self.error_code().as_deref() == Some(KEY_REUSED)
    }

    /// Whether this is a held key's stored `503 key_held`.
    pub fn is_key_held(&self) -> bool {
        self.status == StatusCode::SERVICE_UNAVAILABLE && self.error_code().as_deref() == Some(KEY_HELD)
    }

    /// The HTTP response, its body built by `B::from` a `String` (UTF-8) or a `Vec<u8>`; the
    /// stored headers restored, [`held_for`](Self::held_for) never sent.
    pub fn into_response<B: From<String> + From<Vec<u8>>>(self) -> Response<B> {
        let body = body_of(self.body_bytes());
        let mut response = Response::new(body);
        *response.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::from_str(value)) {
                response.headers_mut().append(name, value);
            }
        }
        response
    }
}

/// A body of type `B` holding `bytes`: from a `String` when they are UTF-8 (a `lambda_http`
/// text body), else from a `Vec<u8>`.
pub(crate) fn body_of<B: From<String> + From<Vec<u8>>>(bytes: Bytes) -> B {
    match String::from_utf8(Vec::from(bytes)) {
        Ok(text) => B::from(text),
        Err(e) => B::from(e.into_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_keeps_the_body_byte_for_byte_and_the_chosen_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::SET_COOKIE, HeaderValue::from_static("session=secret"));
        let body = br#"{ "b": 1,  "a": 2 }"#;
        let answer = Answer::of(StatusCode::CREATED, &headers, body, &[header::CONTENT_TYPE, header::LOCATION]);
        let stored = serde_json::to_string(&answer).unwrap();
        assert!(!stored.contains("secret"), "{stored}");
        let back: Answer = serde_json::from_str(&stored).unwrap();
        assert_eq!(back, answer);
        let response: Response<Vec<u8>> = back.into_response();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.body(), body, "not re-serialised");
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        assert!(response.headers().get(header::SET_COOKIE).is_none());
    }

    #[test]
    fn a_binary_body_is_stored_as_base64() {
        let answer = Answer::of(StatusCode::OK, &HeaderMap::new(), &[0xff, 0x00, 0xfe], &[]);
        assert!(answer.base64);
        let back: Answer = serde_json::from_str(&serde_json::to_string(&answer).unwrap()).unwrap();
        assert_eq!(back.body_bytes().as_ref(), &[0xff, 0x00, 0xfe]);
        let response: Response<Vec<u8>> = back.into_response();
        assert_eq!(response.body(), &[0xff, 0x00, 0xfe]);
    }

    /// Records `payments-api` stored before this crate: the JSON body as a value, no headers.
    #[test]
    fn an_answer_stored_in_the_earlier_form_replays_as_json() {
        let earlier = r#"{"status":202,"body":{"event_id":"pay_1"}}"#;
        let answer: Answer = serde_json::from_str(earlier).unwrap();
        assert_eq!(answer.body, r#"{"event_id":"pay_1"}"#);
        assert_eq!(answer.headers, [("content-type".to_owned(), "application/json".to_owned())]);
        let refusal = r#"{"status":422,"body":{"error":"idempotency_key_reused","message":"m"},"held_for":"v2:ab"}"#;
        let refusal: Answer = serde_json::from_str(refusal).unwrap();
        assert!(refusal.is_refusal());
        assert_eq!(refusal.held_for(), Some("v2:ab"));
        let held: Answer = serde_json::from_str(r#"{"status":503,"body":{"error":"key_held","message":"m"}}"#).unwrap();
        assert!(held.is_key_held());
    }

    #[test]
    fn only_the_layers_own_codes_make_a_refusal_or_a_held_key() {
        assert!(Answer::key_reused("k").is_refusal());
        assert!(Answer::key_held("k").is_key_held());
        assert!(!Answer::error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body", "m").is_refusal());
        assert!(!Answer::error(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE, "m").is_key_held());
        assert!(!Answer::error(StatusCode::CONFLICT, KEY_HELD, "m").is_key_held());
        assert!(!Answer::error(StatusCode::CONFLICT, KEY_REUSED, "m").is_refusal());
    }
}
