//! `RedisStore` on a real Redis (the local one, or `REDIS_URL`): the store contract suite and
//! the core's property schedules, what Redis adds to them (expiry on two clocks, fences,
//! malformed keys, connection and auth failures), key prefixes, lost answers, unreadable runs
//! and the tower layer over it. One test binary, one module per behaviour.

// Shared with the `configuration` binary.
#[path = "../common/mod.rs"]
mod common;

mod beyond_contract;
mod contract;
mod key_prefixes;
mod layer;
mod lost_answers;
mod schedules;
mod unreadable_runs;
