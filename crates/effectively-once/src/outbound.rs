//! Keyed outbound calls: a deterministic `Idempotency-Key` for a downstream API that
//! deduplicates on it, so every retry of an event reuses one server-side result, and which of
//! the provider's answers are the call's outcome ([`disposition`]).
//!
//! # A keyed call
//!
//! Key the call with the same [`Key`] as its record ([`Key::idempotency_key`]), so the two
//! cannot drift apart; store the provider's answer as the record's response when it is an
//! outcome ([`StoreOrRetry::Store`]), and fail the attempt when it is not
//! ([`StoreOrRetry::Retry`]), which releases the record so the next delivery calls again, with
//! the same key.
//!
//! ```
//! use effectively_once::outbound::{disposition, StoreOrRetry};
//! use effectively_once::{Config, Idempotency, InMemoryStore, Key, Outcome};
//!
//! #[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
//! struct Answer { status: u16, body: String }
//!
//! /// The provider (an HTTP client in real life): a card declined is a business answer.
//! async fn charge(idempotency_key: &str) -> (u16, Option<String>, String) {
//!     assert_eq!(idempotency_key, "charge-pay_0001");
//!     (402, None, r#"{"error":"card_declined"}"#.to_owned())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let idempotency = Idempotency::new(InMemoryStore::new(), Config::default());
//! let key = Key::new("charge", "pay_0001")?;
//! let payload = serde_json::json!({"amount_cents": 1250, "currency": "USD"});
//! let call = || async {
//!     let (status, retry_after, body) = charge(&key.idempotency_key()).await;
//!     match disposition(status, retry_after.as_deref()) {
//!         StoreOrRetry::Store => Ok(Answer { status, body }),
//!         // Released: the message is retried (after `after`, where the trigger can delay it).
//!         StoreOrRetry::Retry { after } => {
//!             Err(std::io::Error::other(format!("provider answered {status}; retry after {after:?}")))
//!         }
//!     }
//! };
//! let first = idempotency.run(&key, &payload, call).await?;
//! assert_eq!(first.response().status, 402);
//! // A duplicate is answered from the record: the provider is not called again.
//! let again = idempotency.run(&key, &payload, || async { Ok::<Answer, std::io::Error>(unreachable!()) }).await?;
//! assert!(matches!(again, Outcome::Replayed(Answer { status: 402, .. })));
//! # Ok(())
//! # }
//! ```
//!
//! No answer at all (a timeout, a reset connection) is a retry too: the call may have landed,
//! and the same key makes the next call return its result instead of acting twice.
//!
//! # Which answers are stored, which are retried
//!
//! An answer is stored when it is the provider's verdict on *this request*: it would give the
//! same one again, so a duplicate must get it without asking. An answer is retried when it
//! says nothing about the request yet: the provider was busy, overloaded, failing, or the
//! deployment is set up wrong. [`disposition`] encodes the usual reading of the status codes:
//!
//! | status | disposition | why |
//! |---|---|---|
//! | 2xx | store | done |
//! | 400, 402, 404, 422 and other 4xx | store | a business answer (invalid, card declined, no such customer); asking again changes nothing |
//! | 408, 425 | retry | the request was not processed (timed out, sent too early) |
//! | 409 | retry | a request with this key is still in flight at the provider (Stripe's answer); it settles, then the same key returns its result |
//! | 423, 429 | retry | locked, rate limited: honour `Retry-After` |
//! | 401, 403, 407 | retry | credentials or permissions: an operator fixes them; no verdict on the event, so it waits in its queue or DLQ instead of being answered "forbidden" for the whole window |
//! | 5xx | retry | the provider failed; honour `Retry-After` (503) |
//! | 1xx, 3xx, anything else | retry | not an answer this client expects (an unfollowed redirect is a configuration error) |
//!
//! Providers differ; where one means something else by a code (a 403 that is a business refusal,
//! a 409 that is a final conflict), match that status before calling [`disposition`].
//!
//! A stored 4xx answers every duplicate for the whole dedup window, including a 400 that a bug
//! in the request caused. Once the bug is fixed, redriven events still get the stored 400: give
//! the effect a new key prefix (`charge-v2`: new records, new provider keys) or delete their
//! records.
//!
//! # When the provider forgets keys before the dedup window ends
//!
//! Two guards answer a duplicate: the record, kept for the dedup window
//! ([`DEFAULT_DEDUP_WINDOW`](crate::DEFAULT_DEDUP_WINDOW), 14 days, SQS's longest retention),
//! and the provider's key, which it keeps for less (Stripe: at least 24 hours). A duplicate that
//! finds the record completed is answered from it and never reaches the provider, so while the
//! record lasts the provider's retention does not matter. That is why the record is claimed
//! before the call and completed with the call's answer: from then on the record, not the
//! provider, answers.
//!
//! The provider's key covers the gap the record cannot: the call went out and its answer was
//! not recorded (a crash or a lease that ended between the call and the completion). The
//! record stays in progress; once its lease ends the next delivery takes it over and calls
//! again with the same key, and the provider returns its first result, *if it still keeps the
//! key*. Redeliveries come after the visibility timeout, minutes, well inside 24 hours; a
//! message parked in the DLQ and redriven days later is not. So:
//!
//! - A takeover later than the provider's retention is a new call. A call that must not repeat
//!   (a charge) uses [`Idempotency::begin`](crate::Idempotency::begin), and when
//!   [`Attempt::took_over`](crate::Attempt::took_over) says the key was taken over, looks the
//!   earlier call up at the provider first (by a reference it sent with it, such as the event id
//!   in the charge's metadata) instead of calling blindly, or records the outcome as ambiguous
//!   for a person to settle.
//! - Some providers (Stripe) keep the result of any request that started executing, a 500
//!   included, and answer the same key with it until they forget it: a retried 5xx comes back
//!   the same for up to 24 hours, then the call is made anew. Before redriving such events from
//!   the DLQ, check whether the first call took effect (a 500 can hide a success).
//! - A dedup window no longer than the provider's retention buys nothing: it only matters when
//!   the record is lost (a table restored from an older backup, an item deleted by hand), and
//!   then the provider's key is the only guard, for as long as it keeps it. Size the window to
//!   redelivery (queue retention plus DLQ redrive), as the default does.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::key::{Key, KeyError};

/// The header most APIs that deduplicate read (Stripe, Adyen, the IETF draft).
pub const HEADER: &str = "Idempotency-Key";

/// The longest key [`key`] returns: Stripe takes idempotency keys "up to 255 characters long"
/// (<https://docs.stripe.com/idempotency>), while a 64-character kind and a 200-character business
/// key, both valid, join to 265.
pub const MAX_LEN: usize = 255;

/// What marks a shortened key: a character no kind or business key holds, so a shortened key never
/// equals a plain one.
const DIGEST_MARK: char = '~';

/// The key for the `kind` of call an event makes downstream: `{kind}-{business_key}`
/// (`invoice-pay_0001`). Deterministic, never random: a retry after a lost response, a
/// redelivery or a DLQ redrive sends the same key, and the downstream returns its first result.
///
/// Two different `(kind, business_key)` pairs never share a key, or one event's call would be
/// answered with another's result. A kind may hold `-` and a business key may too, so each `-` of
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
pub fn key(kind: &str, business_key: &str) -> Result<String, KeyError> {
    // Validated like any key: the kind is `[A-Za-z0-9._-]` (no `:`, which the encoding relies
    // on), the business key `[A-Za-z0-9._:#-]`, so the key is safe in a header.
    Ok(Key::new(kind, business_key)?.idempotency_key())
}

/// [`key`] for parts already validated (a [`Key`]'s): the encoding alone, so it cannot fail.
pub(crate) fn encode(kind: &str, business_key: &str) -> String {
    let plain = format!("{}-{business_key}", kind.replace('-', ":"));
    if plain.len() <= MAX_LEN {
        return plain;
    }
    let digest: String = Sha256::digest(plain.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    // ASCII only (validated by `Key::new`), so the byte cut is a character cut.
    let keep = MAX_LEN - 1 - digest.len();
    format!("{}{DIGEST_MARK}{digest}", &plain[..keep])
}

/// The header to add to the request: `(HEADER, key(kind, business_key))`.
pub fn header(kind: &str, business_key: &str) -> Result<(&'static str, String), KeyError> {
    Ok((HEADER, key(kind, business_key)?))
}

/// What to do with a provider's answer to a keyed call (see the
/// [table](self#which-answers-are-stored-which-are-retried)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOrRetry {
    /// The answer is the call's outcome: store it as the record's response (complete the
    /// attempt), so every duplicate gets it without calling again. Success and business
    /// refusals alike.
    Store,
    /// Not an outcome yet: fail the attempt (which releases its record) and call again later
    /// with the same key.
    Retry {
        /// How long the provider asked to wait (`Retry-After` in seconds), if it said.
        after: Option<Duration>,
    },
}

impl StoreOrRetry {
    /// Whether the answer is stored as the outcome.
    pub fn is_store(self) -> bool {
        self == StoreOrRetry::Store
    }
}

/// [`disposition`] without a `Retry-After` header.
///
/// ```
/// use effectively_once::outbound::{disposition_of_status, StoreOrRetry};
/// assert_eq!(disposition_of_status(402), StoreOrRetry::Store);
/// assert_eq!(disposition_of_status(429), StoreOrRetry::Retry { after: None });
/// ```
pub fn disposition_of_status(status: u16) -> StoreOrRetry {
    disposition(status, None)
}

/// Whether an HTTP answer with `status` is the call's outcome or to be retried (see the
/// [table](self#which-answers-are-stored-which-are-retried)), with the wait the provider asked
/// for in `retry_after`, the `Retry-After` header's value. Its delay-seconds form is read (`120`);
/// the HTTP-date form, rare from APIs, gives no wait (`after: None`, the caller's own backoff).
///
/// ```
/// use std::time::Duration;
/// use effectively_once::outbound::{disposition, StoreOrRetry};
/// assert_eq!(disposition(201, None), StoreOrRetry::Store);
/// assert_eq!(disposition(422, None), StoreOrRetry::Store);
/// assert_eq!(disposition(503, Some("30")), StoreOrRetry::Retry { after: Some(Duration::from_secs(30)) });
/// ```
pub fn disposition(status: u16, retry_after: Option<&str>) -> StoreOrRetry {
    let retry = || StoreOrRetry::Retry { after: retry_after.and_then(delay_seconds) };
    match status {
        200..=299 => StoreOrRetry::Store,
        // Not processed yet (408 timeout, 425 too early), in flight under this key (409),
        // locked or rate limited (423, 429).
        408 | 409 | 423 | 425 | 429 => retry(),
        // Credentials and permissions: the operator's to fix, no verdict on the event.
        401 | 403 | 407 => retry(),
        400..=499 => StoreOrRetry::Store,
        _ => retry(),
    }
}

/// `Retry-After`'s delay-seconds form (RFC 9110, 10.2.3): one or more digits.
fn delay_seconds(value: &str) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().map(Duration::from_secs)
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
    fn every_status_class_has_its_disposition() {
        use super::{disposition_of_status, StoreOrRetry};
        let retry = StoreOrRetry::Retry { after: None };
        for status in [200, 201, 202, 204, 299] {
            assert_eq!(disposition_of_status(status), StoreOrRetry::Store, "{status}");
        }
        // Business answers: bad request, payment required, not found, gone, unprocessable.
        for status in [400, 402, 404, 405, 410, 412, 413, 415, 422, 451, 499] {
            assert_eq!(disposition_of_status(status), StoreOrRetry::Store, "{status}");
        }
        for status in [408, 409, 423, 425, 429, 401, 403, 407] {
            assert_eq!(disposition_of_status(status), retry, "{status}");
        }
        for status in [500, 502, 503, 504, 599] {
            assert_eq!(disposition_of_status(status), retry, "{status}");
        }
        for status in [0, 100, 101, 301, 302, 304, 600, 999] {
            assert_eq!(disposition_of_status(status), retry, "{status}");
        }
        assert!(disposition_of_status(422).is_store() && !disposition_of_status(409).is_store());
    }

    #[test]
    fn retry_after_is_honoured_in_seconds_only_where_retried() {
        use std::time::Duration;

        use super::{disposition, StoreOrRetry};
        let after = |secs| StoreOrRetry::Retry { after: Some(Duration::from_secs(secs)) };
        assert_eq!(disposition(429, Some("120")), after(120));
        assert_eq!(disposition(503, Some(" 5 ")), after(5));
        assert_eq!(disposition(409, Some("0")), after(0));
        // The HTTP-date form and garbage give no wait; a stored answer ignores the header.
        let none = StoreOrRetry::Retry { after: None };
        assert_eq!(disposition(503, Some("Wed, 21 Oct 2015 07:28:00 GMT")), none);
        assert_eq!(disposition(429, Some("-1")), none);
        assert_eq!(disposition(429, Some("")), none);
        assert_eq!(disposition(429, Some("99999999999999999999999")), none);
        assert_eq!(disposition(200, Some("30")), StoreOrRetry::Store);
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
