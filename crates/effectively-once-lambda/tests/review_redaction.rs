//! Review finding (fixed in `effectively-once-redact`): the redaction the drivers run over panic messages (and
//! `effectively-once-effects` over SES's echoed errors and stored failure reasons) kept part or all of an
//! address's local part when the character before the `@` was one `in_local_part` left out,
//! though the payment contract accepts such addresses (`valid_email` refuses only whitespace,
//! control characters, a second `@` and an undotted domain).

/// Addresses `PaymentEvent::parse` accepts as `receipt_email`, and the local part each must lose.
const ACCEPTED: [(&str, &str); 4] = [
    // RFC 5322 atext the redactor leaves out: apostrophe, vertical bar, braces.
    ("o'brien@example.com", "o'"),
    ("john|doe@example.com", "john"),
    ("{jdoe}@example.com", "jdoe"),
    // A quoted local part: nothing before the `@` is seen as an address at all.
    ("\"john.smith\"@example.com", "john.smith"),
];

#[test]
fn review_a_panic_message_quoting_an_accepted_address_keeps_no_local_part() {
    let mut leaks = Vec::new();
    for (address, local) in ACCEPTED {
        // What the SQS driver logs for a handler that panics quoting the body.
        let logged = effectively_once_lambda::redact_emails(&format!(
            r#"cannot post {{"event_id":"pay_1","receipt_email":"{}"}}"#,
            address.replace('"', "\\\"")
        ));
        let plain = effectively_once_lambda::redact_emails(&format!("Email address is not verified: {address}"));
        for text in [logged, plain] {
            if text.contains(local) {
                leaks.push(text);
            }
        }
    }
    assert!(leaks.is_empty(), "local parts survive redaction:\n{}", leaks.join("\n"));
}
