//! The drivers of every trigger (SQS, Kafka, Kinesis, DynamoDB Streams) with sample events and
//! scripted handlers: failures per record, group and partition order, checkpoints and hold-back,
//! the batch and ordered paths, typed bodies, panics and parking poison. One test binary, one
//! module per behaviour.

// Shared with the `telemetry` binary.
#[path = "../common/mod.rs"]
mod common;

mod kafka;
mod kinesis;
mod ordered;
mod panics;
mod panics_before_the_future;
mod park;
mod sqs;
mod sqs_batch;
mod streams;
mod typed_bodies;
