//! One invocation around a batch (its span, the batch's counts logged, the EMF line after it),
//! the record-by-record and in-rounds batch paths that run inside it, and the run loops that
//! serve a trigger's events from the Lambda runtime.

use std::future::Future;

use lambda_runtime::{Context, LambdaEvent};
use tracing::Instrument;

#[cfg(doc)]
use super::record::log;
use super::run::{run_groups, run_rounds};
use super::settle::settle;
use super::{BatchHandler, Handler, Options, Trigger};
use crate::metrics::{self, Counts};
use crate::park::{self, Poison};
use crate::{panics, RecordResult};

/// A batch record by record ([`run_groups`]), in one invocation.
pub(crate) async fn one_by_one<T: Trigger, H: Handler<T::Record>>(
    handler: &H,
    event: LambdaEvent<T::Event>,
    options: &Options,
) -> T::Response {
    let LambdaEvent { payload, context } = event;
    let source = T::source(&payload);
    let records = &T::records(payload);
    let batch = async {
        let groups = T::groups(handler, records, false);
        let mut results = run_groups(handler, records, groups, &context, options).await;
        let parked = settle::<T>(records, &mut results, &source, &context, options).await;
        (T::respond(records, &results), count(&results, parked))
    };
    invocation(options, &context, batch).await
}

/// A batch through a [`BatchHandler`] in rounds ([`run_rounds`]), in one invocation.
pub(crate) async fn in_rounds<T: Trigger, H: BatchHandler<T::Record>>(
    handler: &H,
    event: LambdaEvent<T::Event>,
    options: &Options,
) -> T::Response {
    let LambdaEvent { payload, context } = event;
    let source = T::source(&payload);
    let records = &T::records(payload);
    let batch = async {
        let groups = T::groups(handler, records, true);
        let mut results = run_rounds(handler, records, groups, &context, options).await;
        let parked = settle::<T>(records, &mut results, &source, &context, options).await;
        (T::respond(records, &results), count(&results, parked))
    };
    invocation(options, &context, batch).await
}

/// One invocation: its span (`request_id`, `function_name`, `function_version`, `cold_start`),
/// the batch run inside it, and the EMF line after it.
pub(super) async fn invocation<T>(options: &Options, context: &Context, batch: impl Future<Output = (T, Counts)>) -> T {
    panics::install_hook();
    panics::warn_if_aborting();
    let (cold_start, span) = metrics::invocation_span(options.metrics.emf(), context);
    let (response, counts) = batch.instrument(span.clone()).await;
    span.in_scope(|| log_counts(&counts));
    options.metrics.flush(&counts, cold_start, &context.request_id, options.emit_metrics);
    response
}

/// The run loop, record by record: serves the trigger's events from the Lambda runtime until it
/// stops, each through [`one_by_one`].
///
/// Each event's future is boxed (one allocation per invocation), as is each handler call's
/// ([`panics::catch`]): rustc lays out a boxed future on its own, so the runtime's, the driver's
/// and the handler's nesting never add up, and a user's `main` stays within the default
/// `recursion_limit` of 128 however deep its handler's future nests. Four mains here needed
/// `#![recursion_limit = "256"]` before.
pub(crate) async fn serve<T: Trigger, H: Handler<T::Record>>(
    handler: H,
    options: Options,
) -> Result<(), lambda_runtime::Error> {
    refuse_unchosen_poison::<T>(&options)?;
    let (handler, options) = (&handler, &options);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<T::Event>| async move {
        Ok::<T::Response, lambda_runtime::Error>(Box::pin(one_by_one::<T, H>(handler, event, options)).await)
    }))
    .await
}

/// [`serve`] through a [`BatchHandler`], each event through [`in_rounds`].
pub(crate) async fn serve_rounds<T: Trigger, H: BatchHandler<T::Record>>(
    handler: H,
    options: Options,
) -> Result<(), lambda_runtime::Error> {
    refuse_unchosen_poison::<T>(&options)?;
    let (handler, options) = (&handler, &options);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<T::Event>| async move {
        Ok::<T::Response, lambda_runtime::Error>(Box::pin(in_rounds::<T, H>(handler, event, options)).await)
    }))
    .await
}

/// A stream function that has not said where its poison goes does not start: losing a record
/// that failed permanently is a choice ([`Options::drop_poison`]), never a default.
pub(super) fn refuse_unchosen_poison<T: Trigger>(options: &Options) -> Result<(), lambda_runtime::Error> {
    match (T::PARKS, &options.poison) {
        (Some(trigger), Poison::Unchosen) => Err(format!(
            "a {trigger} function needs a park destination for records that fail permanently: \
             Options::park_in(park::SqsQueue::from_env(..)?) with {} set, or Options::drop_poison() to lose them",
            park::PARK_QUEUE_URL
        )
        .into()),
        _ => Ok(()),
    }
}

/// The counts of a batch's results, `parked` of them parked.
pub(super) fn count<'r>(results: impl IntoIterator<Item = &'r RecordResult>, parked: u64) -> Counts {
    let mut counts = Counts::default();
    for result in results {
        counts.add(result);
    }
    counts.parked = parked;
    counts
}

/// The batch's one line at info: how many records were applied, rejected, duplicates, in
/// progress elsewhere, failed (of which for good) and skipped. Each failure has its own line
/// besides, with its reason ([`log`]); a record done has one at debug only.
pub(super) fn log_counts(counts: &Counts) {
    tracing::info!(
        applied = counts.applied,
        rejected = counts.rejected,
        duplicate = counts.duplicate,
        in_progress = counts.in_progress,
        failed = counts.failed,
        permanent = counts.permanent,
        parked = counts.parked,
        skipped = counts.skipped,
        "batch done"
    );
}
