//! What a deployed function prints, read back as CloudWatch would: the EMF metrics lines and the
//! values they may hold, and the JSON log lines with their addresses redacted. The drivers run in
//! a child process of this binary where a test needs the process's own environment, standard
//! output or cold start. One test binary, one module per behaviour.

// Shared with the `drivers` binary.
#[path = "../common/mod.rs"]
mod common;

mod emf_values;
mod emitted_lines;
mod redacted_logs;
