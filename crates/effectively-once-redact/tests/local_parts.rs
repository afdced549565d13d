//! Property: for any address the payment contract accepts as `receipt_email`, written into a
//! log line as text, between brackets or quotes, as a `mailto:` link, inside JSON, as Debug
//! output or as JSON printed with `{:?}`, at most one letter or digit of its local part is left
//! after `redact_emails`; the domain and the text around the address are kept as they were.
//!
//! To count what is left, local parts are drawn from letters and digits the surrounding text
//! never uses (capitals, digits, anything outside ASCII) plus every punctuation character the
//! contract allows; the text around, the JSON keys and the domains use lowercase ASCII only.

use effectively_once_redact::redact_emails;
use proptest::prelude::*;

/// The contract's rule, as `valid_email` in apps/payments/domain/src/payment.rs states it (this crate
/// cannot depend on `payments`): one `@`, a local part, a dotted domain, no whitespace or control
/// character, at most 254 bytes.
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

/// A letter or digit that can only have come from a local part.
fn from_local_part(c: char) -> bool {
    c.is_alphanumeric() && !c.is_ascii_lowercase()
}

const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?[\\]^_`{|}~";

fn local_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => prop::char::range('A', 'Z'),
        2 => prop::char::range('0', '9'),
        4 => prop::sample::select(PUNCTUATION.chars().collect::<Vec<_>>()),
        1 => prop::sample::select(vec!['é', 'ß', 'Ж', '中', 'Ω', '\u{ad}', '\u{200b}', '\u{301}', '😀']),
        1 => prop::char::range('\u{a0}', char::MAX).prop_filter("the contract refuses it", |&c| {
            !c.is_whitespace() && !c.is_control()
        }),
    ]
}

/// A local part the contract accepts: any of the above, or a quoted one (`"john.smith"`).
fn local_part() -> impl Strategy<Value = String> {
    let bare = || prop::collection::vec(local_char(), 1..16).prop_map(|cs| cs.into_iter().collect::<String>());
    prop_oneof![3 => bare(), 1 => bare().prop_map(|s| format!("\"{s}\""))]
}

fn domain() -> impl Strategy<Value = String> {
    "[a-z]([a-z-]{0,8}[a-z])?(\\.[a-z]{2,8}){1,2}"
}

/// Text around an address: no `@` (it would be an address of its own) and, to tell what is
/// left, no letter or digit a local part uses.
fn text() -> impl Strategy<Value = String> {
    "[a-z ,.;:!?(){}<>'\"|/=_\\\\\\[\\]\n\t-]{0,24}"
}

/// Text before an address ends where a word ends: glued to other characters, an address's
/// local part would be those characters too.
fn prefix() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), (text(), "[ \n\t]").prop_map(|(t, ws)| t + &ws)]
}

/// Text after an address in running text: ends the domain with whitespace or punctuation, not
/// a double quote or a backslash (those would close a string the address is not in).
fn suffix() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), ("[ \n,;:!?)>}'\\]]", text()).prop_map(|(first, t)| first + &t)]
}

#[derive(Debug, Clone, Copy)]
enum Quoting {
    Text,
    Angle,
    Parens,
    Apostrophes,
    Mailto,
    AngleMailto,
    /// Between double quotes, unescaped (`format!("\"{address}\"")`).
    DoubleQuotes,
    Json,
    JsonSpaced,
    Debug,
    DebugOfJson,
}

/// Debug's escaping of `s`, without the quotes around it: character by character, so it can be
/// applied to the parts of a string one at a time.
fn debug(s: &str) -> String {
    let quoted = format!("{s:?}");
    quoted[1..quoted.len() - 1].to_owned()
}

fn json(s: &str) -> String {
    let quoted = serde_json::to_string(s).unwrap();
    quoted[1..quoted.len() - 1].to_owned()
}

const JSON_OPEN: &str = r#"{"event_id":"pay_x","receipt_email":""#;
const JSON_CLOSE: &str = r#""}"#;

/// The text before the local part, the local part as written, and the text after the domain.
fn quote(quoting: Quoting, local: &str) -> (String, String, String) {
    let plain = |open: &str, close: &str| (open.to_owned(), local.to_owned(), close.to_owned());
    match quoting {
        Quoting::Text => plain("", ""),
        Quoting::Angle => plain("<", ">"),
        Quoting::Parens => plain("(", ")"),
        Quoting::Apostrophes => plain("'", "'"),
        Quoting::Mailto => plain("mailto:", ""),
        Quoting::AngleMailto => plain("<mailto:", ">"),
        Quoting::DoubleQuotes => plain("\"", "\""),
        Quoting::Json => (JSON_OPEN.to_owned(), json(local), JSON_CLOSE.to_owned()),
        Quoting::JsonSpaced => ("{\"receipt_email\": \"".to_owned(), json(local), JSON_CLOSE.to_owned()),
        Quoting::Debug => ("\"".to_owned(), debug(local), "\"".to_owned()),
        Quoting::DebugOfJson => {
            (format!("parse(\"{}", debug(JSON_OPEN)), debug(&json(local)), format!("{}\"))", debug(JSON_CLOSE)))
        }
    }
}

fn quoting() -> impl Strategy<Value = Quoting> {
    prop::sample::select(vec![
        Quoting::Text,
        Quoting::Angle,
        Quoting::Parens,
        Quoting::Apostrophes,
        Quoting::Mailto,
        Quoting::AngleMailto,
        Quoting::DoubleQuotes,
        Quoting::Json,
        Quoting::JsonSpaced,
        Quoting::Debug,
        Quoting::DebugOfJson,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// At most one letter or digit of the local part is left, the text before the address and
    /// the structure it sits in (brackets, `mailto:`, the JSON keys) are kept, and the mask is
    /// followed by the domain and the rest of the text unchanged. Redacting the result again
    /// changes nothing.
    #[test]
    fn at_most_one_letter_of_a_local_part_is_left(
        local in local_part(),
        domain in domain(),
        quoting in quoting(),
        before in prefix(),
        after in suffix(),
    ) {
        let address = format!("{local}@{domain}");
        prop_assert!(valid_email(&address), "the contract refuses {}", address);
        // Unescaped double quotes around an address whose local part holds a quote of its own
        // read like JSON (`"AB":"CD@x.io"` is also the key AB and the address CD@x.io); the
        // property below covers that case with a weaker claim.
        let quoting = match quoting {
            Quoting::DoubleQuotes if local.contains('"') => Quoting::Text,
            other => other,
        };
        let (open, written, close) = quote(quoting, &local);
        let text = format!("{before}{open}{written}@{domain}{close}{after}");

        let out = redact_emails(&text);

        let head = format!("{before}{open}");
        let tail = format!("***@{domain}{close}{after}");
        prop_assert!(out.starts_with(&head), "structure before the address lost: {text:?} -> {out:?}");
        prop_assert!(out.ends_with(&tail), "domain or text after it changed: {text:?} -> {out:?}");
        let left: Vec<char> = out.chars().filter(|&c| from_local_part(c)).collect();
        prop_assert!(left.len() <= 1, "{left:?} of {local:?} left: {text:?} -> {out:?}");
        prop_assert_eq!(redact_emails(&out), out.clone(), "redacting twice: {:?}", text);
    }

    /// Whatever follows the address (a quote that closes nothing, more punctuation), a local
    /// part of two characters or more with a letter or digit in it never appears whole. A local
    /// part holding `*`, the mask's own character, is left out: `A***@x.io` is its own
    /// redaction.
    #[test]
    fn a_local_part_never_appears_whole(
        local in local_part().prop_filter("one character, no letter, or the mask's", |l| {
            l.chars().count() >= 2 && l.chars().any(from_local_part) && !l.contains('*')
        }),
        domain in domain(),
        quoting in quoting(),
        before in prefix(),
        after in text(),
    ) {
        let address = format!("{local}@{domain}");
        prop_assert!(valid_email(&address), "the contract refuses {}", address);
        let (open, written, close) = quote(quoting, &local);
        let text = format!("{before}{open}{written}@{domain}{close}{after}");

        let out = redact_emails(&text);

        prop_assert!(!out.contains(&local), "{local:?} survives: {text:?} -> {out:?}");
        prop_assert!(out.contains(&format!("***@{domain}")), "domain lost: {text:?} -> {out:?}");
    }
}
