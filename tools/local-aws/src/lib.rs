//! A local AWS for Lambda functions: a template's resources (any CloudFormation or SAM template,
//! given at run time) created on the local AWS, event source mapping emulators for SQS, DynamoDB
//! Streams, Kinesis and Kafka that behave as Lambda documents, their on-failure destinations and
//! park queues replayed after a fix, a Lambda Runtime API for a function's own binary, an invoke
//! client for `cargo lambda watch`, and a fault-injecting proxy. It knows no application:
//! functions plug in through the traits of [`invoke`] (in process, a handler of
//! `effectively_once_lambda`; or a binary, over HTTP), a user's own function included.
//!
//! - [`cli`]: the `local` command line, on a template given with `--template`;
//! - [`resources`], [`template`]: a template's resources, environment and event sources;
//! - [`esm`]: the emulators ([`esm::sqs`], [`esm::stream`], [`esm::kinesis`], [`esm::kafka`]),
//!   their replays and the queue utilities;
//! - [`invoke`]: how a mapping invokes a function; [`runtime`]: a binary under a local Runtime API;
//! - [`park`]: the stream functions' park queues read back, parcel by parcel;
//! - [`proxy`]: the fault-injecting proxy between the SDK and the local AWS;
//! - [`api`]: an HTTP function served over real HTTP in process;
//! - [`progress`], [`rng`], [`time`]: a run's progress, seeded randomness, timestamps;
//! - [`loopback`]: the endpoints it may touch: this machine's, unless told otherwise.

pub mod api;
pub mod cli;
pub mod error;
pub mod esm;
mod http;
pub mod invoke;
pub mod loopback;
pub mod park;
pub mod progress;
pub mod proxy;
pub mod resources;
pub mod rng;
pub mod runtime;
pub mod template;
pub mod time;

pub use error::{Error, Result};
pub use resources::{Clients, MappingSettings};
