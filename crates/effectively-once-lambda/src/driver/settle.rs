//! A stream's permanent failures, settled before the answer to Lambda: parked in the chosen
//! destination ([`crate::park`]) so the position may pass them, or held (made retryable) so it
//! stays at them. Bounded by the invocation's deadline, so an answer always goes back.

use std::time::Duration;

use lambda_runtime::Context;

use super::{Options, Record, Source, Trigger};
use crate::park::{self, Coordinates, Parcel, Poison};
use crate::{now_ms, panics, redact_emails, RecordError, RecordResult, Retry};

/// A stream's permanent failures, settled before the answer: parked (they stay permanent
/// failures, past which the position may move), or, when parking fails or no destination was
/// chosen, made retryable so the position holds there; dropped only under [`Poison::Drop`].
/// Returns how many were parked. A trigger that parks nothing (SQS) is left as it is.
pub(super) async fn settle<T: Trigger>(
    records: &[T::Record],
    results: &mut [RecordResult],
    source: &Source,
    context: &Context,
    options: &Options,
) -> u64 {
    let Some(trigger) = T::PARKS else { return 0 };
    let poisoned: Vec<usize> =
        (0..results.len()).filter(|&at| results[at].as_ref().is_err_and(|e| e.retry == Retry::Never)).collect();
    if poisoned.is_empty() {
        return 0;
    }
    let destination = match &options.poison {
        Poison::Drop => {
            for &at in &poisoned {
                records[at].span().in_scope(|| tracing::error!("record dropped: Options::poison is Drop"));
            }
            return 0;
        }
        Poison::Unchosen => {
            for &at in &poisoned {
                hold(&records[at], &mut results[at], "no park destination was chosen (Options::poison)");
            }
            return 0;
        }
        Poison::Park(destination) => destination,
    };
    let parcels: Vec<Parcel> = poisoned.iter().map(|&at| parcel(trigger, &records[at], &results[at], source)).collect();
    let parking = panics::catch(|| destination.park(&parcels));
    // Bounded by the deadline: an answer that names the unparked poison beats no answer, after
    // which Lambda would deliver the whole batch again and every parcel would be sent again.
    let parking = async {
        match park_budget(context, options) {
            Some(budget) => tokio::time::timeout(budget, parking).await.unwrap_or_else(|_| {
                Ok(vec![Err("parking outlasted the invocation's deadline".to_owned()); parcels.len()])
            }),
            None => parking.await,
        }
    };
    let parked = match parking.await {
        Ok(parked) => parked,
        Err(panic) => vec![Err(format!("the park destination panicked: {panic}")); parcels.len()],
    };
    let mut count = 0;
    for (at, (&position, parcel)) in poisoned.iter().zip(&parcels).enumerate() {
        let record = &records[position];
        match parked.get(at) {
            Some(Ok(())) => {
                count += 1;
                record.span().in_scope(|| tracing::warn!(coordinates = %parcel.coordinates, "record parked"));
            }
            Some(Err(why)) => {
                hold(record, &mut results[position], &format!("parking it failed: {}", redact_emails(why)))
            }
            None => hold(record, &mut results[position], "the park destination did not answer for it"),
        }
    }
    count
}

/// How long parking may take: until half the deadline margin before the deadline, time enough
/// to answer; `None` when the context has no deadline.
fn park_budget(context: &Context, options: &Options) -> Option<Duration> {
    budget_keeping(context, options.deadline_margin / 2)
}

/// The time left before the deadline but `keep`; `None` when the context has no deadline.
pub(super) fn budget_keeping(context: &Context, keep: Duration) -> Option<Duration> {
    let deadline = effectively_once::epoch_deadline_ms(context.deadline)?;
    Some(Duration::from_millis(deadline.saturating_sub(now_ms() + keep.as_millis() as u64)))
}

/// A permanent failure that was not parked, held: retryable, so the position stays at it.
fn hold<R: Record>(record: &R, result: &mut RecordResult, why: &str) {
    let reason = result.as_ref().err().map(|e| redact_emails(&e.reason)).unwrap_or_default();
    record.span().in_scope(|| tracing::error!(why, "record failed permanently and is held: not parked"));
    *result = Err(RecordError::retryable(format!("failed permanently ({reason}), held: {why}")));
}

/// The parcel of a record that failed permanently.
fn parcel<R: Record>(trigger: &str, record: &R, result: &RecordResult, source: &Source) -> Parcel {
    Parcel {
        trigger: trigger.to_owned(),
        event_source_arn: record.source_arn().map(str::to_owned).or_else(|| source.event_source_arn.clone()),
        coordinates: record.coordinates().unwrap_or(Coordinates::DynamoDb { sequence_number: String::new() }),
        reason: park::bounded(result.as_ref().err().map(|e| redact_emails(&e.reason)).unwrap_or_default()),
        record: serde_json::to_value(record).unwrap_or_default(),
        bootstrap_servers: source.bootstrap_servers.clone(),
    }
}
