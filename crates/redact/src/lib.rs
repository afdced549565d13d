//! Email addresses out of log lines, error messages and stored failure reasons: addresses are
//! personal data and stay out of them.
//!
//! [`redact_email`] for a value a caller knows is an address; [`redact_emails`] for free text
//! that may quote one (a panic message, a provider's error). Both give the same form,
//! `a***@example.com`, so a reader can match a log line to a row without seeing the address.
#![warn(missing_docs)]

/// An address as logs may show it: the first character of the local part and the domain
/// (`a***@example.com`). A value with no `@` is not shown at all.
///
/// ```
/// assert_eq!(redact::redact_email("alice@example.com"), "a***@example.com");
/// assert_eq!(redact::redact_email("garbage"), "***");
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

/// `text` with the local part of every email address in it cut to its first character
/// (`alice@example.com` becomes `a***@example.com`, as [`redact_email`] does for one address).
/// Anything that looks like the local part of an address is redacted: a false positive costs a
/// few characters of a log line, a false negative leaks personal data.
///
/// ```
/// assert_eq!(
///     redact::redact_emails(r#"bad body {"receipt_email":"alice@example.com"}"#),
///     r#"bad body {"receipt_email":"a***@example.com"}"#,
/// );
/// assert_eq!(
///     redact::redact_emails("Email address not verified alice.b+x@example.com"),
///     "Email address not verified a***@example.com"
/// );
/// ```
pub fn redact_emails(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('@') {
        let (before, after) = rest.split_at(at);
        let after = &after[1..];
        let local_start =
            before.char_indices().rev().take_while(|&(_, c)| in_local_part(c)).last().map_or(before.len(), |(i, _)| i);
        let domain_end = after.find(|c| !in_domain(c)).unwrap_or(after.len());
        out.push_str(&before[..local_start]);
        if let Some(first) = before[local_start..].chars().next() {
            out.push(first);
            out.push_str("***");
        }
        out.push('@');
        out.push_str(&after[..domain_end]);
        rest = &after[domain_end..];
    }
    out.push_str(rest);
    out
}

/// Characters of an address's local part (RFC 5322 atext and dots, any letter or digit),
/// less the quotes, braces and bars that more often delimit an address in a message than
/// belong to one.
fn in_local_part(c: char) -> bool {
    c.is_alphanumeric() || "._%+-!#$&*/=?^~".contains(c)
}

fn in_domain(c: char) -> bool {
    c.is_alphanumeric() || c == '.' || c == '-'
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

    #[test]
    fn a_local_part_never_survives() {
        // Each address's local part is gone whatever surrounds it.
        for text in ["x alice@example.com", "<alice@example.com>", "\"alice@example.com\"", "alice@example.com@b.c"] {
            assert!(!redact_emails(text).contains("alice"), "{text}: {}", redact_emails(text));
        }
    }
}
