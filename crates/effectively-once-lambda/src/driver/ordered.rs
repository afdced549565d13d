//! The ordered batch path: every record of a batch the driver starts, in one call to an
//! [`OrderedBatchHandler`] that applies them in the order given; the driver then reads the
//! answers in batch order and keeps the hold-back rule exactly as the rounds ([`run_rounds`]) do.

use std::future::Future;

use lambda_runtime::{Context, LambdaEvent};

use super::{
    budget_keeping, count, invocation, log_in, may_take_effect_later, not_started, refuse_unchosen_poison, run_groups,
    settle, too_late, Groups, Handler, Holding, Options, Record, Trigger,
};
#[cfg(doc)]
use super::{run_rounds, BatchHandler};
use crate::{panics, Handled, RecordError, RecordResult};

/// Handles a batch in one call, for a handler that applies records in the order it is given
/// them (one `commit_batch` for the batch, say, whose transactions keep that order). It is a
/// [`Handler`] too: the driver falls back to one record at a time through [`Handler::handle`]
/// when the call panics or answers for another number of records.
///
/// Unlike a [`BatchHandler`], which the rounds hand at most one record of each ordered group at
/// a time, this handler gets several records of a group in one call, so it must keep their order
/// itself. The contract: **a record whose predecessor ([`OrderedBatch::after`]) was answered with
/// a failure a later delivery may undo (retryable, in progress elsewhere) must not take effect**;
/// answer it retryable instead ([`OrderedBatch::waits`] says when). A permanent failure holds
/// nothing back. The driver checks the answers in batch order: a record behind such a failure is
/// reported not started (delivered again) whatever the handler answered, and an `Applied` or
/// `Rejected` there is logged at error as a breach of the order (it took effect out of order; it
/// comes back as a duplicate, so nothing is lost).
///
/// The call is bounded by the invocation's deadline less [`Options::deadline_margin`]: past it
/// the call's future is dropped and each of its records answered retryable, so the answer names
/// each lane's first record instead of Lambda ending the invocation with none. A handler must
/// leave nothing half done when dropped between two awaits: a `commit_batch` transaction either
/// committed (its records answer a redelivery as duplicates) or did not.
///
/// ```
/// use effectively_once_lambda::events::{Context, SqsMessage};
/// use effectively_once_lambda::{Handled, Handler, OrderedBatch, OrderedBatchHandler};
/// use effectively_once_lambda::{RecordError, RecordResult};
///
/// struct Orders;
///
/// impl Handler<SqsMessage> for Orders {
///     async fn handle(&self, _message: &SqsMessage, _context: &Context) -> RecordResult {
///         Ok(Handled::Applied)
///     }
/// }
///
/// impl OrderedBatchHandler<SqsMessage> for Orders {
///     async fn handle_ordered(&self, batch: &OrderedBatch<'_, SqsMessage>, context: &Context) -> Vec<RecordResult> {
///         let mut answered = Vec::with_capacity(batch.len());
///         for (at, message) in batch.records().iter().enumerate() {
///             let result = if batch.waits(at, &answered) {
///                 Err(RecordError::retryable("waits for an earlier record of its group"))
///             } else {
///                 self.handle(message, context).await
///             };
///             answered.push(result);
///         }
///         answered
///     }
/// }
/// ```
pub trait OrderedBatchHandler<R>: Handler<R> {
    /// Handles `batch`, returning one result per [`OrderedBatch::records`], in the same order,
    /// with no record taking effect behind a predecessor's failure that may still take effect.
    fn handle_ordered(
        &self,
        batch: &OrderedBatch<'_, R>,
        context: &Context,
    ) -> impl Future<Output = Vec<RecordResult>> + Send;
}

/// The records of a batch that the driver starts, for one [`OrderedBatchHandler`] call: every
/// record but those screened out (a DynamoDB Streams event name not chosen, an SQS message with
/// no id), in batch order, with what orders them.
#[derive(Debug)]
pub struct OrderedBatch<'a, R> {
    records: Vec<&'a R>,
    after: Vec<Vec<usize>>,
    lanes: Vec<Option<&'a str>>,
}

impl<'a, R> OrderedBatch<'a, R> {
    /// The records, in batch order.
    pub fn records(&self) -> &[&'a R] {
        &self.records
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none (the driver makes no call then).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The indices (into [`records`](Self::records), each below `at`) of the records that the
    /// record at `at` follows: the previous record of its lane and the previous record with its
    /// [`Handler::key`]. Through a record screened out, the records it follows.
    pub fn after(&self, at: usize) -> &[usize] {
        &self.after[at]
    }

    /// The record's lane, the order it belongs to: its topic-partition (Kafka), partition key
    /// (Kinesis), item (DynamoDB Streams, as its key attributes in JSON) or message group (SQS
    /// FIFO); `None` on a standard queue, where nothing is ordered.
    pub fn lane(&self, at: usize) -> Option<&'a str> {
        self.lanes[at]
    }

    /// Whether the record at `at` must wait, given the answers so far (`answered[i]` for the
    /// records before it): one of its predecessors failed in a way a later delivery may undo.
    /// Answer it retryable then, without letting it take effect.
    pub fn waits(&self, at: usize, answered: &[RecordResult]) -> bool {
        self.after(at).iter().any(|&earlier| answered.get(earlier).is_some_and(may_take_effect_later))
    }
}

/// A batch through an [`OrderedBatchHandler`] in one call ([`run_ordered`]), in one invocation.
pub(crate) async fn in_one_call<T: Trigger, H: OrderedBatchHandler<T::Record>>(
    handler: &H,
    event: LambdaEvent<T::Event>,
    options: &Options,
) -> T::Response {
    let LambdaEvent { payload, context } = event;
    let source = T::source(&payload);
    let records = &T::records(payload);
    let batch = async {
        let groups = T::groups(handler, records, true);
        let mut results = run_ordered(handler, records, groups, &context, options).await;
        let parked = settle::<T>(records, &mut results, &source, &context, options).await;
        (T::respond(records, &results), count(&results, parked))
    };
    invocation(options, &context, batch).await
}

/// [`serve`](super::serve) through an [`OrderedBatchHandler`], each event through [`in_one_call`].
pub(crate) async fn serve_ordered<T: Trigger, H: OrderedBatchHandler<T::Record>>(
    handler: H,
    options: Options,
) -> Result<(), lambda_runtime::Error> {
    refuse_unchosen_poison::<T>(&options)?;
    let (handler, options) = (&handler, &options);
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<T::Event>| async move {
        Ok::<T::Response, lambda_runtime::Error>(Box::pin(in_one_call::<T, H>(handler, event, options)).await)
    }))
    .await
}

/// Runs a batch through an [`OrderedBatchHandler`]: the records screened and the deadline checked
/// once, every record left handed over in one call, bounded by the deadline margin (a call cut
/// there answers each of its records retryable: [`out_of_time`]), the answers read in batch
/// order ([`read`]).
/// A call that panics or answers for another number of records is not trusted: the batch runs
/// again one record at a time ([`run_groups`], its hold-back exact), and what the call committed
/// is found by the handler's own idempotency and answered as a duplicate. The results by position.
pub(crate) async fn run_ordered<R: Record, H: OrderedBatchHandler<R>>(
    handler: &H,
    records: &[R],
    groups: Groups,
    context: &Context,
    options: &Options,
) -> Vec<RecordResult> {
    let screened = screen(records, context, options);
    let handed = Handed::new(&screened, &groups.after);
    let mut answers: Vec<Option<RecordResult>> = records.iter().map(|_| None).collect();
    if !handed.positions.is_empty() {
        let batch = handed.batch(records, &groups.lanes);
        let called = match budget_keeping(context, options.deadline_margin) {
            Some(budget) => tokio::time::timeout(budget, call(handler, &batch, context)).await.unwrap_or_else(|_| {
                tracing::warn!(
                    records = batch.len(),
                    "ordered batch handler still running at the deadline margin; its records are delivered again"
                );
                Some(batch.records().iter().map(|_| Err(out_of_time())).collect())
            }),
            None => call(handler, &batch, context).await,
        };
        drop(batch);
        let Some(called) = called else {
            return run_groups(handler, records, groups, context, options).await;
        };
        for (&position, answer) in handed.positions.iter().zip(called) {
            answers[position] = Some(answer);
        }
    }
    read(records, &groups, screened, answers)
}

/// A record of a call cut at the deadline margin: retryable, since it may or may not have taken
/// effect; delivered again, it is answered by the handler's own idempotency if it did. Cut there
/// rather than let Lambda end the invocation with no answer: the answer names only each lane's
/// first record, and the poison already read is still parked.
fn out_of_time() -> RecordError {
    RecordError::retryable("not finished: the invocation's deadline is near; delivered again")
}

/// Each record's result before any call: screened out, or, when the deadline is within the
/// margin, not started (one check for the whole call); `None` for the records handed over.
fn screen<R: Record>(records: &[R], context: &Context, options: &Options) -> Vec<Option<RecordResult>> {
    let late = too_late(context, options);
    let not_started = || Err(RecordError::retryable("not started: the invocation's deadline is near"));
    records.iter().map(|record| record.screen(options).or_else(|| late.then(not_started))).collect()
}

/// The records handed over, by position, and their predecessors as indices into them.
struct Handed {
    positions: Vec<usize>,
    after: Vec<Vec<usize>>,
}

impl Handed {
    /// The records not screened out; each one's predecessors remapped to handed indices. An edge
    /// to a screened record is replaced by that record's own predecessors, transitively: a
    /// Streams `MODIFY` skipped between two `INSERT`s of one item must not cut the item's chain.
    fn new(screened: &[Option<RecordResult>], after: &[Vec<usize>]) -> Self {
        // For each position, the handed indices a record following it follows: its own when it
        // is handed, else those it follows itself. Batch order is a topological order of
        // `after` (every predecessor comes earlier), so one pass fills it.
        let mut reach: Vec<Vec<usize>> = Vec::with_capacity(screened.len());
        let mut handed = Handed { positions: Vec::new(), after: Vec::new() };
        for (position, result) in screened.iter().enumerate() {
            let mut follows: Vec<usize> = Vec::new();
            for &earlier in &after[position] {
                for &at in &reach[earlier] {
                    if !follows.contains(&at) {
                        follows.push(at);
                    }
                }
            }
            follows.sort_unstable();
            if result.is_none() {
                reach.push(vec![handed.positions.len()]);
                handed.positions.push(position);
                handed.after.push(follows);
            } else {
                reach.push(follows);
            }
        }
        handed
    }

    fn batch<'a, R>(&self, records: &'a [R], lanes: &'a [Option<String>]) -> OrderedBatch<'a, R> {
        OrderedBatch {
            records: self.positions.iter().map(|&position| &records[position]).collect(),
            after: self.after.clone(),
            lanes: self.positions.iter().map(|&position| lanes[position].as_deref()).collect(),
        }
    }
}

/// The one call, its panic caught; `None` when it panicked or answered for another number of
/// records.
async fn call<R: Record, H: OrderedBatchHandler<R>>(
    handler: &H,
    batch: &OrderedBatch<'_, R>,
    context: &Context,
) -> Option<Vec<RecordResult>> {
    match panics::catch(|| handler.handle_ordered(batch, context)).await {
        Ok(results) if results.len() == batch.len() => Some(results),
        Ok(results) => {
            tracing::error!(
                returned = results.len(),
                records = batch.len(),
                "ordered batch handler returned a result count unlike its records'; the batch handled again one record at a time"
            );
            None
        }
        Err(panic) => {
            tracing::error!(panic = %panic, "ordered batch handler panicked; the batch handled again one record at a time");
            None
        }
    }
}

/// The results in batch order, as the rounds would have them: a record following one that may
/// take effect later is reported not started whatever it was answered (the rounds would not
/// have started it), and holds back those following it in turn. This runs before [`settle`]:
/// a permanent answer behind a held record is not started, never parked.
fn read<R: Record>(
    records: &[R],
    groups: &Groups,
    screened: Vec<Option<RecordResult>>,
    answers: Vec<Option<RecordResult>>,
) -> Vec<RecordResult> {
    let mut holding = Holding::default();
    let mut results = Vec::with_capacity(records.len());
    for (position, (screened, answer)) in screened.into_iter().zip(answers).enumerate() {
        let (record, after) = (&records[position], &groups.after[position]);
        let handed = answer.is_some();
        let own = screened.or(answer).unwrap_or_else(|| Err(RecordError::retryable("not handled")));
        let result = match holding.blocker(after).filter(|_| groups.hold_back) {
            Some(earlier) => {
                if matches!(own, Ok(Handled::Applied | Handled::Rejected)) {
                    breach(record, &earlier);
                }
                not_started(record, &earlier)
            }
            None => {
                // A record screened out and passed over (`Ok`) was logged by the screen.
                if handed || own.is_err() {
                    log_in(record, &own);
                }
                own
            }
        };
        if groups.hold_back {
            holding.note(records, position, after, &result);
        }
        results.push(result);
    }
    results
}

/// A record the handler let take effect behind a predecessor's failure that may still take
/// effect: the order is already broken, so only the log can say so. The record is reported not
/// started, comes back and is answered as a duplicate: nothing is lost.
fn breach<R: Record>(record: &R, earlier: &str) {
    record.span().in_scope(|| {
        tracing::error!(
            waits_for = earlier,
            "order breach: the ordered batch handler let this record take effect behind a failure that may still \
             take effect; reported not started, it comes back as a duplicate"
        )
    });
}
