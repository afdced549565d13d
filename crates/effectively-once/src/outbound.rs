//! Keyed outbound calls: a deterministic `Idempotency-Key` for a downstream API that
//! deduplicates on it, so every retry of an event reuses one server-side result.

use sha2::{Digest, Sha256};

use crate::key::{Key, KeyError};

/// The header most APIs that deduplicate read (Stripe, Adyen, the IETF draft).
pub const HEADER: &str = "Idempotency-Key";

/// The longest key [`key`] returns: Stripe takes idempotency keys "up to 255 characters long"
/// (<https://docs.stripe.com/idempotency>), while a 64-character kind and a 200-character event
/// id, both valid, join to 265.
pub const MAX_LEN: usize = 255;

/// What marks a shortened key: a character no kind or event id holds, so a shortened key never
/// equals a plain one.
const DIGEST_MARK: char = '~';

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
/// A key longer than [`MAX_LEN`] keeps its first 190 characters and ends in `~` and the
/// SHA-256 of the whole key in hex (255 in all): still deterministic, and two pairs share it
/// only if SHA-256 collides. `~` appears in no plain key, so a shortened key never meets a plain
/// one; keys of [`MAX_LEN`] or fewer characters, every key sent before, are unchanged.
///
/// ```
/// use effectively_once::outbound::key;
/// assert_eq!(key("invoice", "pay_0001").unwrap(), "invoice-pay_0001");
/// // Once ambiguous, both "invoice-v2-pay_1":
/// assert_eq!(key("invoice-v2", "pay_1").unwrap(), "invoice:v2-pay_1");
/// assert_eq!(key("invoice", "v2-pay_1").unwrap(), "invoice-v2-pay_1");
/// assert_eq!(effectively_once::outbound::HEADER, "Idempotency-Key");
/// ```
pub fn key(kind: &str, event_id: &str) -> Result<String, KeyError> {
    // Validated like any key: the kind is `[A-Za-z0-9._-]` (no `:`, which the encoding relies
    // on), the event id `[A-Za-z0-9._:#-]`, so the key is safe in a header.
    Key::new(kind, event_id)?;
    let plain = format!("{}-{event_id}", kind.replace('-', ":"));
    if plain.len() <= MAX_LEN {
        return Ok(plain);
    }
    let digest: String = Sha256::digest(plain.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    // ASCII only (validated above), so the byte cut is a character cut.
    let keep = MAX_LEN - 1 - digest.len();
    Ok(format!("{}{DIGEST_MARK}{digest}", &plain[..keep]))
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
    fn keys_past_255_characters_are_shortened_deterministically() {
        let (kind, id) = ("k".repeat(64), "p".repeat(200));
        let long = key(&kind, &id).unwrap();
        assert_eq!(long.len(), super::MAX_LEN);
        assert_eq!(long, key(&kind, &id).unwrap(), "deterministic");
        assert!(long.starts_with(&format!("{kind}-ppp")), "{long}");
        // Two pairs that agree on the kept prefix still get different keys.
        let other = format!("{}q", "p".repeat(199));
        assert_ne!(long, key(&kind, &other).unwrap());
        // 255 characters exactly: unchanged.
        let edge = key(&"k".repeat(54), &"p".repeat(200)).unwrap();
        assert_eq!(edge, format!("{}-{}", "k".repeat(54), "p".repeat(200)));
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
            prop_assert!(k.len() <= super::MAX_LEN, "{} characters", k.len());
            prop_assert!(k.chars().all(|c| c.is_ascii_alphanumeric() || "._:#-~".contains(c)), "{}", k);
            match k.split_once('~') {
                // Shortened: the kept prefix is the plain key's.
                Some((prefix, digest)) => {
                    let plain = format!("{}-{}", pair.0.replace('-', ":"), pair.1);
                    prop_assert!(plain.len() > super::MAX_LEN && plain.starts_with(prefix), "{}", k);
                    prop_assert_eq!(digest.len(), 64);
                }
                None => prop_assert_eq!(decode(&k), pair),
            }
        }
    }
}
