//! Idempotency keys: a prefix naming the handler or effect, and the producer's business id.

use std::fmt;

use serde::Serialize;

const MAX_PREFIX: usize = 64;
const MAX_BUSINESS_KEY: usize = 200;
/// What starts the business key of a [`Key::hashed`]: the hash's name, then its hex.
const HASHED_TAG: &str = "sha256:";

/// A validated idempotency key, stored as `{prefix}#{business key}`.
///
/// Key on the producer's business event id, never on the broker's message id: a producer that
/// retries with a new message id, or a replay from a dead-letter queue, must find the same key.
///
/// ```
/// let key = effectively_once::Key::new("payments", "pay_0001").unwrap();
/// assert_eq!(key.as_str(), "payments#pay_0001");
/// assert!(effectively_once::Key::new("payments", "pay 0001").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    id: String,
    prefix_len: usize,
}

impl Key {
    /// Builds a key. The prefix is 1 to 64 characters from `[A-Za-z0-9._-]`; the business key is
    /// 1 to 200 characters from `[A-Za-z0-9._:#-]`.
    pub fn new(prefix: &str, business_key: &str) -> Result<Key, KeyError> {
        // No '#' in the prefix, so the first '#' always ends it and two different
        // (prefix, business key) pairs can never produce the same id.
        check(KeyPart::Prefix, prefix, MAX_PREFIX, prefix_char)?;
        check(KeyPart::BusinessKey, business_key, MAX_BUSINESS_KEY, business_key_char)?;
        Ok(Key { id: format!("{prefix}#{business_key}"), prefix_len: prefix.len() })
    }

    /// A key for an id the business-key alphabet refuses (an S3 object key, an email address, a
    /// base64 id, a name with spaces, a struct of several fields): the business key is
    /// `sha256:` and the SHA-256, in 64 lowercase hex digits, of `id`'s canonical JSON.
    ///
    /// - **What goes in**: the JSON value serde_json makes of `id`, written in its RFC 8785
    ///   canonical form (the JSON Canonicalization Scheme: object keys sorted, no whitespace,
    ///   numbers and string escapes in one spelling), with each integer past 2^53 kept exact as
    ///   the payload hash keeps it ([`HashVersion::V2`](crate::HashVersion::V2)). A string id
    ///   is the JSON string, quotes included: the key of `"alice@example.com"` is the SHA-256 of
    ///   the 19 bytes `"alice@example.com"`, which an operator recomputes with
    ///   `printf '%s' '"alice@example.com"' | sha256sum`.
    /// - **What comes out**: `{prefix}#sha256:{64 hex digits}`, 71 characters of business key,
    ///   well inside the 200 allowed, whatever the size of `id`. The prefix is validated as in
    ///   [`Key::new`]; the id itself is never checked against the alphabet.
    /// - **Deterministic**: the same value gives the same key in every process and build, so a
    ///   redelivery, a producer retry and a DLQ redrive find the first delivery's record. Field
    ///   and map order do not matter (a `HashMap` id is fine), nor `1` versus `1.0`.
    /// - **Collision-resistant**: two values with different canonical JSON share a key only if
    ///   SHA-256 collides; a prefix never shares keys with another prefix. A plain key spelled
    ///   `sha256:` and 64 hex digits ([`Key::new`]) could meet a hashed one under the same
    ///   prefix: keep one kind of key per prefix.
    ///
    /// Changing how `id` serialises changes its key: a renamed field or `#[serde(rename)]`, a
    /// newtype that becomes a struct, a number sent as a string, a field added (even one that
    /// is `None`, unless it is skipped when empty). A message delivered before such a deploy
    /// and again after it is not recognised as a duplicate, so change the key's type only with
    /// a new prefix (or none of its messages in flight). Switching a prefix between
    /// [`Key::new`] and `Key::hashed` changes every key too. serde_json writes a NaN or
    /// infinite float as `null`: key on the id, never on a float.
    ///
    /// The hash hides nothing from whoever can guess the id (an email address is found by
    /// hashing candidates): it makes a key, not a secret.
    ///
    /// ```
    /// use effectively_once::Key;
    ///
    /// let key = Key::hashed("avatars", "uploads/alice smith/me.png").unwrap();
    /// assert_eq!(key.prefix(), "avatars");
    /// assert!(key.business_key().starts_with("sha256:") && key.business_key().len() == 71);
    /// assert_eq!(key, Key::hashed("avatars", "uploads/alice smith/me.png").unwrap());
    ///
    /// // Several fields at once; their order does not matter.
    /// #[derive(serde::Serialize)]
    /// struct Object<'a> { bucket: &'a str, key: &'a str, version: u64 }
    /// let object = Key::hashed("thumbnails", &Object { bucket: "media", key: "a b.png", version: 3 }).unwrap();
    /// assert_eq!(
    ///     object,
    ///     Key::hashed("thumbnails", &serde_json::json!({"version": 3, "key": "a b.png", "bucket": "media"})).unwrap()
    /// );
    /// assert!(Key::hashed("bad prefix", "x").is_err());
    /// ```
    pub fn hashed<T: Serialize + ?Sized>(prefix: &str, id: &T) -> Result<Key, KeyError> {
        check(KeyPart::Prefix, prefix, MAX_PREFIX, prefix_char)?;
        let unserializable = |e: serde_json::Error| KeyError {
            part: KeyPart::BusinessKey,
            kind: KeyErrorKind::NotJson { reason: e.to_string() },
        };
        let value = serde_json::to_value(id).map_err(unserializable)?;
        let canonical = crate::hash::canonical(&value).map_err(unserializable)?;
        let business_key = format!("{HASHED_TAG}{}", crate::hash::hex_sha256(&canonical));
        Ok(Key { id: format!("{prefix}#{business_key}"), prefix_len: prefix.len() })
    }

    /// The stored id, `{prefix}#{business key}`.
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// The prefix naming the handler or effect.
    pub fn prefix(&self) -> &str {
        &self.id[..self.prefix_len]
    }

    /// The business key.
    pub fn business_key(&self) -> &str {
        &self.id[self.prefix_len + 1..]
    }

    /// The `Idempotency-Key` to send downstream for the effect this key records:
    /// [`outbound::key`](crate::outbound::key)`(prefix, business key)`, so the call and its
    /// record are keyed by one value and cannot drift apart (`payments-charge#pay_1` calls with
    /// `payments:charge-pay_1`). It cannot fail: the key was validated when built, by the same
    /// rules.
    ///
    /// ```
    /// let key = effectively_once::Key::new("invoice", "pay_0001").unwrap();
    /// assert_eq!(key.idempotency_key(), "invoice-pay_0001");
    /// assert_eq!(key.idempotency_header(), ("Idempotency-Key", "invoice-pay_0001".to_owned()));
    /// ```
    pub fn idempotency_key(&self) -> String {
        crate::outbound::encode(self.prefix(), self.business_key())
    }

    /// The header to add to the downstream request:
    /// `(`[`outbound::HEADER`](crate::outbound::HEADER)`, self.idempotency_key())`.
    pub fn idempotency_header(&self) -> (&'static str, String) {
        (crate::outbound::HEADER, self.idempotency_key())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

fn prefix_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn business_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '#' | '-')
}

fn check(part: KeyPart, value: &str, max: usize, allowed: impl Fn(char) -> bool) -> Result<(), KeyError> {
    if value.is_empty() {
        return Err(KeyError { part, kind: KeyErrorKind::Empty });
    }
    let len = value.chars().count();
    if len > max {
        return Err(KeyError { part, kind: KeyErrorKind::TooLong { len, max } });
    }
    if let Some((index, ch)) = value.chars().enumerate().find(|&(_, c)| !allowed(c)) {
        return Err(KeyError { part, kind: KeyErrorKind::InvalidChar { ch, index } });
    }
    Ok(())
}

/// Which part of a key failed validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPart {
    /// The prefix naming the handler or effect.
    Prefix,
    /// The business key.
    BusinessKey,
}

/// Why a key is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyErrorKind {
    /// The part is empty.
    Empty,
    /// The part has more characters than allowed.
    TooLong {
        /// Its length in characters.
        len: usize,
        /// The largest length allowed.
        max: usize,
    },
    /// The part holds a character outside its set.
    InvalidChar {
        /// The character.
        ch: char,
        /// Its position, in characters.
        index: usize,
    },
    /// The id given to [`Key::hashed`] has no JSON form (a map whose keys are not strings, a
    /// `Serialize` that fails).
    NotJson {
        /// serde_json's reason.
        reason: String,
    },
}

/// An invalid key: a permanent error, retrying cannot fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    /// The part that failed.
    pub part: KeyPart,
    /// Why it failed.
    pub kind: KeyErrorKind,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = match self.part {
            KeyPart::Prefix => "key prefix",
            KeyPart::BusinessKey => "business key",
        };
        match &self.kind {
            KeyErrorKind::Empty => write!(f, "{part} is empty"),
            KeyErrorKind::TooLong { len, max } => {
                write!(f, "{part} has {len} characters, at most {max} allowed")
            }
            KeyErrorKind::InvalidChar { ch, index } => {
                write!(f, "{part} has the character {ch:?} at position {index}, which is not allowed")
            }
            KeyErrorKind::NotJson { reason } => write!(f, "{part} to hash has no JSON form: {reason}"),
        }
    }
}

impl std::error::Error for KeyError {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn builds_and_splits() {
        let key = Key::new("email", "pay_1#2").unwrap();
        assert_eq!(key.as_str(), "email#pay_1#2");
        assert_eq!(key.prefix(), "email");
        assert_eq!(key.business_key(), "pay_1#2");
    }

    #[test]
    fn rejects_bad_parts_with_the_reason() {
        let err = Key::new("", "x").unwrap_err();
        assert_eq!((err.part, err.kind), (KeyPart::Prefix, KeyErrorKind::Empty));
        let err = Key::new("p#q", "x").unwrap_err();
        assert_eq!(err.kind, KeyErrorKind::InvalidChar { ch: '#', index: 1 });
        let err = Key::new("p", &"a".repeat(201)).unwrap_err();
        assert_eq!(err.kind, KeyErrorKind::TooLong { len: 201, max: 200 });
        let err = Key::new("p", "café").unwrap_err();
        assert_eq!(
            (err.part, err.kind.clone()),
            (KeyPart::BusinessKey, KeyErrorKind::InvalidChar { ch: 'é', index: 3 })
        );
        assert!(Key::new("p", &"a".repeat(200)).is_ok());
        assert_eq!(err.to_string(), "business key has the character 'é' at position 3, which is not allowed");
    }

    /// The form is pinned: a key a record was written under must be found again by every later
    /// build, within the dedup window. `printf '%s' '"alice@example.com"' | sha256sum`.
    #[test]
    fn a_hashed_key_is_sha256_of_the_canonical_json() {
        let email = Key::hashed("receipts", "alice@example.com").unwrap();
        assert_eq!(email.as_str(), "receipts#sha256:b595101af3afe93343acb7181bc1593573485685c06d714e9a9398b0207f8952");
        // An owned String, a &str and the JSON string are one id.
        assert_eq!(Key::hashed("receipts", &"alice@example.com".to_owned()).unwrap(), email);
        assert_eq!(Key::hashed("receipts", &serde_json::json!("alice@example.com")).unwrap(), email);
        // Fields in any order, numbers in any spelling: `{"bucket":"media","key":"a b.png","version":3}`.
        let object = "thumbnails#sha256:91ddb9b13fb5e03a2add0a6595d7c536bd61fe327556268acfa6fd18517d210e";
        for same in [
            r#"{"bucket": "media", "key": "a b.png", "version": 3}"#,
            r#"{"version": 3.0, "key": "a b.png", "bucket": "media"}"#,
            r#"{ "key":"a\u0020b.png","version":3e0,"bucket":"\u006dedia" }"#,
        ] {
            let value: serde_json::Value = serde_json::from_str(same).unwrap();
            assert_eq!(Key::hashed("thumbnails", &value).unwrap().as_str(), object, "{same}");
        }
    }

    #[test]
    fn a_hashed_key_refuses_a_bad_prefix_and_an_id_without_json() {
        let err = Key::hashed("a#b", "x").unwrap_err();
        assert_eq!((err.part, err.kind), (KeyPart::Prefix, KeyErrorKind::InvalidChar { ch: '#', index: 1 }));
        assert_eq!(Key::hashed("", "x").unwrap_err().kind, KeyErrorKind::Empty);
        let err = Key::hashed(&"p".repeat(65), "x").unwrap_err();
        assert_eq!(err.kind, KeyErrorKind::TooLong { len: 65, max: 64 });
        assert!(Key::hashed(&"p".repeat(64), "x").is_ok());
        // JSON object keys are strings: a map keyed by lists has no JSON form.
        let map: std::collections::BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into();
        let err = Key::hashed("p", &map).unwrap_err();
        assert_eq!(err.part, KeyPart::BusinessKey);
        assert!(
            matches!(&err.kind, KeyErrorKind::NotJson { reason } if reason.contains("key must be a string")),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "business key to hash has no JSON form: key must be a string");
        // Any id the alphabet refuses is fine, empty and huge ones too.
        for id in ["", " ", "café", "a/b c", "QUJD+/==", &"x".repeat(100_000)] {
            assert_eq!(Key::hashed("p", id).unwrap().business_key().len(), 71, "{id}");
        }
    }

    /// Two ids a double cannot tell apart (past 2^53) are two keys, as they are two payloads.
    #[test]
    fn hashed_big_integers_stay_apart() {
        let a = Key::hashed("p", &9_007_199_254_740_993_u64).unwrap();
        let b = Key::hashed("p", &9_007_199_254_740_992_u64).unwrap();
        assert_ne!(a, b);
        assert_eq!(Key::hashed("p", &1_u64).unwrap(), Key::hashed("p", &1.0_f64).unwrap());
    }

    /// A big integer's exact digits are hashed as a tagged string, yet a string id spelled as
    /// that tag is another id: two values with different canonical JSON are two keys.
    #[test]
    fn a_hashed_big_integer_and_a_string_spelled_as_its_tag_are_two_keys() {
        let number = Key::hashed("p", &9_007_199_254_740_993_u64).unwrap();
        let string = Key::hashed("p", "\u{0}int:9007199254740993").unwrap();
        assert_ne!(number, string, "a u64 id and a string id got one key");
    }

    proptest! {
        /// Any string id gives a key `Key::new` accepts as it is, of a fixed length, the same
        /// every time.
        #[test]
        fn a_hashed_key_is_a_valid_key_of_fixed_length(p in prefix(), id in any::<String>()) {
            let key = Key::hashed(&p, &id).unwrap();
            prop_assert_eq!(key.prefix(), p.as_str());
            prop_assert_eq!(&Key::new(key.prefix(), key.business_key()).unwrap(), &key);
            prop_assert_eq!(key.business_key().len(), 71);
            let hex = key.business_key().strip_prefix("sha256:").unwrap();
            prop_assert!(hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{}", hex);
            prop_assert_eq!(Key::hashed(&p, id.as_str()).unwrap(), key);
        }

        /// Different ids, and the same id under different prefixes, never share a key.
        #[test]
        fn different_ids_get_different_hashed_keys(
            a in (prefix(), any::<String>()),
            b in (prefix(), any::<String>()),
        ) {
            let (ka, kb) = (Key::hashed(&a.0, &a.1).unwrap(), Key::hashed(&b.0, &b.1).unwrap());
            prop_assert_eq!(ka == kb, a == b, "{:?} -> {}, {:?} -> {}", a, ka, b, kb);
        }

        /// A map's key order, and the spelling of its numbers, do not change the key; a value
        /// does.
        #[test]
        fn a_hashed_key_ignores_order_but_not_values(
            fields in prop::collection::btree_map("[a-z]{1,4}", any::<i32>(), 1..6),
            bump in any::<prop::sample::Index>(),
        ) {
            let forward: serde_json::Map<String, serde_json::Value> =
                fields.iter().map(|(k, v)| (k.clone(), serde_json::json!(v))).collect();
            let backward: std::collections::HashMap<&String, f64> =
                fields.iter().rev().map(|(k, v)| (k, f64::from(*v))).collect();
            let key = Key::hashed("p", &forward).unwrap();
            prop_assert_eq!(&Key::hashed("p", &backward).unwrap(), &key);
            let mut other = fields.clone();
            let name = other.keys().nth(bump.index(other.len())).unwrap().clone();
            other.entry(name).and_modify(|v| *v = v.wrapping_add(1));
            prop_assert_ne!(Key::hashed("p", &other).unwrap(), key);
        }
    }

    // Small alphabets rich in the separators, and the full character sets at full length.
    fn prefix() -> impl Strategy<Value = String> {
        prop_oneof!["[a-]{1,5}", "[A-Za-z0-9._-]{1,64}"]
    }

    fn business_key() -> impl Strategy<Value = String> {
        prop_oneof!["[a:#-]{1,5}", "[A-Za-z0-9._:#-]{1,200}"]
    }

    proptest! {
        /// The outbound key of a record's key is the one `outbound::key` gives its parts: keys
        /// sent before `Key::idempotency_key` existed are unchanged.
        #[test]
        fn the_outbound_key_is_outbound_key_of_the_parts(p in prefix(), b in business_key()) {
            let key = Key::new(&p, &b).unwrap();
            let expected = crate::outbound::key(key.prefix(), key.business_key()).unwrap();
            prop_assert_eq!(&key.idempotency_key(), &expected);
            prop_assert_eq!(key.idempotency_header(), (crate::outbound::HEADER, expected));
            // And, within the length providers take, the plain form keys were always sent in.
            let plain = format!("{}-{}", p.replace('-', ":"), b);
            if plain.len() <= crate::outbound::MAX_LEN {
                prop_assert_eq!(key.idempotency_key(), plain);
            }
        }
    }
}
