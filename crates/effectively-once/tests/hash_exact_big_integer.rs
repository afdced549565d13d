//! An integer past 2^53 that a double holds exactly (1e16) is RFC 8785's number however it is
//! written, so a re-serialised duplicate is not key reuse.

use effectively_once::Config;

#[test]
fn an_exact_big_integer_and_its_float_spelling_hash_the_same() {
    let config = Config::default();
    let as_integer: serde_json::Value = serde_json::from_str(r#"{"amount": 10000000000000000}"#).unwrap();
    let as_float: serde_json::Value = serde_json::from_str(r#"{"amount": 1e16}"#).unwrap();
    let a = config.payload_hash(&as_integer).unwrap();
    let b = config.payload_hash(&as_float).unwrap();
    assert!(a.matches(b.as_str()), "{a} vs {b}");
}
