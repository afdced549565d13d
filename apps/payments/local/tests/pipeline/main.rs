//! The payments pipeline under the local AWS tool's emulators, against the local AWS:
//! redelivery, the DLQ and its redrive, the outbox stream and the relay, a flood of one
//! producer, a process killed at a crash point, and replays run in process.

mod crash;
mod emulator;
mod flood;
mod relay;
mod replay;
