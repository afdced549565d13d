//! What a request's payload is, for the payload hash that tells a retry from another body.

use base64::Engine as _;
use bytes::Bytes;
use http::request::Parts;
use http::Method;
use serde_json::{json, Value};

use crate::answer::Answer;
use crate::key::IdempotencyKey;

/// Turns a request into the payload its record's hash covers, or refuses it (`400` naming the
/// field) before the key is claimed. The payload is hashed in its RFC 8785 canonical form
/// (`effectively_once::Config::payload_hash`): key order, whitespace and `1250` against
/// `1250.0` do not make another body.
///
/// It may leave what it parsed in `parts.extensions` for the handler, which then need not
/// parse the body again. Closures
/// `Fn(&IdempotencyKey, &mut http::request::Parts, &Bytes) -> Result<Value, Answer>` are
/// fingerprints.
pub trait Fingerprint: Send + Sync + 'static {
    /// The payload of the request with this key, these parts and this body.
    fn fingerprint(&self, key: &IdempotencyKey, parts: &mut Parts, body: &Bytes) -> Result<Value, Answer>;
}

impl<F> Fingerprint for F
where
    F: Fn(&IdempotencyKey, &mut Parts, &Bytes) -> Result<Value, Answer> + Send + Sync + 'static,
{
    fn fingerprint(&self, key: &IdempotencyKey, parts: &mut Parts, body: &Bytes) -> Result<Value, Answer> {
        self(key, parts, body)
    }
}

/// The default: the request's method, its path with its query, and its body
/// ([`request_payload`]), so the same key and body sent to another resource (`PATCH /orders/2`
/// after `/orders/1`, `POST /refunds?order=2` after `?order=1`) is another request (`422`),
/// not the first one's answer. Never refuses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Canonical;

impl Fingerprint for Canonical {
    fn fingerprint(&self, _key: &IdempotencyKey, parts: &mut Parts, body: &Bytes) -> Result<Value, Answer> {
        let target = parts.uri.path_and_query().map_or_else(|| parts.uri.path(), |target| target.as_str());
        Ok(request_payload(&parts.method, target, body))
    }
}

/// [`Canonical`]'s payload: `[METHOD, TARGET, BODY]` (the target is the path and query as the
/// request spells them), the body as [`canonical_payload`] has it.
pub fn request_payload(method: &Method, target: &str, body: &[u8]) -> Value {
    json!([method.as_str(), target, canonical_payload(body)])
}

/// A body's payload: `["json", VALUE]` for a JSON body, `["bytes", BASE64]` for any other (the
/// tag keeps a text body apart from the JSON string of the same text). A JSON body holding a
/// string that starts with a NUL is taken as bytes: the payload hash spells an integer past
/// 2^53 as such a string (`"\u0000int:..."`), so the two would hash alike as JSON.
pub fn canonical_payload(body: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) if !has_nul_string(&value) => json!(["json", value]),
        _ => json!(["bytes", base64::engine::general_purpose::STANDARD.encode(body)]),
    }
}

/// Whether a string of `value` (an object's key included) starts with a NUL.
fn has_nul_string(value: &Value) -> bool {
    match value {
        Value::String(text) => text.starts_with('\0'),
        Value::Array(items) => items.iter().any(has_nul_string),
        Value::Object(fields) => fields.iter().any(|(name, item)| name.starts_with('\0') || has_nul_string(item)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use effectively_once::Config;

    use super::*;

    fn hash(body: &str) -> String {
        Config::default().payload_hash(&canonical_payload(body.as_bytes())).unwrap().as_str().to_owned()
    }

    #[test]
    fn a_re_serialised_json_body_is_the_same_body() {
        let first = hash(r#"{"amount": 1250, "currency": "USD"}"#);
        assert_eq!(first, hash(r#"{ "currency":"USD","amount":1250.0 }"#));
        assert_ne!(first, hash(r#"{"amount": 1251, "currency": "USD"}"#));
        assert_ne!(first, hash(r#"{"amount": 1250, "currency": "USD", "note": "x"}"#), "every field counts");
    }

    #[test]
    fn a_big_integer_and_the_string_it_is_hashed_as_are_two_bodies() {
        assert_ne!(hash(r#"{"amount": 9007199254740993}"#), hash(r#"{"amount": "\u0000int:9007199254740993"}"#));
        assert_eq!(hash(r#"{"amount": 9007199254740993}"#), hash(r#"{ "amount":9007199254740993 }"#));
    }

    #[test]
    fn the_method_and_path_are_part_of_the_payload() {
        let body = br#"{"status": "shipped"}"#;
        let one = request_payload(&Method::PATCH, "/orders/1", body);
        assert_ne!(one, request_payload(&Method::PATCH, "/orders/2", body));
        assert_ne!(one, request_payload(&Method::POST, "/orders/1", body));
        assert_eq!(one, request_payload(&Method::PATCH, "/orders/1", br#"{ "status":"shipped" }"#));
    }

    #[test]
    fn a_text_body_is_its_bytes_and_never_a_json_string() {
        assert_eq!(hash("a=1&b=2"), hash("a=1&b=2"));
        assert_ne!(hash("a=1&b=2"), hash("b=2&a=1"));
        assert_ne!(hash("abc"), hash("\"abc\""));
        assert_ne!(hash(""), hash("null"));
    }
}
