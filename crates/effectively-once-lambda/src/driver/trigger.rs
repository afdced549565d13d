//! What a trigger module gives the driver core (its event, its records, their groups, its
//! answer to Lambda: [`Trigger`], and what the event says of its source: [`Source`]) and what it
//! gets back: its six entry points, made by [`entry_points`]. Kept apart so a new trigger reads
//! one file to learn what it must say.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{may_take_effect_later, Groups, Handler, Record};
#[cfg(doc)]
use super::{BatchHandler, OrderedBatchHandler};
use crate::RecordResult;

/// What a batch's event says of its source beside its records, for parcels (Kafka's ARN and
/// bootstrap servers are the event's, not the record's).
#[derive(Debug, Default)]
pub(crate) struct Source {
    pub(crate) event_source_arn: Option<String>,
    pub(crate) bootstrap_servers: Option<String>,
}

/// A trigger: its event, its records, how they group, and its answer to Lambda.
pub(crate) trait Trigger {
    /// The event Lambda sends.
    type Event: DeserializeOwned + Send + Sync + 'static;
    /// One of its records.
    type Record: Record + 'static;
    /// The answer Lambda reads.
    type Response: Serialize + Send;
    /// Lambda's name for the event source (`aws:kinesis`), when the trigger parks poison.
    const PARKS: Option<&'static str>;

    /// What the event says of its source beside its records.
    fn source(event: &Self::Event) -> Source;

    /// The event's records, in the order Lambda gave them (grouped by topic-partition, each in
    /// offset order, for Kafka).
    fn records(event: Self::Event) -> Vec<Self::Record>;

    /// The records' ordered groups and what each record waits for. `rounds`: for the batch path.
    fn groups<H: Handler<Self::Record>>(handler: &H, records: &[Self::Record], rounds: bool) -> Groups;

    /// The answer for the records' results, by position.
    fn respond(records: &[Self::Record], results: &[RecordResult]) -> Self::Response;
}

/// A trigger module's six entry points, with their docs: `process` and `run` (record by
/// record), `process_batch` and `run_batch` (through a [`BatchHandler`], in rounds),
/// `process_ordered` and `run_ordered` (through an [`OrderedBatchHandler`], in one call), each a
/// call into the core with the trigger's types. A macro, so the modules do not repeat the same
/// six functions.
macro_rules! entry_points {
    (
        $trigger:ident: $event:ty => $record:ty => $response:ty;
        $(#[$process:meta])* process;
        $(#[$run:meta])* run;
        $(#[$process_batch:meta])* process_batch;
        $(#[$run_batch:meta])* run_batch;
        $(#[$process_ordered:meta])* process_ordered;
        $(#[$run_ordered:meta])* run_ordered;
    ) => {
        /// The trigger, for the core: its types; `records`, `groups` and `respond` are the module's.
        pub(crate) struct $trigger;

        impl $crate::driver::Trigger for $trigger {
            type Event = $event;
            type Record = $record;
            type Response = $response;
            const PARKS: Option<&'static str> = PARKS;

            fn source(event: &$event) -> $crate::driver::Source {
                source(event)
            }

            fn records(event: $event) -> Vec<$record> {
                records(event)
            }

            fn groups<H: Handler<$record>>(handler: &H, records: &[$record], rounds: bool) -> $crate::driver::Groups {
                groups(handler, records, rounds)
            }

            fn respond(records: &[$record], results: &[$crate::RecordResult]) -> $response {
                respond(records, results)
            }
        }

        $(#[$process])*
        pub async fn process<H: Handler<$record>>(
            handler: &H,
            event: lambda_runtime::LambdaEvent<$event>,
            options: &Options,
        ) -> $response {
            $crate::driver::one_by_one::<$trigger, H>(handler, event, options).await
        }

        $(#[$run])*
        pub async fn run<H: Handler<$record>>(handler: H, options: Options) -> Result<(), lambda_runtime::Error> {
            $crate::driver::serve::<$trigger, H>(handler, options).await
        }

        $(#[$process_batch])*
        pub async fn process_batch<H: BatchHandler<$record>>(
            handler: &H,
            event: lambda_runtime::LambdaEvent<$event>,
            options: &Options,
        ) -> $response {
            $crate::driver::in_rounds::<$trigger, H>(handler, event, options).await
        }

        $(#[$run_batch])*
        pub async fn run_batch<H: BatchHandler<$record>>(
            handler: H,
            options: Options,
        ) -> Result<(), lambda_runtime::Error> {
            $crate::driver::serve_rounds::<$trigger, H>(handler, options).await
        }

        $(#[$process_ordered])*
        pub async fn process_ordered<H: OrderedBatchHandler<$record>>(
            handler: &H,
            event: lambda_runtime::LambdaEvent<$event>,
            options: &Options,
        ) -> $response {
            $crate::driver::in_one_call::<$trigger, H>(handler, event, options).await
        }

        $(#[$run_ordered])*
        pub async fn run_ordered<H: OrderedBatchHandler<$record>>(
            handler: H,
            options: Options,
        ) -> Result<(), lambda_runtime::Error> {
            $crate::driver::serve_ordered::<$trigger, H>(handler, options).await
        }
    };
}
pub(crate) use entry_points;

/// A stream's answer (DynamoDB Streams' and Kinesis' share one shape): the checkpoint, the id of
/// the first record a later delivery may still make take effect, if any. A permanent failure
/// never will, and is not the checkpoint.
pub(crate) fn checkpoint<R: Record, T: DeserializeOwned>(records: &[R], results: &[RecordResult]) -> T {
    let failures: Vec<serde_json::Value> = results
        .iter()
        .position(may_take_effect_later)
        .map(|at| serde_json::json!({ "itemIdentifier": records[at].id() }))
        .into_iter()
        .collect();
    // Never a default on failure: an empty answer would pass the whole batch. A panic here fails
    // the invocation, and Lambda delivers the batch again.
    serde_json::from_value(serde_json::json!({ "batchItemFailures": failures }))
        .expect("DynamoDB Streams and Kinesis answers share the batchItemFailures shape")
}
