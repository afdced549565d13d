//! The event source mapping emulators against Lambda's documented behaviour, one module per
//! trigger, and how the emulator invokes a function (in process, over HTTP). Tests that need the
//! local Kafka broker are under [`kafka`]; the others need the local AWS unless they say not.

mod function_error;
mod inprocess_key;
mod kafka;
mod kinesis;
mod sqs_and_streams;
mod support;
