//! A batch's groups run record by record ([`run_groups`]: the groups concurrently, each in
//! order) or in rounds through a [`BatchHandler`] ([`run_rounds`]), both holding a record back
//! behind an earlier one of its keys that may still take effect ([`Holding`]). The ordered batch
//! path (`ordered.rs`) holds back with the same [`Holding`].

use lambda_runtime::Context;

use super::record::{log_in, may_take_effect_later, not_started, one, too_late, Record};
use super::{BatchHandler, Groups, Handler, Options};
use crate::{panics, RecordError, RecordResult};

/// Runs `groups` record by record, the groups concurrently, at most [`Options::concurrency`] at
/// once, each in order; the results by position. With `hold_back`, a record whose predecessor
/// ([`Groups::after`]) may take effect later is not started (reported failed, retryable):
/// running it first would break its partition's or its key's order.
pub(crate) async fn run_groups<R: Record, H: Handler<R>>(
    handler: &H,
    records: &[R],
    groups: Groups,
    context: &Context,
    options: &Options,
) -> Vec<RecordResult> {
    use futures_util::stream::{self, StreamExt};
    let Groups { groups, after, hold_back, .. } = groups;
    let after = (after.as_slice(), hold_back);
    // Futures made eagerly, not in a stream's `map` closure: a closure over borrowed records
    // makes the batch future's `Send` unprovable for callers that spawn it.
    let pending: Vec<_> =
        groups.into_iter().map(|group| run_group(handler, records, group, after, context, options)).collect();
    let done: Vec<Vec<(usize, RecordResult)>> =
        stream::iter(pending).buffer_unordered(options.concurrency.max(1)).collect().await;
    by_position(records.len(), done.into_iter().flatten())
}

async fn run_group<R: Record, H: Handler<R>>(
    handler: &H,
    records: &[R],
    group: Vec<usize>,
    (after, hold_back): (&[Vec<usize>], bool),
    context: &Context,
    options: &Options,
) -> Vec<(usize, RecordResult)> {
    let mut out = Vec::with_capacity(group.len());
    // The records of the group that may take effect later, with the failure each waits for.
    let mut holding = Holding::default();
    for position in group {
        let record = &records[position];
        let result = match holding.blocker(&after[position]) {
            Some(earlier) if hold_back => not_started(record, &earlier),
            _ => one(handler, record, context, options).await,
        };
        if hold_back {
            holding.note(records, position, &after[position], &result);
        }
        out.push((position, result));
    }
    out
}

/// The records of a batch that may take effect later, each with the failure it waits for (its
/// own id when it failed itself): a record following one of them is held back.
#[derive(Default)]
pub(super) struct Holding(std::collections::HashMap<usize, String>);

impl Holding {
    /// The failure the first held predecessor waits for, if any.
    pub(super) fn blocker(&self, after: &[usize]) -> Option<String> {
        after.iter().find_map(|earlier| self.0.get(earlier).cloned())
    }

    /// Notes `position`'s result: held when it may take effect later.
    pub(super) fn note<R: Record>(&mut self, records: &[R], position: usize, after: &[usize], result: &RecordResult) {
        if may_take_effect_later(result) {
            let cause =
                self.blocker(after).unwrap_or_else(|| format!("record {}", records[position].id().unwrap_or_default()));
            self.0.insert(position, cause);
        }
    }
}

/// Runs `groups` through a [`BatchHandler`] in rounds, each one call with the next record of
/// every group still going; a record following one that may take effect later is held back
/// (reported failed, not started), one following a permanent failure is not. A round is not
/// started within the deadline margin: its records are reported failed, retryable. A call that
/// panics is not trusted with any of its records: each is handled again alone through
/// [`Handler::handle`] (its panic caught), and what the panicking call committed is found by the
/// handler's own idempotency and answered as a duplicate. The results by position.
pub(crate) async fn run_rounds<R: Record, H: BatchHandler<R>>(
    handler: &H,
    records: &[R],
    groups: Groups,
    context: &Context,
    options: &Options,
) -> Vec<RecordResult> {
    let Groups { groups, after, hold_back, .. } = groups;
    let mut results: Vec<Option<RecordResult>> = records.iter().map(|_| None).collect();
    let mut queues: Vec<std::collections::VecDeque<usize>> = groups.into_iter().map(Into::into).collect();
    let mut holding = Holding::default();
    loop {
        let mut round: Vec<usize> = Vec::with_capacity(queues.len());
        for queue in &mut queues {
            // A group's next record, past those held back (their predecessors ran in earlier
            // rounds: a group's records are in order).
            while let Some(position) = queue.pop_front() {
                match holding.blocker(&after[position]).filter(|_| hold_back) {
                    Some(earlier) => {
                        let result = not_started(&records[position], &earlier);
                        holding.note(records, position, &after[position], &result);
                        results[position] = Some(result);
                    }
                    None => {
                        round.push(position);
                        break;
                    }
                }
            }
        }
        if round.is_empty() {
            break;
        }
        for (&position, result) in round.iter().zip(run_round(handler, records, &round, context, options).await) {
            if hold_back {
                holding.note(records, position, &after[position], &result);
            }
            results[position] = Some(result);
        }
    }
    results.into_iter().map(|result| result.unwrap_or_else(|| Err(RecordError::retryable("not handled")))).collect()
}

/// One call of the handler with the records at `positions`; their results in that order.
async fn run_round<R: Record, H: BatchHandler<R>>(
    handler: &H,
    records: &[R],
    positions: &[usize],
    context: &Context,
    options: &Options,
) -> Vec<RecordResult> {
    let mut out: Vec<Option<RecordResult>> = positions.iter().map(|_| None).collect();
    let mut called = Vec::with_capacity(positions.len());
    let late = too_late(context, options);
    for (at, &position) in positions.iter().enumerate() {
        let record = &records[position];
        let refused = record
            .screen(options)
            .or_else(|| late.then(|| Err(RecordError::retryable("not started: the invocation's deadline is near"))));
        match refused {
            Some(result) => {
                if result.is_err() {
                    log_in(record, &result);
                }
                out[at] = Some(result);
            }
            None => called.push(at),
        }
    }
    if !called.is_empty() {
        let batch: Vec<&R> = called.iter().map(|&at| &records[positions[at]]).collect();
        let answers = match panics::catch(|| handler.handle_batch(&batch, context)).await {
            Ok(results) if results.len() == called.len() => Some(results),
            Ok(results) => {
                tracing::error!(
                    returned = results.len(),
                    records = called.len(),
                    "batch handler returned a result count unlike its records'; each handled again alone"
                );
                None
            }
            Err(panic) => {
                tracing::error!(panic = %panic, "batch handler panicked; each of its records handled again alone");
                None
            }
        };
        match answers {
            Some(results) => {
                for (&at, result) in called.iter().zip(results) {
                    log_in(&records[positions[at]], &result);
                    out[at] = Some(result);
                }
            }
            None => {
                for &at in &called {
                    out[at] = Some(one(handler, &records[positions[at]], context, options).await);
                }
            }
        }
    }
    out.into_iter().map(|result| result.unwrap_or_else(|| Err(RecordError::retryable("not handled")))).collect()
}

fn by_position(len: usize, results: impl Iterator<Item = (usize, RecordResult)>) -> Vec<RecordResult> {
    let mut out: Vec<Option<RecordResult>> = (0..len).map(|_| None).collect();
    for (position, result) in results {
        out[position] = Some(result);
    }
    out.into_iter().map(|result| result.unwrap_or_else(|| Err(RecordError::retryable("not handled")))).collect()
}
