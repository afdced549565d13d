//! `Idempotency` and its parts, without a service: what counts as the same payload, the
//! outbound keys it derives, and the property schedules against the in-memory store. One test
//! binary for the crate, one module per behaviour.

mod outbound_key;
mod payload_hash;
mod schedules;
