//! `amount_cents` is an integer by contract; a number written as a float is judged on its text, so
//! a decimal that is not an integer but rounds to one in a double is refused, not posted rounded.

use payments::PaymentEvent;

fn parse(amount: &str) -> Result<i64, String> {
    let body = format!(r#"{{"event_id": "e", "account_id": "a", "amount_cents": {amount}, "currency": "USD"}}"#);
    PaymentEvent::parse(&body).map(|e| e.amount_cents).map_err(|e| e.to_string())
}

/// Each of these is a non-integer number of cents: none may be posted.
#[test]
fn a_non_integral_amount_is_refused_however_close_to_an_integer() {
    let accepted: Vec<(&str, i64)> = [
        "1250.0000000000001",
        "1250.00000000000001",
        "999999999999.99999999",
        "-999999999999.9999999",
        "1.0000000000000001",
    ]
    .into_iter()
    .filter_map(|amount| parse(amount).ok().map(|cents| (amount, cents)))
    .collect();
    assert!(accepted.is_empty(), "not integers, yet posted as: {accepted:?}");
}

/// What holds: integral values however written, and non-integers a double can tell apart.
#[test]
fn integral_amounts_however_written_and_clear_fractions() {
    for amount in ["1250", "1250.0", "1.25e3", "125000e-2"] {
        assert_eq!(parse(amount), Ok(1250), "{amount}");
    }
    for amount in ["1250.5", "1e-2", "-0.0", "0e5", "1e-400", "5e-324", "1000000000000.5", "1e12.0"] {
        assert!(parse(amount).is_err(), "{amount}");
    }
    assert_eq!(parse("1e12"), Ok(1_000_000_000_000));
    assert_eq!(parse("-1e12"), Ok(-1_000_000_000_000));
    assert!(parse("1.0000000000001e12").is_err(), "1e12 + 0.1 is over the maximum");
}

/// Exponents far out of range, zero written oddly, and a body that names the amount twice.
#[test]
fn odd_texts_are_refused_or_exact() {
    assert_eq!(parse("0.5e1"), Ok(5));
    assert_eq!(parse("12.50e2"), Ok(1250));
    for amount in ["-0e0", "0.000e10", "1e99999999999999999999", "1e-99999999999999999999", "1e-9223372036854775808"] {
        assert!(parse(amount).is_err(), "{amount}");
    }
    let twice =
        r#"{"event_id": "e", "account_id": "a", "amount_cents": 1.5, "amount_cents": 1250.0, "currency": "USD"}"#;
    assert!(PaymentEvent::parse(twice).is_err(), "which amount was meant is not ours to guess");
}
