//! Keyed outbound calls: a deterministic `Idempotency-Key` for a downstream API that
//! deduplicates on it, so every retry of an event reuses one server-side result.

use crate::key::{Key, KeyError};

/// The header most APIs that deduplicate read (Stripe, Adyen, the IETF draft).
pub const HEADER: &str = "Idempotency-Key";

/// The key for the `kind` of call an event makes downstream: `{kind}-{event_id}`
/// (`invoice-pay_0001`). Deterministic, never random: a retry after a lost response, a
/// redelivery or a DLQ redrive sends the same key, and the downstream returns its first result.
///
/// ```
/// let key = idempotency::outbound::key("invoice", "pay_0001").unwrap();
/// assert_eq!(key, "invoice-pay_0001");
/// assert_eq!(idempotency::outbound::HEADER, "Idempotency-Key");
/// ```
pub fn key(kind: &str, event_id: &str) -> Result<String, KeyError> {
    // Validated like any key, so it is safe in a header.
    Key::new(kind, event_id)?;
    Ok(format!("{kind}-{event_id}"))
}

/// The header to add to the request: `(HEADER, key(kind, event_id))`.
pub fn header(kind: &str, event_id: &str) -> Result<(&'static str, String), KeyError> {
    Ok((HEADER, key(kind, event_id)?))
}
