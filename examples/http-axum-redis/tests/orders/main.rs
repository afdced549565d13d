//! The orders service's Idempotency-Key semantics over the local Valkey/Redis, driven by hyper's
//! client on a loopback port: creates, replays and refusals (`server`), and only the handler's
//! own answers stored (`stored_statuses`). One test binary, one module per behaviour.

mod server;
mod stored_statuses;
