//! The Kafka payments consumer, one test binary over one shared setup (`support`): each payment
//! posted once however often it comes (`duplicates`), the three delivery paths agreeing
//! (`paths`), failures parked or holding their partition only (`failures`, `partitions`), the
//! invocation's deadline (`deadlines`), the sample event (`sample_event`), and Kafka's failure
//! modes on a real broker (`broker`, the one module that needs `make local-kafka-up`).

mod support;

mod broker;
mod deadlines;
mod duplicates;
mod failures;
mod partitions;
mod paths;
mod sample_event;
