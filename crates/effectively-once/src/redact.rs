//! Email addresses out of log lines, error messages and stored failure reasons: addresses are
//! personal data and stay out of them.
//!
//! [`redact_email`] for a value a caller knows is an address; [`redact_emails`] for free text
//! that may quote one (a panic message, a provider's error). Both give the same form,
//! `a***@example.com`, so a reader can match a log line to a row without seeing the address.
//!
//! Here in the core, which every driver and effect crate already depends on, so one scan serves
//! the drivers' panic messages and the effects' send errors alike.

/// An address as logs may show it: the first character of the local part and the domain
/// (`a***@example.com`). A value with no `@` is not shown at all.
///
/// ```
/// assert_eq!(effectively_once::redact::redact_email("alice@example.com"), "a***@example.com");
/// assert_eq!(effectively_once::redact::redact_email("garbage"), "***");
/// ```
pub fn redact_email(address: &str) -> String {
    match address.split_once('@') {
        Some((local, domain)) => {
            let first: String = local.chars().take(1).collect();
            format!("{first}***@{domain}")
        }
        None => "***".into(),
    }
}

/// The mask that stands for the part of a local part that is not shown.
const MASK: &str = "***";

/// `text` with the local part of every email address in it masked: `alice@example.com` becomes
/// `a***@example.com`, as [`redact_email`] gives for one address.
///
/// The payment contract accepts any local part without whitespace, control characters or `@`
/// (`o'brien`, `john|doe`, `{jdoe}`, `"john.smith"`), so no character class can tell where a
/// local part starts: everything from the last whitespace (or the previous address) up to the
/// `@` is taken as the local part and masked. Only what the text itself shows is structure is
/// kept before the mask:
/// - a JSON or Debug string the address sits in (`"receipt_email":"`, `Some("`, and the same
///   escaped once more when JSON is printed with `{:?}`), recognised only when the string is
///   closed right after the domain and holds no unescaped quote;
/// - leading punctuation (`<`, `(`, `'`, `"`) and a `mailto:`;
///
/// then the first letter or digit, the mask and the domain. A false positive costs a few
/// characters of a log line; a false negative leaks personal data.
///
/// ```
/// assert_eq!(
///     effectively_once::redact::redact_emails(r#"bad body {"receipt_email":"alice@example.com"}"#),
///     r#"bad body {"receipt_email":"a***@example.com"}"#,
/// );
/// assert_eq!(
///     effectively_once::redact::redact_emails("Email address not verified alice.b+x@example.com"),
///     "Email address not verified a***@example.com"
/// );
/// assert_eq!(effectively_once::redact::redact_emails("to o'brien@example.com"), "to o***@example.com");
/// assert_eq!(effectively_once::redact::redact_emails(r#"to "john.smith"@example.com"#), r#"to "j***@example.com"#);
/// ```
pub fn redact_emails(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('@') {
        let (before, after) = (&rest[..at], &rest[at + 1..]);
        let domain_end = after.find(|c| !in_domain(c)).unwrap_or(after.len());
        // The token ends at whitespace, a control character or the previous address's domain
        // (the start of `rest`): nothing else is refused in a local part by the contract.
        let token_start = before
            .char_indices()
            .rev()
            .find(|&(_, c)| c.is_whitespace() || c.is_control())
            .map_or(0, |(i, c)| i + c.len_utf8());
        out.push_str(&before[..token_start]);
        out.push_str(&mask_local_part(&before[token_start..], &after[domain_end..]));
        out.push('@');
        out.push_str(&after[..domain_end]);
        rest = &after[domain_end..];
    }
    out.push_str(rest);
    out
}

/// `token` (everything before an `@` back to whitespace) with its local part masked;
/// `after_domain` is the text that follows the domain, where a string holding the address
/// closes.
fn mask_local_part(token: &str, after_domain: &str) -> String {
    if token.is_empty() {
        return String::new(); // an `@` after whitespace: no address
    }
    let opened = string_opened_at(token, after_domain);
    let shown_at = first_letter(token, opened.unwrap_or(0));
    let (kept, local) = token.split_at(shown_at);
    let mut rest = local.chars();
    let Some(first) = rest.next() else {
        if token.ends_with(MASK) {
            return token.to_owned(); // masked already: `"***`, `<mailto:***`
        }
        // Punctuation only, nothing of a name. In a string, all of it goes: the "string" may
        // be quotes and braces of a local part (`"A{"!@x.io"`), and keeping them would keep it.
        return match opened {
            Some(start) => format!("{}{MASK}", &token[..start]),
            None => format!("{token}{MASK}"),
        };
    };
    if rest.as_str() == MASK {
        return token.to_owned(); // masked already: `a***`
    }
    // The first letter is shown when something of the local part stays hidden after it. When
    // structure was skipped to find it and it is the only character, showing it could rebuild
    // a local part like `{j` from kept punctuation and that letter, so it is masked too.
    if rest.as_str().is_empty() && shown_at > 0 {
        format!("{kept}{MASK}")
    } else {
        format!("{kept}{first}{MASK}")
    }
}

/// Where the local part starts when the address sits in a quoted string of JSON or Debug
/// output: just after the quote that opens the string. Such a quote is preceded by JSON or
/// Debug structure (`:`, `,`, `(`, `[`, `{`, `=`) or starts the token, the same quote (with as
/// many backslashes, for a string escaped inside another) closes the string right after the
/// domain, and every quote between it and the `@` is escaped deeper, as the address's own
/// quotes are. Otherwise `None`, and the whole token is the local part.
fn string_opened_at(token: &str, after_domain: &str) -> Option<usize> {
    let bytes = token.as_bytes();
    // The fewest backslashes before any quote to the right of the one looked at: the quotes a
    // string opened there would hold. Scanning from the right keeps this linear.
    let mut shallowest_inside = usize::MAX;
    for quote in (0..bytes.len()).rev().filter(|&i| bytes[i] == b'"') {
        let depth = bytes[..quote].iter().rev().take_while(|&&b| b == b'\\').count();
        let opener = quote - depth;
        let after_structure = opener == 0 || matches!(bytes[opener - 1], b':' | b',' | b'(' | b'[' | b'{' | b'=');
        let closes = after_domain
            .as_bytes()
            .get(..=depth)
            .is_some_and(|close| close[..depth].iter().all(|&b| b == b'\\') && close[depth] == b'"');
        // An address's local part is never empty, so neither is the string holding it.
        let holds_something = quote + 1 < bytes.len();
        if after_structure && closes && holds_something && shallowest_inside > depth {
            return Some(quote + 1);
        }
        shallowest_inside = shallowest_inside.min(depth);
        if shallowest_inside == 0 {
            return None; // a bare quote: no string further left can hold it
        }
    }
    None
}

/// Where the letter shown for the local part is: the first letter or digit of `token` at or
/// after `from`, past a `mailto:` (its length when there is none). Lowercase only, as links are
/// written: a local part `MAILTO:x` then keeps no more than a `mailto:x` link shows.
fn first_letter(token: &str, from: usize) -> usize {
    let skip = |from: usize| token[from..].find(char::is_alphanumeric).map_or(token.len(), |i| from + i);
    let at = skip(from);
    match token[at..].strip_prefix("mailto:") {
        Some(_) => skip(at + "mailto:".len()),
        None => at,
    }
}

fn in_domain(character: char) -> bool {
    character.is_alphanumeric() || character == '.' || character == '-'
}

#[cfg(test)]
mod tests {
    use super::{redact_email, redact_emails};

    #[test]
    fn redacts_one_address() {
        assert_eq!(redact_email("alice@example.com"), "a***@example.com");
        assert_eq!(redact_email("zoë@exämple.de"), "z***@exämple.de");
        assert_eq!(redact_email("garbage"), "***");
    }

    #[test]
    fn redacts_every_address_in_the_form_of_one() {
        assert_eq!(redact_emails("alice@example.com"), redact_email("alice@example.com"));
        assert_eq!(
            redact_emails("to alice.b+tag@example.com, then 'bob@mail.example.org'."),
            "to a***@example.com, then 'b***@mail.example.org'."
        );
        assert_eq!(
            redact_emails(r#"Err(Parse("{\"receipt_email\":\"zoë@exämple.de\"}"))"#),
            r#"Err(Parse("{\"receipt_email\":\"z***@exämple.de\"}"))"#
        );
        assert_eq!(
            redact_emails("Email address not verified alice.b+x@example.com"),
            "Email address not verified a***@example.com"
        );
    }

    #[test]
    fn leaves_text_without_addresses_alone() {
        for text in ["", "no address here", "price @ 12", "trailing @", "@start", "schön"] {
            assert_eq!(redact_emails(text), text);
        }
    }

    /// Local parts the payment contract accepts with characters that once ended the scan (the
    /// quote, apostrophe, bar, braces): the first letter is all that is left of them, as text,
    /// as JSON, as Debug output and as JSON printed with `{:?}`.
    #[test]
    fn accepted_local_parts_keep_only_their_first_letter() {
        let cases = [
            ("o'brien@example.com", "o***@example.com"),
            ("john|doe@example.com", "j***@example.com"),
            ("{jdoe}@example.com", "{j***@example.com"),
            ("\"john.smith\"@example.com", "\"j***@example.com"),
            ("a\"b:\"c@example.com", "a***@example.com"),
            ("mary{smith}@example.com", "m***@example.com"),
        ];
        for (address, redacted) in cases {
            assert_eq!(redact_emails(&format!("to {address}.")), format!("to {redacted}."));
        }
        assert_eq!(
            redact_emails(r#"{"receipt_email":"o'brien@example.com"}"#),
            r#"{"receipt_email":"o***@example.com"}"#
        );
        assert_eq!(
            redact_emails(r#"{"event_id":"pay_1","receipt_email":"\"john.smith\"@example.com"}"#),
            r#"{"event_id":"pay_1","receipt_email":"\"j***@example.com"}"#
        );
        assert_eq!(
            redact_emails(&format!("{:?}", r#"{"receipt_email":"\"john.smith\"@example.com"}"#)),
            r#""{\"receipt_email\":\"\\\"j***@example.com\"}""#
        );
        assert_eq!(redact_emails(&format!("{:?}", "john|doe@example.com")), r#""j***@example.com""#);
        assert_eq!(redact_emails("Some(\"a'b@example.com\")"), "Some(\"a***@example.com\")");
    }

    #[test]
    fn angle_brackets_links_and_lists_keep_their_punctuation() {
        assert_eq!(redact_emails("From: Alice <alice@example.com>"), "From: Alice <a***@example.com>");
        assert_eq!(redact_emails("see mailto:alice@example.com"), "see mailto:a***@example.com");
        assert_eq!(redact_emails("<mailto:o'brien@example.com>"), "<mailto:o***@example.com>");
        assert_eq!(redact_emails("(alice@example.com)"), "(a***@example.com)");
        assert_eq!(
            redact_emails(r#"["alice@example.com","bob@example.org"]"#),
            r#"["a***@example.com","b***@example.org"]"#
        );
        assert_eq!(redact_emails("alice@example.com,bob@example.org"), "a***@example.com,b***@example.org");
        assert_eq!(redact_emails(r#"to="alice@example.com""#), r#"to="a***@example.com""#);
    }

    /// Where the letter shown next to kept punctuation would be the whole of what is left of the
    /// local part (`{j` from `{j}`... or a one-letter address in quotes), it is masked too.
    #[test]
    fn a_lone_letter_after_punctuation_is_masked() {
        assert_eq!(redact_emails("{j@example.com"), "{***@example.com");
        assert_eq!(redact_emails(r#""a@example.com""#), r#""***@example.com""#);
        // A bare one-letter local part keeps the form of `redact_email`.
        assert_eq!(redact_emails("a@example.com"), redact_email("a@example.com"));
    }

    /// A quote that only looks like the start of a string is not taken for one: it must follow
    /// structure and the same quote must close right after the domain; otherwise the whole
    /// token is the local part.
    #[test]
    fn only_a_string_closed_after_the_domain_is_structure() {
        // Closed by nothing: `x:"` is part of the local part.
        assert_eq!(redact_emails("to x:\"abc@example.com now"), "to x***@example.com now");
        // A quote after a letter does not open a string.
        assert_eq!(redact_emails("\"ab\"cd@example.com\""), "\"a***@example.com\"");
        // Closed with another escape depth: not the string that holds the address.
        assert_eq!(redact_emails(r#"{"k":\"ab@example.com""#), r#"{"k***@example.com""#);
    }

    /// Redacting redacted text changes nothing: `SendError` redacts its message when built and
    /// again when shown.
    #[test]
    fn redacting_twice_is_redacting_once() {
        for text in [
            "to o'brien@example.com",
            r#"{"receipt_email":"a@example.com"}"#,
            "<mailto:a@example.com>",
            "{*j@example.com",
            r#"Err(Parse("{\"receipt_email\":\"zoë@exämple.de\"}"))"#,
        ] {
            let once = redact_emails(text);
            assert_eq!(redact_emails(&once), once, "{text}");
        }
    }

    #[test]
    fn a_local_part_never_survives() {
        // Each address's local part is gone whatever surrounds it.
        for text in ["x alice@example.com", "<alice@example.com>", "\"alice@example.com\"", "alice@example.com@b.c"] {
            assert!(!redact_emails(text).contains("alice"), "{text}: {}", redact_emails(text));
        }
    }
}
