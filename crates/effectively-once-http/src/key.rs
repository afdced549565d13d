//! The `Idempotency-Key` header, the caller's scope, and the record key they make.

use effectively_once::Key;
use http::request::Parts;
use http::{HeaderMap, StatusCode};

use crate::answer::{Answer, INVALID_KEY};

/// The request header carrying the key.
pub const HEADER: &str = "idempotency-key";
/// The longest key (and scoped key, `{scope}:{key}`): the record's business key.
pub const MAX_KEY: usize = 200;
/// The longest scope kept as it is; longer ones, or ones with other characters, are hashed.
pub const MAX_SCOPE: usize = 64;

/// A request's validated key, in the request's extensions for the handler behind the layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    key: String,
    scope: Option<String>,
    record: Key,
}

impl IdempotencyKey {
    /// The key as the client sent it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The caller's scope, as stored ([`scope_name`]), if the layer has a [`Scope`].
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// The key within its scope: `{scope}:{key}`; without a scope, the key alone in a layer
    /// without a [`Scope`], `:{key}` in one with. Two callers' equal keys are two scoped keys.
    pub fn scoped(&self) -> &str {
        self.record.business_key()
    }

    /// The record's key: `{prefix}#{scoped key}`.
    pub fn record_key(&self) -> &Key {
        &self.record
    }

    /// The key of `headers`' `Idempotency-Key` under `scope` (a [`scope_name`]), for a layer
    /// without a [`Scope`], or the `400` naming what is wrong: 1 to 200 characters from
    /// `[A-Za-z0-9._:#-]`, less the scope's length and a colon.
    pub fn from_headers(headers: &HeaderMap, prefix: &str, scope: Option<String>) -> Result<IdempotencyKey, Answer> {
        IdempotencyKey::in_layer(headers, prefix, scope, false)
    }

    /// As [`from_headers`](Self::from_headers), in a layer that has a [`Scope`] (`scoped_layer`):
    /// there a request without a scope is stored as `:{key}`, which no scoped key
    /// (`{scope}:{key}`, the scope never empty) can spell, so an unscoped request never meets
    /// a scoped caller's record. A layer without a scope stores `{key}`.
    pub(crate) fn in_layer(
        headers: &HeaderMap,
        prefix: &str,
        scope: Option<String>,
        scoped_layer: bool,
    ) -> Result<IdempotencyKey, Answer> {
        let refuse = |problem: String| {
            Answer::error(StatusCode::BAD_REQUEST, INVALID_KEY, format!("Idempotency-Key: {problem}"))
        };
        let key = match headers.get(HEADER).map(|value| value.to_str()) {
            None => return Err(refuse("the header is required".into())),
            Some(Err(_)) => return Err(refuse("must be ASCII".into())),
            Some(Ok(key)) => key,
        };
        let room = match &scope {
            Some(scope) => scope.len() + 1,
            None => usize::from(scoped_layer),
        };
        let max = MAX_KEY.saturating_sub(room);
        let len = key.chars().count();
        if len == 0 || len > max {
            return Err(refuse(format!("must have 1 to {max} characters, has {len}")));
        }
        if let Some(c) = key.chars().find(|&c| !key_char(c)) {
            return Err(refuse(format!("has the character {c:?}; allowed: A-Z a-z 0-9 . _ : # -")));
        }
        let scoped = match &scope {
            Some(scope) => format!("{scope}:{key}"),
            None if scoped_layer => format!(":{key}"),
            None => key.to_owned(),
        };
        let record = Key::new(prefix, &scoped).map_err(|e| refuse(e.to_string()))?;
        Ok(IdempotencyKey { key: key.to_owned(), scope, record })
    }
}

/// The key's alphabet, the record's business key's.
fn key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '#' | '-')
}

/// Gives each caller a scope of its own: keys are stored under it, so two callers never share a
/// key. `Ok(None)`: no scope (one caller, or keys shared on purpose); `Err(answer)`: refuse the
/// request (`403` for an unknown caller, say) before anything is read or stored.
///
/// Closures `Fn(&http::request::Parts) -> Result<Option<String>, Answer>` are scopes. A scope
/// is stored as it is when it is 1 to 64 characters from `[A-Za-z0-9._-]`, and as a hash
/// otherwise ([`scope_name`]); a secret (a bearer token) is never stored as it is only if it
/// is hashed first: return [`hashed`]`(token)`.
///
/// ```
/// use effectively_once_http::{Answer, Scope};
/// use http::StatusCode;
///
/// // The caller's IAM principal, as a Function URL with AWS_IAM auth passes it on.
/// let by_principal = |parts: &http::request::Parts| match parts.headers.get("x-caller") {
///     Some(caller) => Ok(Some(caller.to_str().unwrap_or_default().to_owned())),
///     None => Err(Answer::error(StatusCode::FORBIDDEN, "forbidden", "unknown caller")),
/// };
/// # fn is_scope(_: impl Scope) {}
/// # is_scope(by_principal);
/// ```
pub trait Scope: Send + Sync + 'static {
    /// The scope of the request with these parts.
    fn scope(&self, parts: &Parts) -> Result<Option<String>, Answer>;
}

impl<F> Scope for F
where
    F: Fn(&Parts) -> Result<Option<String>, Answer> + Send + Sync + 'static,
{
    fn scope(&self, parts: &Parts) -> Result<Option<String>, Answer> {
        self(parts)
    }
}

/// No scope: every caller shares one key space.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unscoped;

impl Scope for Unscoped {
    fn scope(&self, _parts: &Parts) -> Result<Option<String>, Answer> {
        Ok(None)
    }
}

/// The scope as stored: itself when it is 1 to 64 characters from `[A-Za-z0-9._-]` (no `:`,
/// so `{scope}:{key}` splits one way); else `#` and the 32 hex digits of [`hashed`]. The `#`
/// is outside the plain alphabet, so no plain scope (not even one spelled like [`hashed`]'s
/// `h-` form) is ever stored as another caller's hashed one.
pub fn scope_name(scope: &str) -> String {
    let plain = !scope.is_empty()
        && scope.len() <= MAX_SCOPE
        && scope.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if plain {
        scope.to_owned()
    } else {
        format!("#{}", &hashed(scope)[2..])
    }
}

/// `h-` and the first 32 hex digits (128 bits) of the SHA-256 of `value`: a scope from a
/// value that must not be stored (a token), for a [`Scope`] to return. It is a plain scope,
/// stored as it is; a scope outside the plain alphabet (an ARN) is hashed by [`scope_name`]
/// into a form of its own (`#` and the hex digits), which no plain scope spells.
pub fn hashed(value: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(value.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("h-{hex}")
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(key: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, HeaderValue::from_str(key).unwrap());
        headers
    }

    fn refusal(headers: &HeaderMap, scope: Option<&str>) -> String {
        let answer = IdempotencyKey::from_headers(headers, "api", scope.map(str::to_owned)).unwrap_err();
        assert_eq!((answer.status, answer.error_code().as_deref()), (400, Some(INVALID_KEY)));
        answer.json_body().unwrap()["message"].as_str().unwrap().to_owned()
    }

    #[test]
    fn a_missing_or_invalid_key_is_400_naming_the_header() {
        assert_eq!(refusal(&HeaderMap::new(), None), "Idempotency-Key: the header is required");
        assert!(refusal(&headers("pay 1"), None).starts_with("Idempotency-Key: has the character ' '"));
        assert_eq!(refusal(&headers(""), None), "Idempotency-Key: must have 1 to 200 characters, has 0");
        let mut latin = HeaderMap::new();
        latin.insert(HEADER, HeaderValue::from_bytes(b"caf\xe9").unwrap());
        assert_eq!(refusal(&latin, None), "Idempotency-Key: must be ASCII");
        assert!(IdempotencyKey::from_headers(&headers(&"k".repeat(200)), "api", None).is_ok());
    }

    #[test]
    fn a_scoped_key_is_stored_under_its_scope_and_leaves_room_for_it() {
        let key = IdempotencyKey::from_headers(&headers("pay_1"), "api", Some("shop-a".into())).unwrap();
        assert_eq!((key.key(), key.scope(), key.scoped()), ("pay_1", Some("shop-a"), "shop-a:pay_1"));
        assert_eq!(key.record_key().as_str(), "api#shop-a:pay_1");
        let other = IdempotencyKey::from_headers(&headers("pay_1"), "api", Some("shop-b".into())).unwrap();
        assert_ne!(key.record_key(), other.record_key(), "two callers never share a key");
        let unscoped = IdempotencyKey::from_headers(&headers("pay_1"), "api", None).unwrap();
        assert_eq!(unscoped.record_key().as_str(), "api#pay_1");
        let in_scoped_layer = IdempotencyKey::in_layer(&headers("shop-a:pay_1"), "api", None, true).unwrap();
        assert_eq!(in_scoped_layer.record_key().as_str(), "api#:shop-a:pay_1", "never shop-a's key");
        let long = headers(&"k".repeat(194));
        assert_eq!(refusal(&long, Some("shop-a")), "Idempotency-Key: must have 1 to 193 characters, has 194");
    }

    #[test]
    fn a_plain_scope_spelled_like_a_hashed_one_is_not_that_hashed_scope() {
        let arn = "arn:aws:iam::123456789012:role/shop";
        assert_ne!(scope_name(&hashed(arn)), scope_name(arn));
        assert_eq!(scope_name(&hashed(arn)), hashed(arn), "a plain scope is kept as it is");
    }

    #[test]
    fn a_scope_outside_the_alphabet_is_hashed() {
        assert_eq!(scope_name("producer-1"), "producer-1");
        let arn = scope_name("arn:aws:iam::123456789012:role/shop");
        assert!(arn.starts_with('#') && arn.len() == 33, "{arn}");
        assert_eq!(arn, scope_name("arn:aws:iam::123456789012:role/shop"), "deterministic");
        assert_ne!(arn, scope_name("arn:aws:iam::123456789012:role/other"));
        assert!(scope_name(&"a".repeat(65)).starts_with('#'));
        assert!(scope_name("").starts_with('#'));
    }
}
