//! Setting a store up: the store a handler runs on chosen by the environment
//! (`IDEMPOTENCY_STORE`, with the `dynamodb` feature, which this binary requires). Apart from
//! the `store` binary because `store_choice` sets the process's environment. The local Redis
//! script's own tests are the repository's (`tests/repo`, `local_services`).

// Shared with the `store` binary.
#[path = "../common/mod.rs"]
mod common;

mod store_choice;
