//! Who a receipt goes to: the account's registered address where its profile names one, else
//! the event's address when the deployment's allow-list admits it (or no allow-list is set),
//! else nobody (the row is marked `REFUSED`). Pure; the relay reads the profile.
//!
//! The rule lives in the relay, at send time, not in the consumer when it writes the row: the
//! relay holds the only `ses:SendEmail` grant and reads every row of the outbox, whoever wrote
//! it, so a row put there by another writer (a tool, a compromised role, a replayed backup)
//! meets the same rule; and an address registered or changed after the payment posted is the
//! one used.

use std::collections::HashSet;

use effectively_once_effects::email::redact_email;

/// The environment variable of the allow-list.
pub const ALLOWED_VAR: &str = "RECEIPT_ALLOWED_RECIPIENTS";

/// Event addresses a deployment admits when the account has no registered address: exact
/// addresses (`alice@example.com`) and whole domains (`example.com`, which admits
/// `anyone@example.com` but not `x@mail.example.com`), compared case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowList {
    addresses: HashSet<String>,
    domains: HashSet<String>,
}

impl AllowList {
    /// The list in `text`: entries separated by commas or white space. `None` when `text` is
    /// unset or holds no entry (no allow-list: every event address is admitted). An entry that
    /// is neither an address nor a domain is an error naming it.
    ///
    /// ```
    /// use receipts_relay::recipient::AllowList;
    /// let list = AllowList::parse(Some("example.com, ops@partner.example")).unwrap().unwrap();
    /// assert!(list.allows("Alice@Example.com"));
    /// assert!(list.allows("ops@partner.example"));
    /// assert!(!list.allows("sales@partner.example"));
    /// assert!(!list.allows("x@mail.example.com"));
    /// assert_eq!(AllowList::parse(Some(" ")), Ok(None));
    /// ```
    pub fn parse(text: Option<&str>) -> Result<Option<AllowList>, String> {
        let mut list = AllowList { addresses: HashSet::new(), domains: HashSet::new() };
        for entry in text.unwrap_or_default().split(|c: char| c == ',' || c.is_whitespace()).filter(|e| !e.is_empty()) {
            let entry = entry.to_ascii_lowercase();
            let domain_ok = |d: &str| {
                d.contains('.')
                    && !d.starts_with('.')
                    && !d.ends_with('.')
                    && d.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
            };
            match entry.split_once('@') {
                Some((local, domain)) if !local.is_empty() && domain_ok(domain) => {
                    list.addresses.insert(entry);
                }
                None if domain_ok(&entry) => {
                    list.domains.insert(entry);
                }
                _ => return Err(format!("{ALLOWED_VAR}: {entry:?} is neither an email address nor a domain")),
            }
        }
        Ok((!list.addresses.is_empty() || !list.domains.is_empty()).then_some(list))
    }

    /// Whether `address` is on the list: a single address ([`single_address`]) whose whole
    /// text is a listed address or whose domain is a listed domain.
    pub fn allows(&self, address: &str) -> bool {
        if !single_address(address) {
            return false;
        }
        let address = address.to_ascii_lowercase();
        let domain = address.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
        self.addresses.contains(&address) || self.domains.contains(domain)
    }
}

/// Whether `address` is one mailbox the relay may send to: the payment contract's shape
/// ([`payments::valid_email`]: exactly one `@`, a local part, a dotted domain, no white space or
/// control characters) and none of the characters that make a header list or a display name of
/// it (`,` `;` `:` `<` `>` `"` `(` `)` `[` `]` `\`). Checked before any rule: the relay reads
/// rows any writer put in the outbox, and `victim@evil.example,a@example.com` must not pass as
/// an address at `example.com`.
///
/// ```
/// use receipts_relay::recipient::single_address;
/// assert!(single_address("alice+receipts@example.com"));
/// assert!(!single_address("victim@evil.example,a@example.com"));
/// assert!(!single_address("victim,a@example.com"));
/// assert!(!single_address("Victim <victim@example.com>"));
/// ```
pub fn single_address(address: &str) -> bool {
    payments::valid_email(address)
        && !address.chars().any(|c| matches!(c, ',' | ';' | ':' | '<' | '>' | '"' | '(' | ')' | '[' | ']' | '\\'))
}

/// Where a receipt goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipient {
    /// The account's registered address (its profile), whatever the event named.
    Account(String),
    /// The event's own address: no registered one, and the allow-list (if any) admits it.
    Event(String),
}

impl Recipient {
    /// The address.
    pub fn address(&self) -> &str {
        match self {
            Recipient::Account(a) | Recipient::Event(a) => a,
        }
    }
}

/// The recipient of a receipt the event asked to go to `requested`, for an account whose
/// profile names `registered`, under `allowed`; the error is why nobody gets it (addresses
/// redacted).
pub fn choose(
    registered: Option<String>,
    requested: Option<&str>,
    allowed: Option<&AllowList>,
) -> Result<Recipient, String> {
    let Some(requested) = requested else {
        return Err("the row names no receipt address: no receipt was asked for".into());
    };
    if let Some(registered) = registered {
        if !single_address(&registered) {
            return Err(
                "the account's registered receipt_email is not a single email address; refused, not sent to the \
                 event's address"
                    .into(),
            );
        }
        return Ok(Recipient::Account(registered));
    }
    if !single_address(requested) {
        // Not shown, even redacted: what is not one address may not redact as one.
        return Err("the row's receipt address is not a single email address".into());
    }
    match allowed {
        Some(list) if !list.allows(requested) => Err(format!(
            "recipient {} is not the account's registered address (it has none) and not on {ALLOWED_VAR}",
            redact_email(requested)
        )),
        _ => Ok(Recipient::Event(requested.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registered_address_wins_then_the_allow_list_then_the_event() {
        let list = AllowList::parse(Some("example.com")).unwrap();
        let registered = Some("owner@bank.example".to_owned());
        assert_eq!(
            choose(registered.clone(), Some("x@evil.example"), list.as_ref()),
            Ok(Recipient::Account("owner@bank.example".into()))
        );
        assert_eq!(choose(None, Some("a@example.com"), list.as_ref()), Ok(Recipient::Event("a@example.com".into())));
        let refused = choose(None, Some("spamtrap@evil.example"), list.as_ref()).unwrap_err();
        assert!(refused.contains(ALLOWED_VAR) && !refused.contains("spamtrap"), "{refused}");
        assert_eq!(
            choose(None, Some("x@evil.example"), None),
            Ok(Recipient::Event("x@evil.example".into())),
            "no allow-list: the event's address (the default deployment)"
        );
        assert!(choose(registered, None, None).is_err(), "no address asked for, no receipt");
    }

    /// The relay reads rows any writer put in the outbox, and `ReceiptRow::check` does not check
    /// the address: the list must judge the whole address, not only what follows its last `@`.
    #[test]
    fn an_address_naming_an_off_list_mailbox_before_its_last_at_is_not_allowed() {
        let list = AllowList::parse(Some("example.com")).unwrap().unwrap();
        assert!(list.allows("a@example.com"));
        for smuggled in [
            "victim@evil.example,a@example.com",
            "victim@evil.example@example.com",
            "victim@evil.example;a@example.com",
            "Victim <victim@evil.example>,a@example.com",
        ] {
            assert!(!list.allows(smuggled), "{smuggled:?} admitted under example.com");
        }
    }

    /// Refused before any rule, with no allow-list and a registered address too.
    #[test]
    fn a_recipient_that_is_not_one_address_is_refused() {
        for smuggled in ["victim@evil.example,a@example.com", "victim,a@example.com", "V <v@example.com>"] {
            let refused = choose(None, Some(smuggled), None).unwrap_err();
            assert!(!refused.contains("victim") && !refused.contains("v@"), "{refused}");
            assert!(choose(Some(smuggled.into()), Some("a@example.com"), None).is_err(), "{smuggled:?} registered");
        }
    }

    #[test]
    fn entries_that_are_neither_address_nor_domain_are_named() {
        for bad in ["*.example.com", "@example.com", "localhost", "a@b"] {
            let err = AllowList::parse(Some(bad)).unwrap_err();
            assert!(err.contains(ALLOWED_VAR), "{err}");
        }
        assert_eq!(AllowList::parse(None), Ok(None));
    }
}
