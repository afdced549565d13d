//! Keyed outbound calls: a deterministic `Idempotency-Key` for a downstream API that
//! deduplicates on it, so every retry of an event reuses one server-side result.

use crate::key::{Key, KeyError};

/// The header most APIs that deduplicate read (Stripe, Adyen, the IETF draft).
pub const HEADER: &str = "Idempotency-Key";

/// The key for the `kind` of call an event makes downstream: `{kind}-{event_id}`
/// (`invoice-pay_0001`). Deterministic, never random: a retry after a lost response, a
/// redelivery or a DLQ redrive sends the same key, and the downstream returns its first result.
///
/// Two different `(kind, event_id)` pairs never share a key, or one event's call would be
/// answered with another's result. A kind may hold `-` and an event id may too, so each `-` of
/// the kind is written `:` (a character no kind holds): the first `-` of the key then always
/// ends the kind. A kind without `-`, the common case, keeps the plain form, and so the keys it
/// sent before this encoding existed.
///
/// ```
/// use idempotency::outbound::key;
/// assert_eq!(key("invoice", "pay_0001").unwrap(), "invoice-pay_0001");
/// // Once ambiguous, both "invoice-v2-pay_1":
/// assert_eq!(key("invoice-v2", "pay_1").unwrap(), "invoice:v2-pay_1");
/// assert_eq!(key("invoice", "v2-pay_1").unwrap(), "invoice-v2-pay_1");
/// assert_eq!(idempotency::outbound::HEADER, "Idempotency-Key");
/// ```
pub fn key(kind: &str, event_id: &str) -> Result<String, KeyError> {
    // Validated like any key: the kind is `[A-Za-z0-9._-]` (no `:`, which the encoding relies
    // on), the event id `[A-Za-z0-9._:#-]`, so the key is safe in a header.
    Key::new(kind, event_id)?;
    Ok(format!("{}-{event_id}", kind.replace('-', ":")))
}

/// The header to add to the request: `(HEADER, key(kind, event_id))`.
pub fn header(kind: &str, event_id: &str) -> Result<(&'static str, String), KeyError> {
    Ok((HEADER, key(kind, event_id)?))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::key;

    /// The key's inverse: a pair is recovered from its key alone, which is what makes `key`
    /// injective.
    fn decode(key: &str) -> (String, String) {
        let (kind, event_id) = key.split_once('-').expect("a key holds a '-'");
        (kind.replace(':', "-"), event_id.to_owned())
    }

    #[test]
    fn the_reported_collision_is_gone() {
        assert_ne!(key("invoice-v2", "pay_1").unwrap(), key("invoice", "v2-pay_1").unwrap());
        assert_eq!(key("refund", "pay:1#a-b").unwrap(), "refund-pay:1#a-b");
    }

    // Small alphabets rich in the separators, and long ones for the full character sets.
    fn kind() -> impl Strategy<Value = String> {
        prop_oneof!["[a-]{1,5}", "[A-Za-z0-9._-]{1,64}"]
    }

    fn event_id() -> impl Strategy<Value = String> {
        prop_oneof!["[a:#-]{1,5}", "[A-Za-z0-9._:#-]{1,200}"]
    }

    /// Two pairs that read as one string under a plain `{kind}-{event_id}` join: a pair, and the
    /// same join split at another `-` (the collisions a join invites; independent pairs almost
    /// never meet them).
    fn resplit() -> impl Strategy<Value = ((String, String), (String, String))> {
        ("[a-]{1,5}", "[a:#-]{1,5}", any::<prop::sample::Index>()).prop_filter_map("no other split", |(k, id, at)| {
            let joined = format!("{k}-{id}");
            let dashes: Vec<usize> = joined.match_indices('-').map(|(i, _)| i).collect();
            let i = dashes[at.index(dashes.len())];
            let other = (joined[..i].to_owned(), joined[i + 1..].to_owned());
            let valid = crate::Key::new(&other.0, &other.1).is_ok();
            (valid && other != (k.clone(), id.clone())).then_some(((k, id), other))
        })
    }

    proptest! {
        #[test]
        fn different_pairs_never_share_a_key(a in (kind(), event_id()), b in (kind(), event_id())) {
            let (ka, kb) = (key(&a.0, &a.1).unwrap(), key(&b.0, &b.1).unwrap());
            prop_assert_eq!(ka == kb, a == b, "{:?} -> {}, {:?} -> {}", a, ka, b, kb);
        }

        #[test]
        fn pairs_that_join_alike_get_different_keys((a, b) in resplit()) {
            let (ka, kb) = (key(&a.0, &a.1).unwrap(), key(&b.0, &b.1).unwrap());
            prop_assert_ne!(&ka, &kb, "{:?} and {:?}", a, b);
        }

        #[test]
        fn every_key_decodes_to_its_pair(pair in (kind(), event_id())) {
            let k = key(&pair.0, &pair.1).unwrap();
            prop_assert!(k.chars().all(|c| c.is_ascii_alphanumeric() || "._:#-".contains(c)), "{}", k);
            prop_assert_eq!(decode(&k), pair);
        }
    }
}
