//! The repository's checks, one test binary: the docs name only what exists
//! (`doc_references`), the toolchain and the scripts' installs are pinned (`toolchain`), the
//! deploy and local-service scripts behave (`scripts`), the bench's Kafka rows partition as
//! Kafka does (`bench_triggers`), and the workspace keeps its layout's rules: which crates may
//! depend on which (`dependencies`), source files' size and module files (`sources`).
//!
//! Nothing here needs a local service; `make unit` runs it.

mod bench_triggers;
mod dependencies;
mod doc_references;
mod scripts;
mod sources;
mod toolchain;
