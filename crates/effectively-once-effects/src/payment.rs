//! The payment event contract: parsed and validated field by field, with errors naming the field.

use std::fmt;

use effectively_once_redact::redact_email;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Largest absolute amount, in cents.
pub const MAX_AMOUNT_CENTS: i64 = 1_000_000_000_000;

/// A validated payment event, the SQS message body. Unknown fields are ignored.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentEvent {
    /// The producer's business id: the idempotency key.
    pub event_id: String,
    /// The account posted to.
    pub account_id: String,
    /// Positive credits the account, negative debits it; never zero.
    pub amount_cents: i64,
    /// Three upper-case letters.
    pub currency: String,
    /// Where the receipt goes, if anywhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt_email: Option<String>,
}

// By hand, so that `{:?}` in a log line, an error or a panic message never shows the address.
impl fmt::Debug for PaymentEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaymentEvent")
            .field("event_id", &self.event_id)
            .field("account_id", &self.account_id)
            .field("amount_cents", &self.amount_cents)
            .field("currency", &self.currency)
            .field("receipt_email", &self.receipt_email.as_deref().map(redact_email))
            .finish()
    }
}

/// Why a body is not a valid payment event: a permanent error for that message alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPayment {
    /// The field at fault, or `None` when the body itself is not a JSON object.
    pub field: Option<&'static str>,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for InvalidPayment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field {
            Some(field) => write!(f, "invalid payment event: {field}: {}", self.problem),
            None => write!(f, "invalid payment event: {}", self.problem),
        }
    }
}

impl std::error::Error for InvalidPayment {}

fn invalid(field: &'static str, problem: impl Into<String>) -> InvalidPayment {
    InvalidPayment { field: Some(field), problem: problem.into() }
}

fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '#' | '-')
}

impl PaymentEvent {
    /// Parses and validates a message body.
    ///
    /// ```
    /// let body = r#"{"event_id": "pay_0001", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}"#;
    /// let event = effectively_once_effects::PaymentEvent::parse(body).unwrap();
    /// assert_eq!(event.amount_cents, 1250);
    ///
    /// let err = effectively_once_effects::PaymentEvent::parse(r#"{"event_id": "p", "account_id": "a", "amount_cents": 0, "currency": "USD"}"#).unwrap_err();
    /// assert_eq!(err.field, Some("amount_cents"));
    /// ```
    pub fn parse(body: &str) -> Result<PaymentEvent, InvalidPayment> {
        let value: Value = serde_json::from_str(body)
            .map_err(|e| InvalidPayment { field: None, problem: format!("body is not JSON ({e})") })?;
        Self::from_value(&value)
    }

    /// Validates an already parsed body.
    pub fn from_value(value: &Value) -> Result<PaymentEvent, InvalidPayment> {
        let Value::Object(map) = value else {
            return Err(InvalidPayment { field: None, problem: "body is not a JSON object".into() });
        };
        let id = |field: &'static str| -> Result<String, InvalidPayment> {
            let s = match map.get(field) {
                None | Some(Value::Null) => return Err(invalid(field, "is required")),
                Some(Value::String(s)) => s,
                Some(_) => return Err(invalid(field, "must be a string")),
            };
            let len = s.chars().count();
            if len == 0 || len > 200 {
                return Err(invalid(field, format!("must have 1 to 200 characters, has {len}")));
            }
            if let Some(c) = s.chars().find(|&c| !id_char(c)) {
                return Err(invalid(field, format!("has the character {c:?}; allowed: A-Z a-z 0-9 . _ : # -")));
            }
            Ok(s.clone())
        };
        let event_id = id("event_id")?;
        let account_id = id("account_id")?;
        let amount_cents = match map.get("amount_cents") {
            None | Some(Value::Null) => return Err(invalid("amount_cents", "is required")),
            Some(Value::Number(n)) => {
                integral(n).ok_or_else(|| invalid("amount_cents", format!("must be an integer, is {n}")))?
            }
            Some(_) => return Err(invalid("amount_cents", "must be an integer")),
        };
        if amount_cents == 0 {
            return Err(invalid("amount_cents", "must not be zero"));
        }
        if amount_cents.unsigned_abs() > MAX_AMOUNT_CENTS as u64 {
            return Err(invalid("amount_cents", "absolute value must be at most 10^12"));
        }
        let currency = match map.get("currency") {
            None | Some(Value::Null) => return Err(invalid("currency", "is required")),
            Some(Value::String(s)) if s.len() == 3 && s.chars().all(|c| c.is_ascii_uppercase()) => s.clone(),
            Some(_) => return Err(invalid("currency", "must be three upper-case letters")),
        };
        let receipt_email = match map.get("receipt_email") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if valid_email(s) => Some(s.clone()),
            Some(_) => return Err(invalid("receipt_email", "must be an email address")),
        };
        Ok(PaymentEvent { event_id, account_id, amount_cents, currency, receipt_email })
    }
}

/// A number with an integral value: `1250`, and `1250.0` or `1.25e3` as a producer that
/// re-serialises numbers sends it (JSON has one number type; RFC 8785, which the payload hash
/// follows, writes all three as `1250`). The range is checked after.
fn integral(n: &serde_json::Number) -> Option<i64> {
    n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < i64::MAX as f64).map(|f| f as i64))
}

/// A plausible address: one `@`, a local part, a dotted domain, no spaces, at most 254 bytes.
fn valid_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else { return false };
    s.len() <= 254
        && !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(body: &str) -> Option<&'static str> {
        PaymentEvent::parse(body).unwrap_err().field
    }

    #[test]
    fn accepts_the_contract_example_and_ignores_unknown_fields() {
        let e = PaymentEvent::parse(
            r#"{"event_id": "pay_0001", "account_id": "acct_42", "amount_cents": -1250,
                "currency": "USD", "receipt_email": "alice@example.com", "trace": {"x": 1}}"#,
        )
        .unwrap();
        assert_eq!(e.amount_cents, -1250);
        assert_eq!(e.receipt_email.as_deref(), Some("alice@example.com"));
    }

    #[test]
    fn names_the_bad_field() {
        let ok = r#""account_id": "a", "amount_cents": 5, "currency": "USD""#;
        assert_eq!(field_of(&format!(r#"{{{ok}}}"#)), Some("event_id"));
        assert_eq!(field_of(&format!(r#"{{"event_id": "bad id", {ok}}}"#)), Some("event_id"));
        assert_eq!(field_of(&format!(r#"{{"event_id": "{}", {ok}}}"#, "x".repeat(201))), Some("event_id"));
        assert_eq!(
            field_of(r#"{"event_id": "e", "account_id": 7, "amount_cents": 5, "currency": "USD"}"#),
            Some("account_id")
        );
        for amount in ["0", "0.0", "1.5", "1e-2", "\"5\"", "1000000000001", "-1000000000001", "1e13", "1e300"] {
            let body =
                format!(r#"{{"event_id": "e", "account_id": "a", "amount_cents": {amount}, "currency": "USD"}}"#);
            assert_eq!(field_of(&body), Some("amount_cents"), "{amount}");
        }
        for currency in ["\"usd\"", "\"US\"", "\"USDX\"", "null", "1"] {
            let body = format!(r#"{{"event_id": "e", "account_id": "a", "amount_cents": 5, "currency": {currency}}}"#);
            assert_eq!(field_of(&body), Some("currency"), "{currency}");
        }
        let body =
            r#"{"event_id": "e", "account_id": "a", "amount_cents": 5, "currency": "USD", "receipt_email": "nope"}"#;
        assert_eq!(field_of(body), Some("receipt_email"));
        assert_eq!(field_of("not json"), None);
        assert_eq!(field_of("[1]"), None);
        assert!(PaymentEvent::parse(
            r#"{"event_id": "e", "account_id": "a", "amount_cents": 1000000000000, "currency": "EUR"}"#
        )
        .is_ok());
    }

    /// `amount_cents` is an integer as JSON has them: a producer that re-serialises `1250` as
    /// `1250.0` or `1.25e3` sends the same event.
    #[test]
    fn an_integral_amount_is_an_integer_however_it_is_written() {
        for amount in ["1250", "1250.0", "1.25e3", "125000e-2", "1250.000"] {
            let body =
                format!(r#"{{"event_id": "e", "account_id": "a", "amount_cents": {amount}, "currency": "USD"}}"#);
            assert_eq!(PaymentEvent::parse(&body).unwrap().amount_cents, 1250, "{amount}");
        }
        let debit = r#"{"event_id": "e", "account_id": "a", "amount_cents": -1e12, "currency": "USD"}"#;
        assert_eq!(PaymentEvent::parse(debit).unwrap().amount_cents, -MAX_AMOUNT_CENTS);
    }

    #[test]
    fn debug_shows_no_address() {
        let event = PaymentEvent::parse(
            r#"{"event_id": "pay_1", "account_id": "acct_1", "amount_cents": 5, "currency": "USD",
                "receipt_email": "alice.smith@example.com"}"#,
        )
        .unwrap();
        for text in [format!("{event:?}"), format!("{event:#?}"), format!("{:?}", Some(&event))] {
            assert!(!text.contains("alice.smith"), "{text}");
            assert!(text.contains("a***@example.com") && text.contains("pay_1") && text.contains("acct_1"), "{text}");
        }
        let without = PaymentEvent { receipt_email: None, ..event };
        assert!(format!("{without:?}").contains("receipt_email: None"), "{without:?}");
    }
}
