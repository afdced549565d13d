//! What a request's payload is, for the payload hash that tells a retry from another body.

use base64::Engine as _;
use bytes::Bytes;
use http::request::Parts;
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

/// The default: the body itself. A JSON body is its JSON value (so its canonical form is
/// hashed); any other body, its bytes. Never refuses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Canonical;

impl Fingerprint for Canonical {
    fn fingerprint(&self, _key: &IdempotencyKey, _parts: &mut Parts, body: &Bytes) -> Result<Value, Answer> {
        Ok(canonical_payload(body))
    }
}

/// [`Canonical`]'s payload: `["json", VALUE]` for a JSON body, `["bytes", BASE64]` for any
/// other (the tag keeps a text body apart from the JSON string of the same text).
pub fn canonical_payload(body: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) => json!(["json", value]),
        Err(_) => json!(["bytes", base64::engine::general_purpose::STANDARD.encode(body)]),
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
    fn a_text_body_is_its_bytes_and_never_a_json_string() {
        assert_eq!(hash("a=1&b=2"), hash("a=1&b=2"));
        assert_ne!(hash("a=1&b=2"), hash("b=2&a=1"));
        assert_ne!(hash("abc"), hash("\"abc\""));
        assert_ne!(hash(""), hash("null"));
    }
}
