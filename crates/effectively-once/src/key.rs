//! Idempotency keys: a prefix naming the handler or effect, and the producer's business id.

use std::fmt;

const MAX_PREFIX: usize = 64;
const MAX_BUSINESS_KEY: usize = 200;

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
        check(KeyPart::Prefix, prefix, MAX_PREFIX, |c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))?;
        check(KeyPart::BusinessKey, business_key, MAX_BUSINESS_KEY, |c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '#' | '-')
        })?;
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
