//! Review finding (hostile review of 1e29420..HEAD): the v2 payload hash promises that `1`, `1.0`
//! and `1e0` hash the same, but an integer beyond 2^53 that a double holds exactly (here 1e16)
//! is tagged as exact digits only when written as an integer. The same payload re-serialised
//! with the number in exponent form hashes differently, so a redelivery becomes key reuse
//! (a permanent verdict: the event is given up, not applied).

use effectively_once::Config;

#[test]
#[ignore = "finding: v2 hash of an exactly representable integer > 2^53 differs from its float spelling (1e16 vs 10000000000000000) -> KeyReused on a re-serialised duplicate"]
fn an_exact_big_integer_and_its_float_spelling_hash_the_same() {
    let config = Config::default();
    let as_integer: serde_json::Value = serde_json::from_str(r#"{"amount": 10000000000000000}"#).unwrap();
    let as_float: serde_json::Value = serde_json::from_str(r#"{"amount": 1e16}"#).unwrap();
    let a = config.payload_hash(&as_integer).unwrap();
    let b = config.payload_hash(&as_float).unwrap();
    assert!(a.matches(b.as_str()), "{a} vs {b}");
}
