//! The payment event contract: parsed and validated field by field, with errors naming the field.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use effectively_once_redact::redact_email;

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

fn id_char(character: char) -> bool {
    character.is_ascii_alphanumeric() || matches!(character, '.' | '_' | ':' | '#' | '-')
}

/// An id field (`event_id`, `account_id`) as the body has it.
fn id(field: &'static str, value: Option<&Value>) -> Result<String, InvalidPayment> {
    match value {
        None | Some(Value::Null) => Err(invalid(field, "is required")),
        Some(Value::String(s)) => id_text(field, s),
        Some(_) => Err(invalid(field, "must be a string")),
    }
}

/// An id's text: 1 to 200 characters from `[A-Za-z0-9._:#-]`.
fn id_text(field: &'static str, s: &str) -> Result<String, InvalidPayment> {
    let len = s.chars().count();
    if len == 0 || len > 200 {
        return Err(invalid(field, format!("must have 1 to 200 characters, has {len}")));
    }
    if let Some(c) = s.chars().find(|&c| !id_char(c)) {
        return Err(invalid(field, format!("has the character {c:?}; allowed: A-Z a-z 0-9 . _ : # -")));
    }
    Ok(s.to_owned())
}

/// Why a body given its event id apart ([`PaymentEvent::parse_with_event_id`]) is not a valid
/// payment event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// The body is not JSON, or not a JSON object.
    NotAnObject,
    /// The body names `event_id`, which is given apart.
    NamesEventId,
    /// A field is invalid (`event_id`: the given id).
    Invalid(InvalidPayment),
}

impl PaymentEvent {
    /// Parses and validates a message body.
    ///
    /// ```
    /// let body = r#"{"event_id": "pay_0001", "account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}"#;
    /// let event = payments::PaymentEvent::parse(body).unwrap();
    /// assert_eq!(event.amount_cents, 1250);
    ///
    /// let err = payments::PaymentEvent::parse(r#"{"event_id": "p", "account_id": "a", "amount_cents": 0, "currency": "USD"}"#).unwrap_err();
    /// assert_eq!(err.field, Some("amount_cents"));
    /// ```
    pub fn parse(body: &str) -> Result<PaymentEvent, InvalidPayment> {
        match read(body)? {
            Document::Object(members) => Self::from_members(&members, body, None),
            Document::Other => Err(InvalidPayment { field: None, problem: "body is not a JSON object".into() }),
        }
    }

    /// Parses and validates a body that leaves `event_id` out because it is given apart (the
    /// payments API's `Idempotency-Key`): the rules of [`parse`](PaymentEvent::parse), with
    /// `event_id`'s problems the given id's. One pass over the text, as `parse` makes: only
    /// the contract's fields are kept, the rest of the body is checked as JSON and dropped.
    ///
    /// ```
    /// use payments::{BodyError, PaymentEvent};
    ///
    /// let event = PaymentEvent::parse_with_event_id("pay_0001", r#"{"account_id": "acct_42", "amount_cents": 1250, "currency": "USD"}"#);
    /// assert_eq!(event.unwrap().event_id, "pay_0001");
    /// let named = PaymentEvent::parse_with_event_id("pay_0001", r#"{"event_id": "x"}"#);
    /// assert_eq!(named.unwrap_err(), BodyError::NamesEventId);
    /// ```
    pub fn parse_with_event_id(event_id: &str, body: &str) -> Result<PaymentEvent, BodyError> {
        let members = match read(body) {
            Ok(Document::Object(members)) => members,
            Ok(Document::Other) | Err(_) => return Err(BodyError::NotAnObject),
        };
        if members.get("event_id").is_some() {
            return Err(BodyError::NamesEventId);
        }
        Self::from_members(&members, body, Some(event_id)).map_err(BodyError::Invalid)
    }

    /// The event id a body names, without judging the rest: the batch key of a payments
    /// handler (the drivers' `Handler::key`), cheap to ask before any record runs. `None` when
    /// the body is not a JSON object with a string `event_id`; such a body fails on its own
    /// when [`parse`](PaymentEvent::parse)d.
    ///
    /// ```
    /// let body = br#"{"event_id": "pay_0001", "amount_cents": "not judged here"}"#;
    /// assert_eq!(payments::PaymentEvent::event_id_of(body).as_deref(), Some("pay_0001"));
    /// assert_eq!(payments::PaymentEvent::event_id_of(b"{not json"), None);
    /// ```
    pub fn event_id_of(body: &[u8]) -> Option<String> {
        #[derive(Deserialize)]
        struct Key {
            event_id: String,
        }
        serde_json::from_slice::<Key>(body).ok().map(|key| key.event_id)
    }

    /// Validates a body's members, the event id `given` apart or else the body's; `body` is
    /// its text, for numbers a double cannot judge.
    fn from_members(members: &Members, body: &str, given: Option<&str>) -> Result<PaymentEvent, InvalidPayment> {
        if let Some(field) = members.repeated {
            // A map keeps the last copy; which one the producer meant is not ours to guess.
            return Err(invalid(field, "appears more than once in the body"));
        }
        let event_id = match given {
            Some(event_id) => id_text("event_id", event_id)?,
            None => id("event_id", members.get("event_id"))?,
        };
        let account_id = id("account_id", members.get("account_id"))?;
        let amount_cents = match members.get("amount_cents") {
            None | Some(Value::Null) => return Err(invalid("amount_cents", "is required")),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(cents) => cents,
                None => amount_text(body)
                    .as_deref()
                    .and_then(integral)
                    .ok_or_else(|| invalid("amount_cents", format!("must be an integer, is {n}")))?,
            },
            Some(_) => return Err(invalid("amount_cents", "must be an integer")),
        };
        if amount_cents == 0 {
            return Err(invalid("amount_cents", "must not be zero"));
        }
        if amount_cents.unsigned_abs() > MAX_AMOUNT_CENTS as u64 {
            return Err(invalid("amount_cents", "absolute value must be at most 10^12"));
        }
        let currency = match members.get("currency") {
            None | Some(Value::Null) => return Err(invalid("currency", "is required")),
            Some(Value::String(s)) if s.len() == 3 && s.chars().all(|c| c.is_ascii_uppercase()) => s.clone(),
            Some(_) => return Err(invalid("currency", "must be three upper-case letters")),
        };
        let receipt_email = match members.get("receipt_email") {
            None | Some(Value::Null) => None,
            Some(Value::String(address)) if valid_email(address) => Some(address.clone()),
            Some(_) => return Err(invalid("receipt_email", "must be an email address")),
        };
        Ok(PaymentEvent { event_id, account_id, amount_cents, currency, receipt_email })
    }
}

/// The contract's fields, the ones a repeated member makes ambiguous.
const FIELDS: [&str; 5] = ["event_id", "account_id", "amount_cents", "currency", "receipt_email"];

/// A body's top-level object as the contract reads it: each of its fields as parsed (the last
/// copy, as a JSON map keeps it), and the first that the body names more than once
/// (`{"amount_cents": 5, "amount_cents": 7}`: a map keeps the last copy, another parser the
/// first). Other members are checked as JSON and dropped, their copies too.
#[derive(Default)]
struct Members {
    values: [Option<Value>; FIELDS.len()],
    repeated: Option<&'static str>,
}

impl Members {
    fn get(&self, field: &str) -> Option<&Value> {
        FIELDS.iter().position(|name| *name == field).and_then(|i| self.values[i].as_ref())
    }
}

/// A body: an object's members, or anything else (judged as not an object).
enum Document {
    Object(Members),
    Other,
}

/// Reads a body in one pass: no tree of it is built, only the contract's fields are kept. A
/// body that is not JSON is refused as `serde_json::Value` would refuse it (the same errors,
/// the same nesting limit), so the message names the same line and column.
fn read(body: &str) -> Result<Document, InvalidPayment> {
    serde_json::from_str::<Document>(body)
        .map_err(|e| InvalidPayment { field: None, problem: format!("body is not JSON ({e})") })
}

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{MapAccess, SeqAccess, Visitor};

        struct Top;
        impl<'de> Visitor<'de> for Top {
            type Value = Document;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("JSON")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Document, A::Error> {
                let mut members = Members::default();
                while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match FIELDS.iter().position(|field| *field == name) {
                        Some(i) => {
                            let value = map.next_value::<Value>()?;
                            if members.values[i].replace(value).is_some() {
                                members.repeated = members.repeated.or(Some(FIELDS[i]));
                            }
                        }
                        None => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(Document::Object(members))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Document, A::Error> {
                Skip.visit_seq(seq).map(|_| Document::Other)
            }

            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Document, E> {
                Ok(Document::Other)
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Document, E> {
                Ok(Document::Other)
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Document, E> {
                Ok(Document::Other)
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Document, E> {
                Ok(Document::Other)
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Document, E> {
                Ok(Document::Other)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Document, E> {
                Ok(Document::Other)
            }
        }
        deserializer.deserialize_any(Top)
    }
}

/// A JSON value read and dropped. Through `deserialize_any`, as `serde_json::Value` reads one
/// (`IgnoredAny` skips without the nesting limit or the number checks), so a body refused
/// before is refused still, with the same message.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Skip)
    }
}

impl<'de> serde::de::Visitor<'de> for Skip {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Skip)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
}

/// The text of `amount_cents` as the producer wrote it: a double cannot tell `1250.0000000000001`
/// from `1250`, the text can. `None` when the body names the field twice (a map keeps the last
/// copy; which one the producer meant is not ours to guess).
fn amount_text(body: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Amount<'a> {
        #[serde(borrow)]
        amount_cents: &'a serde_json::value::RawValue,
    }
    serde_json::from_str::<Amount>(body).ok().map(|a| a.amount_cents.get().to_owned())
}

/// The integer a JSON number's text stands for, exactly: `1250`, and `1250.0`, `1.25e3` or
/// `125000e-2` as a producer that re-serialises numbers writes it (JSON has one number type;
/// RFC 8785, which the payload hash follows, writes all of them as `1250`). `None` for anything
/// with a non-zero fraction, however small. Values past 10^13 come back as `i64::MAX`, so the
/// range check after names the range. By hand: exact decimal arithmetic on at most a few dozen
/// digits needs no big-number crate.
fn integral(text: &str) -> Option<i64> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.strip_prefix('+').unwrap_or(e).parse::<i64>().ok()?),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = digits.trim_start_matches('0');
    // The value is digits × 10^scale.
    let scale = exponent.checked_sub(fraction.len() as i64)?;
    let integer = if digits.is_empty() {
        0
    } else if scale >= 0 {
        if digits.len() as i64 + scale > 13 {
            i64::MAX
        } else {
            digits.parse::<i64>().ok()? * 10_i64.pow(scale as u32)
        }
    } else {
        let cut = digits.len().checked_sub(scale.unsigned_abs() as usize);
        let (kept, dropped) = match cut {
            Some(cut) => digits.split_at(cut),
            None => ("", digits),
        };
        if dropped.bytes().any(|b| b != b'0') {
            return None;
        }
        if kept.len() > 13 {
            i64::MAX
        } else if kept.is_empty() {
            0
        } else {
            kept.parse::<i64>().ok()?
        }
    };
    Some(if negative { -integer } else { integer })
}

impl PaymentEvent {
    /// Whether its payload hash may skip the JSON tree ([`Config::payload_hash_of_plain`]): no
    /// amount past ±2^53 and no field starting with a NUL, as every event [`PaymentEvent::parse`]
    /// accepts; one built by hand past the contract's bounds takes the general path.
    ///
    /// [`Config::payload_hash_of_plain`]: effectively_once::Config::payload_hash_of_plain
    pub(crate) fn is_plain(&self) -> bool {
        let nul = |field: &str| field.starts_with('\0');
        self.amount_cents.unsigned_abs() < 1 << 53
            && !nul(&self.event_id)
            && !nul(&self.account_id)
            && !nul(&self.currency)
            && !self.receipt_email.as_deref().is_some_and(nul)
    }
}

/// A plausible address: one `@`, a local part, a dotted domain, no spaces, at most 254 bytes.
/// The payment contract's check of `receipt_email` (and [`Profiles`](crate::Profiles)'); the
/// receipts relay applies it, and more, to every address it would send to.
pub fn valid_email(address: &str) -> bool {
    let Some((local, domain)) = address.split_once('@') else { return false };
    address.len() <= 254
        && !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !address.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parsed_event_is_plain_and_one_built_past_the_bounds_is_not() {
        let body = r#"{"event_id": "e", "account_id": "a", "amount_cents": -1000000000000, "currency": "USD",
            "receipt_email": "a@b.co"}"#;
        let event = PaymentEvent::parse(body).unwrap();
        assert!(event.is_plain());
        assert!(!PaymentEvent { amount_cents: 1 << 53, ..event.clone() }.is_plain());
        assert!(PaymentEvent { amount_cents: (1 << 53) - 1, ..event.clone() }.is_plain());
        assert!(!PaymentEvent { amount_cents: -(1 << 53), ..event.clone() }.is_plain());
        let nul = "\0e";
        assert!(!PaymentEvent { event_id: nul.into(), ..event.clone() }.is_plain());
        assert!(!PaymentEvent { account_id: nul.into(), ..event.clone() }.is_plain());
        assert!(!PaymentEvent { currency: nul.into(), ..event.clone() }.is_plain());
        assert!(!PaymentEvent { receipt_email: Some(nul.into()), ..event.clone() }.is_plain());
        assert!(PaymentEvent { receipt_email: Some(format!("e{nul}")), ..event }.is_plain());
    }

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

    #[test]
    fn a_field_named_twice_is_refused_by_name() {
        let event =
            r#""event_id": "e", "account_id": "a", "amount_cents": 5, "currency": "USD", "receipt_email": "a@b.co""#;
        for (field, copy) in [
            ("amount_cents", r#""amount_cents": 7"#),
            ("amount_cents", r#""amount_cents": 5"#),
            ("account_id", r#""account_id": "b""#),
            ("event_id", r#""event_id": "e""#),
            ("currency", r#""currency": "EUR""#),
            ("receipt_email", r#""receipt_email": null"#),
        ] {
            let err = PaymentEvent::parse(&format!("{{{event}, {copy}}}")).unwrap_err();
            assert_eq!(
                (err.field, err.problem.as_str()),
                (Some(field), "appears more than once in the body"),
                "{copy}"
            );
        }
        // Unknown fields are ignored, their copies too.
        let event = PaymentEvent::parse(&format!(r#"{{{event}, "trace": 1, "trace": 2}}"#)).unwrap();
        assert_eq!(event.amount_cents, 5);
    }

    /// The one-pass reader refuses what `serde_json::Value` refused, with its message: a body
    /// the consumer sent to the DLQ before goes there still, for the same reason.
    #[test]
    fn a_body_that_is_not_json_is_refused_as_before() {
        let ok = r#""event_id": "e", "account_id": "a", "amount_cents": 5, "currency": "USD""#;
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        for body in [
            "not json".to_owned(),
            "[1, 2".to_owned(),
            format!("{{{ok}, \"trace\": {deep}}}"),
            format!("{{{ok}, \"trace\": 1e400}}"),
            format!("{{{ok}, \"trace\": \"\\x\"}}"),
            format!("{{{ok}}} trailing"),
            format!("{{{ok},}}"),
        ] {
            let value = serde_json::from_str::<Value>(&body).unwrap_err();
            let err = PaymentEvent::parse(&body).unwrap_err();
            assert_eq!((err.field, err.problem), (None, format!("body is not JSON ({value})")), "{body}");
        }
        for body in ["[1]", "\"text\"", "null", "7"] {
            assert_eq!(PaymentEvent::parse(body).unwrap_err().problem, "body is not a JSON object", "{body}");
        }
    }

    #[test]
    fn a_body_given_its_event_id_apart_follows_the_same_rules() {
        let body = r#"{"account_id": "a", "amount_cents": 1.25e3, "currency": "USD", "trace": [{"x": 1}]}"#;
        let event = PaymentEvent::parse_with_event_id("p1:k", body).unwrap();
        assert_eq!((event.event_id.as_str(), event.amount_cents), ("p1:k", 1250));
        assert_eq!(PaymentEvent::parse_with_event_id("k", "[1]"), Err(BodyError::NotAnObject));
        assert_eq!(PaymentEvent::parse_with_event_id("k", "{"), Err(BodyError::NotAnObject));
        let named = r#"{"event_id": null, "account_id": "a", "amount_cents": 1, "currency": "USD"}"#;
        assert_eq!(PaymentEvent::parse_with_event_id("k", named), Err(BodyError::NamesEventId));
        let field = |id: &str, body: &str| match PaymentEvent::parse_with_event_id(id, body) {
            Err(BodyError::Invalid(invalid)) => (invalid.field, invalid.problem),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field("bad id", body),
            (Some("event_id"), "has the character ' '; allowed: A-Z a-z 0-9 . _ : # -".into())
        );
        let twice = r#"{"account_id": "a", "amount_cents": 1, "amount_cents": 2, "currency": "USD"}"#;
        assert_eq!(field("bad id", twice), (Some("amount_cents"), "appears more than once in the body".into()));
        assert_eq!(field("k", "{}"), (Some("account_id"), "is required".into()));
        let fraction = r#"{"account_id": "a", "amount_cents": 1250.0000000000001, "currency": "USD"}"#;
        assert_eq!(field("k", fraction).0, Some("amount_cents"), "judged on the digits sent");
    }
}
