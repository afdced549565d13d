//! The payments consumer as its triggers deliver to it, one test binary: the sample events
//! (`sample_events`), Kinesis records (`kinesis`), a handler that panics on one record
//! (`panics`), FIFO groups held behind a failure a fix may undo (`fifo_holds`), and the
//! migration of lapsed rejections (`migration`). `support` is their setup: the consumer on
//! tables of its own, and counting its calls.

mod fifo_holds;
mod kinesis;
mod migration;
mod panics;
mod sample_events;
mod support;
