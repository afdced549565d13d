//! Email addresses out of free text (panic messages, error reasons) before it reaches a log.
//!
//! `effects::redact_email` redacts one address a handler knows is an address; a panic message is
//! text the driver knows nothing about, so every address in it is found and redacted to the
//! same form (`a***@example.com`). This crate sits below `effects` (which brings the AWS SDK), so
//! the scan lives here.

/// `text` with the local part of every email address in it redacted to its first character
/// (`alice@example.com` becomes `a***@example.com`), as `effects::redact_email` does for one
/// address. Anything that looks like the local part of an address is redacted: a false
/// positive costs a few characters of a log line, a false negative leaks personal data.
///
/// ```
/// assert_eq!(
///     triggers::redact_emails(r#"bad body {"receipt_email":"alice@example.com"}"#),
///     r#"bad body {"receipt_email":"a***@example.com"}"#,
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
    use super::redact_emails;

    #[test]
    fn redacts_every_address_in_the_form_effects_uses() {
        assert_eq!(redact_emails("alice@example.com"), "a***@example.com");
        assert_eq!(
            redact_emails("to alice.b+tag@example.com, then 'bob@mail.example.org'."),
            "to a***@example.com, then 'b***@mail.example.org'."
        );
        assert_eq!(
            redact_emails(r#"Err(Parse("{\"receipt_email\":\"zoë@exämple.de\"}"))"#),
            r#"Err(Parse("{\"receipt_email\":\"z***@exämple.de\"}"))"#
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
