//! The repository's checks, one test binary: the docs name only what exists
//! (`doc_references`), the toolchain and the scripts' installs are pinned (`toolchain`), the
//! deploy scripts behave (`scripts`), the local servers' scripts keep one server per port and
//! stop only their own (`local_services`), the bench's Kafka rows partition as Kafka does
//! (`bench_triggers`), and the workspace keeps its layout's rules: which crates may depend on
//! which (`dependencies`), source files' size and module files (`sources`).
//!
//! Nothing here needs a local service (`local_services` starts servers of its own, each on a
//! port of its own); `make unit` runs it.

mod bench_triggers;
mod dependencies;
mod doc_references;
mod local_services;
mod scripts;
mod sources;
mod toolchain;
