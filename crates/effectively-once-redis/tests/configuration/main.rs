//! Setting a store up: the store a handler runs on chosen by the environment
//! (`IDEMPOTENCY_STORE`, with the `dynamodb` feature), and the local Redis script that serves
//! the tests. Apart from the `store` binary because `store_choice` sets the process's
//! environment.

// Shared with the `store` binary.
#[path = "../common/mod.rs"]
mod common;

mod local_server;
#[cfg(feature = "dynamodb")]
mod store_choice;
