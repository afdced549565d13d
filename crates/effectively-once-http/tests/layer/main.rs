//! The HTTP idempotency layer, over an in-memory store: its decisions (replay, `422`, `409`,
//! `400`, `413`), the answers it streams or stores, callers' scopes, what makes two requests the
//! same, held bodies, the key's binding and the lease bound. One test binary for the crate, one
//! module per behaviour; `support` holds the layer and handler they share.

mod caller_scopes;
mod decisions;
mod fingerprints;
mod held_bodies;
mod key_binding;
mod leases;
mod streamed_answers;
mod support;
