//! The local pipeline: the local AWS's resources created from `infra/template.json` (so local
//! and cloud cannot drift), an event source mapping emulator for SQS and DynamoDB Streams that
//! invokes the real handlers, workloads with duplicates and poison messages, DLQ redrive, and
//! the demo that checks the invariants.

pub mod audit;
pub mod chaos;
pub mod cli;
pub mod demo;
pub mod esm;
pub mod invoke;
pub mod proxy;
pub mod resources;
pub mod workload;

pub use resources::{Clients, Resources, RECEIPT_FROM, TEMPLATE};
