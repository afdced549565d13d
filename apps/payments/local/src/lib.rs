//! The payments application on the local AWS: its resources from `apps/payments/template.json`,
//! its functions run in process under the local AWS tool's event source mapping emulators
//! (`local`), workloads with duplicates and poison messages, DLQ redrive, and the demo and the
//! chaos scenario, which check the invariants.
//!
//! - [`cli`]: the `payments-local` command line, an enum of commands parsed once and applied;
//! - [`resources`]: the template's resources, named for the pipeline;
//! - [`pipeline`]: one set of resources and the payments functions and the emulator on them;
//! - [`invariants`]: what the demo and the chaos scenario check, read back from the tables;
//! - [`demo`], [`chaos`], [`workload`]: the scenarios and what they send;
//! - [`panicking`]: panics injected where the workload marks them;
//! - [`via_api`]: the demo through the payments API, with client timeouts and lost answers.

pub mod chaos;
pub mod cli;
pub mod demo;
pub mod invariants;
pub mod panicking;
pub mod pipeline;
pub mod resources;
pub mod via_api;
pub mod workload;

pub use local::{Error, Result};
pub use pipeline::Pipeline;
pub use resources::{Clients, Resources, RECEIPT_FROM, TEMPLATE};
