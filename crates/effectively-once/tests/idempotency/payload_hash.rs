//! RFC 8785 writes every number as an IEEE double, so two payloads whose integers differ beyond
//! 2^53 would canonicalise the same. A `u64` field (an order id, a nanosecond timestamp) sent
//! again under the same key with another value must be key reuse, not a duplicate whose second
//! effect is dropped: the v2 hash keeps such integers' exact digits. An integer a double holds
//! exactly (1e16) stays RFC 8785's number however it is written.

use effectively_once::{Config, ErrorKind, Idempotency, InMemoryStore, Key, Outcome, RunError};
use serde::Serialize;

#[derive(Serialize)]
struct Transfer {
    amount_msat: u64,
}

#[tokio::test]
async fn integers_beyond_2_pow_53_are_different_payloads() {
    let idem = Idempotency::new(InMemoryStore::new(), Config::default());
    let key = Key::new("transfers", "t_1").unwrap();
    let first = Transfer { amount_msat: 9_007_199_254_740_993 };
    let other = Transfer { amount_msat: 9_007_199_254_740_992 };
    let ran = idem.run(&key, &first, || async { Ok::<_, ()>(first.amount_msat) }).await.unwrap();
    assert_eq!(ran, Outcome::Fresh(9_007_199_254_740_993));
    let again = idem.run(&key, &other, || async { Ok::<_, ()>(other.amount_msat) }).await;
    assert!(
        matches!(&again, Err(RunError::Idempotency(e)) if e.kind() == ErrorKind::KeyReused),
        "another amount under the same key must be key reuse, got {again:?}"
    );
}

/// The same through the hash alone (and what version 1 did with it).
#[test]
fn the_hashes_of_two_large_integers_differ() {
    let c = Config::default();
    let a = c.payload_hash(&serde_json::json!({"ns": 1_732_960_000_000_000_001_u64})).unwrap();
    let b = c.payload_hash(&serde_json::json!({"ns": 1_732_960_000_000_000_002_u64})).unwrap();
    assert_ne!(a.v1(), b.v1(), "version 1 told them apart");
    assert_ne!(a.as_str(), b.as_str(), "version 2 must too (or refuse the payload)");
}

/// What held: odd numbers hash without a panic, and numbers a double tells apart stay apart.
#[test]
fn odd_numbers_hash_without_panicking() {
    let c = Config::default();
    let hash = |text: &str| c.payload_hash(&serde_json::from_str::<serde_json::Value>(text).unwrap()).unwrap();
    for text in [
        "5e-324",
        "-5e-324",
        "1.7976931348623157e308",
        "-0.0",
        "1e-7",
        "18446744073709551615",
        "-9223372036854775808",
        "1e-400",
        "123456789012345678901234567890",
    ] {
        let h = hash(text);
        assert!(h.matches(h.as_str()) && h.matches(h.v1()), "{text}");
    }
    assert_eq!(hash("-0.0").as_str(), hash("0").as_str());
    assert_ne!(hash("9007199254740991").as_str(), hash("9007199254740990").as_str());
    assert_ne!(hash("0.1").as_str(), hash("0.10000000000000002").as_str());
}

/// A big integer sent again in a re-serialised body (keys reordered, small numbers as floats) is
/// still the same payload; a double past 2^53 written as a float stays RFC 8785's double.
#[test]
fn a_big_integer_in_a_re_serialised_body_is_the_same_payload() {
    let c = Config::default();
    let hash = |text: &str| c.payload_hash(&serde_json::from_str::<serde_json::Value>(text).unwrap()).unwrap();
    let first = hash(r#"{"id": 9007199254740993, "n": [1, {"x": -9007199254740995}], "amount": 1250}"#);
    let again = hash(r#"{"amount": 1250.0, "n": [1e0, {"x": -9007199254740995}], "id": 9007199254740993}"#);
    assert_eq!(first.as_str(), again.as_str());
    assert!(first.matches(again.as_str()));
    assert_ne!(
        first.as_str(),
        hash(r#"{"id": 9007199254740993, "n": [1, {"x": -9007199254740994}], "amount": 1250}"#).as_str()
    );
    assert_eq!(hash("9007199254740993.0").as_str(), hash("9007199254740992").as_str(), "a float is a double");
}

/// An integer past 2^53 that a double holds exactly (1e16) is RFC 8785's number however it is
/// written, so a re-serialised duplicate is not key reuse.
#[test]
fn an_exact_big_integer_and_its_float_spelling_hash_the_same() {
    let config = Config::default();
    let as_integer: serde_json::Value = serde_json::from_str(r#"{"amount": 10000000000000000}"#).unwrap();
    let as_float: serde_json::Value = serde_json::from_str(r#"{"amount": 1e16}"#).unwrap();
    let a = config.payload_hash(&as_integer).unwrap();
    let b = config.payload_hash(&as_float).unwrap();
    assert!(a.matches(b.as_str()), "{a} vs {b}");
}
