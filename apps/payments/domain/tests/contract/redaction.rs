//! Addresses the payment contract accepts survive the redaction of SES's echoed refusals with no
//! part of their local part.

use effectively_once_effects::{SendError, SendErrorKind};
use payments::PaymentEvent;

/// Addresses the payment contract accepts (no whitespace, one '@') whose local part holds an
/// apostrophe, a quote, a brace or a bar: SES echoes a refused recipient in MessageRejected,
/// and the stored `Failed { reason }`, the warn log and the error keep part of the local part.
#[test]
fn accepted_addresses_are_fully_redacted() {
    for address in
        ["mary.o'neil@example.com", "\"mary.smith\"@example.com", "mary|smith@example.com", "mary{smith}@example.com"]
    {
        let body = format!(
            r#"{{"event_id": "p1", "account_id": "a1", "amount_cents": 1, "currency": "USD", "receipt_email": "{}"}}"#,
            address.replace('"', "\\\"")
        );
        assert!(PaymentEvent::parse(&body).is_ok(), "the contract accepts {address}");
        let refused = SendError::new(
            SendErrorKind::Rejected,
            format!("Email address is not verified. The following identities failed the check in region US-EAST-1: {address}"),
        );
        for text in [refused.message.clone(), refused.to_string(), format!("{refused:?}")] {
            assert!(!text.contains("mary"), "{address} leaks into: {text}");
        }
    }
}
