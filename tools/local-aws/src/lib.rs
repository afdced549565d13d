//! The local pipeline: the local AWS's resources created from `apps/payments/template.json` (so local
//! and cloud cannot drift), an event source mapping emulator for SQS and DynamoDB Streams that
//! invokes the real handlers, workloads with duplicates and poison messages, DLQ redrive, and
//! the demo and the chaos scenario, which check the invariants.
//!
//! - [`cli`]: the command line, an enum of commands parsed once and applied;
//! - [`pipeline`]: one set of resources and the clients and functions on them;
//! - [`esm`]: the emulator ([`esm::sqs`], [`esm::stream`], [`esm::queue`]);
//! - [`invariants`]: what the demo and the chaos scenario check, read back from the tables;
//! - [`park`]: the stream functions' park queues read back, parcel by parcel;
//! - [`demo`], [`chaos`], [`workload`]: the scenarios and what they send;
//! - [`proxy`]: the fault-injecting proxy between the SDK and the local AWS;
//! - [`api`]: an HTTP function (the payments API) served over real HTTP in process;
//! - [`via_api`]: the demo through the payments API, with client timeouts and lost answers;
//! - [`template`]: a user's own template's resources, environment and SQS event sources;
//! - [`runtime`]: a function's own binary run under a local Lambda Runtime API;
//! - [`loopback`]: the endpoints it may touch: this machine's, unless told otherwise.

pub mod api;
pub mod chaos;
pub mod cli;
pub mod demo;
pub mod error;
pub mod esm;
mod http;
pub mod invariants;
pub mod invoke;
pub mod loopback;
pub mod park;
pub mod pipeline;
pub mod progress;
pub mod proxy;
pub mod resources;
pub mod rng;
pub mod runtime;
pub mod template;
pub mod via_api;
pub mod workload;

pub use error::{Error, Result};
pub use pipeline::Pipeline;
pub use resources::{Clients, Resources, RECEIPT_FROM, TEMPLATE};
