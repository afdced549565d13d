//! An event source mapping emulator that behaves as Lambda documents, not kinder: SQS is polled,
//! each batch invokes the function, only the messages the answer lets through are deleted, and
//! the rest come back after the visibility timeout until the redrive policy moves them to the
//! DLQ ([`sqs`]); the outbox stream is read through shard iterators, retried, bisected, aged and
//! discarded to the on-failure destination as the template's mapping says ([`stream`]). The
//! settings come from `apps/payments/template.json` ([`crate::resources::mapping_settings`]), so local
//! and cloud agree. [`queue`] holds the queue utilities (depth, redrive, a look at a queue),
//! [`replay`] and [`parked`] replay the stream mappings' on-failure destinations and the stream
//! drivers' park destination after a fix, and [`Emulator`] runs both mappings until the pipeline
//! is drained.

pub mod checkpoint;
pub mod kafka;
pub mod kinesis;
pub mod parked;
pub mod queue;
pub mod replay;
pub mod sqs;
pub mod stream;

use std::time::Duration;

pub use checkpoint::{Settings, StreamPoll};
pub use kinesis::{discarded_records, kinesis_response, poll_kinesis, replay_kinesis_failures, KinesisMapping};
pub use parked::{replay_parked, Targets};
pub use queue::{peek_bodies, queue_depth, redrive};
pub use replay::{Kept, Replayed};
pub use sqs::{poll_sqs, sqs_event, sqs_response, SqsMapping, SqsPoll};
pub use stream::{poll_stream, replay_stream_failures, stream_response, StreamMapping};

use crate::error::Result;
use crate::invoke::{SqsFunction, StreamFunction};
use crate::pipeline::Pipeline;
use crate::progress::Tracker;
use crate::resources::{Clients, Resources};

/// Progress of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// SQS deliveries so far.
    pub deliveries: usize,
    /// SQS messages reported failed so far.
    pub failed: usize,
    /// Stream records delivered so far.
    pub stream_records: usize,
}

impl std::ops::Add for Progress {
    type Output = Progress;

    fn add(self, other: Progress) -> Progress {
        Progress {
            deliveries: self.deliveries + other.deliveries,
            failed: self.failed + other.failed,
            stream_records: self.stream_records + other.stream_records,
        }
    }
}

/// Messages a producer sends while the consumers run, a few per round, so the queue holds what
/// a live one would rather than the whole workload at once.
#[derive(Debug, Clone, Default)]
pub struct Feed {
    bodies: Vec<String>,
    next: usize,
    per_round: usize,
}

impl Feed {
    /// Sends `per_round` of `bodies` before each round.
    pub fn new(bodies: Vec<String>, per_round: usize) -> Self {
        Feed { bodies, next: 0, per_round: per_round.max(1) }
    }

    fn is_done(&self) -> bool {
        self.next >= self.bodies.len()
    }

    /// Sends this round's share to `queue_url`.
    async fn send(&mut self, clients: &Clients, queue_url: &str) -> Result<()> {
        if self.is_done() {
            return Ok(());
        }
        let end = (self.next + self.per_round).min(self.bodies.len());
        crate::workload::send(&clients.sqs, queue_url, &self.bodies[self.next..end]).await?;
        self.next = end;
        Ok(())
    }
}

/// The two event source mappings of the pipeline and the functions they invoke: the payments
/// queue's and the outbox stream's.
#[derive(Debug)]
pub struct Emulator<P, R> {
    /// The payments queue's mapping.
    pub sqs: SqsMapping,
    /// The outbox stream's mapping, with its checkpoint.
    pub stream: StreamMapping,
    /// The function the queue invokes.
    pub payments: P,
    /// The function the stream invokes.
    pub relay: R,
    /// Concurrent SQS pollers.
    pub pollers: usize,
}

impl<P: SqsFunction, R: StreamFunction> Emulator<P, R> {
    /// The template's mappings on `resources` (the stream's discarded batches to its on-failure
    /// queue), one poller.
    pub fn new(resources: &Resources, payments: P, relay: R) -> Self {
        Emulator {
            sqs: SqsMapping::new(&resources.queue_url),
            stream: StreamMapping::new(&resources.outbox_table, Some(resources.failures_url.clone())),
            payments,
            relay,
            pollers: 1,
        }
    }

    /// With `pollers` concurrent SQS pollers (at least one).
    pub fn pollers(mut self, pollers: usize) -> Self {
        self.pollers = pollers.max(1);
        self
    }

    /// Runs the SQS pollers and the stream poller until the queue is empty and the stream has
    /// nothing new, twice in a row. `on_progress` sees the totals after each round.
    pub async fn run_until_drained(
        &mut self,
        clients: &Clients,
        on_progress: impl FnMut(Progress),
    ) -> Result<Progress> {
        self.run_fed(clients, &mut Feed::default(), on_progress).await
    }

    /// [`Emulator::run_until_drained`], with a producer sending `feed` as it goes.
    pub async fn run_fed(
        &mut self,
        clients: &Clients,
        feed: &mut Feed,
        mut on_progress: impl FnMut(Progress),
    ) -> Result<Progress> {
        let mut progress = Progress::default();
        let mut idle = 0;
        while idle < 2 {
            feed.send(clients, &self.sqs.queue_url).await?;
            let round = self.round(clients).await?;
            progress = progress + round;
            on_progress(progress);
            // The depth is asked only when a round found nothing: on the local AWS it costs time
            // in proportion to the queue.
            let busy = round.deliveries > 0
                || round.stream_records > 0
                || !feed.is_done()
                || queue_depth(clients, &self.sqs.queue_url).await? > 0;
            idle = if busy { 0 } else { idle + 1 };
            if round.deliveries == 0 {
                // Nothing visible: messages in flight come back after their visibility timeout.
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Ok(progress)
    }

    /// One poll of each SQS poller, at once, then one of the stream.
    async fn round(&mut self, clients: &Clients) -> Result<Progress> {
        let pollers = (0..self.pollers.max(1)).map(|_| poll_sqs(clients, &self.sqs, &self.payments));
        let mut round = Progress::default();
        for poll in futures_util::future::join_all(pollers).await {
            let poll = poll?;
            round.deliveries += poll.received;
            round.failed += poll.failed;
        }
        round.stream_records = poll_stream(clients, &mut self.stream, &self.relay).await?.delivered;
        Ok(round)
    }

    /// Runs `feed` through the pipeline until drained, then moves the DLQ back to the queue, as
    /// after a bug fix, and drains again: what the demo and the chaos scenario do. Returns how
    /// many messages the redrive moved.
    pub async fn run_and_redrive(
        &mut self,
        pipeline: &Pipeline,
        feed: &mut Feed,
        tracker: &mut Tracker,
    ) -> Result<usize> {
        let (clients, resources) = (&pipeline.clients, &pipeline.resources);
        let first = self.run_fed(clients, feed, |p| tracker.show(p)).await?;
        tracker.phase_done("producer and consumers until drained", first);
        // Poison is still poison, a reused key still reused, a record that always panics still
        // panics; the rest is harmless because every effect is keyed.
        let redriven = redrive(clients, &resources.dlq_url, &resources.queue_url).await?;
        tracker.expect_more(redriven * resources.max_receive_count as usize);
        let second = self.run_until_drained(clients, |p| tracker.show(p)).await?;
        tracker.phase_done("DLQ redrive, drained again", second);
        Ok(redriven)
    }

    /// Passes the stream's checkpoint over what earlier runs left on it (handing it to the
    /// relay, which finds those receipts done): this run's rows come after it.
    pub async fn skip_stream_backlog(&mut self, clients: &Clients) -> Result<()> {
        while poll_stream(clients, &mut self.stream, &self.relay).await?.delivered > 0 {}
        Ok(())
    }
}
