//! Event source mapping emulators that behave as Lambda documents, not kinder: SQS is polled,
//! each batch invokes the function, only the messages the answer lets through are deleted, and
//! the rest come back after the visibility timeout until the redrive policy moves them to the
//! DLQ ([`sqs`]); a DynamoDB stream ([`stream`]) or a Kinesis stream ([`kinesis`]) is read
//! through shard iterators, retried, bisected, aged and discarded to the on-failure destination
//! as the mapping says; a Kafka topic is read by a consumer group ([`kafka`]). The settings are
//! a template's ([`crate::resources::mapping_settings`]), so local and cloud agree, or the
//! defaults of [`crate::resources::MappingSettings`]. [`queue`] holds the queue utilities
//! (sending, depth, redrive, a look at a queue), [`replay`] and [`parked`] replay the stream
//! mappings' on-failure destinations and the stream drivers' park destination after a fix, and
//! [`Emulator`] runs a queue's mapping and a stream's together until both are drained.

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
pub use crate::progress::Progress;
use crate::progress::Tracker;
use crate::resources::Clients;

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
        queue::send(&clients.sqs, queue_url, &self.bodies[self.next..end]).await?;
        self.next = end;
        Ok(())
    }
}

/// A queue's event source mapping and a table stream's, each with the function it invokes: an
/// application whose first function writes what its second reads from the stream (an outbox).
#[derive(Debug)]
pub struct Emulator<P, R> {
    /// The queue's mapping.
    pub sqs: SqsMapping,
    /// The stream's mapping, with its checkpoint.
    pub stream: StreamMapping,
    /// The function the queue invokes.
    pub on_queue: P,
    /// The function the stream invokes.
    pub on_stream: R,
    /// Concurrent SQS pollers.
    pub pollers: usize,
    /// The queue's dead-letter queue and its `maxReceiveCount`, for [`Emulator::run_and_redrive`].
    pub dead_letter: Option<(String, u32)>,
}

impl<P: SqsFunction, R: StreamFunction> Emulator<P, R> {
    /// The two mappings, invoking `on_queue` and `on_stream`, one poller, no DLQ.
    pub fn new(sqs: SqsMapping, stream: StreamMapping, on_queue: P, on_stream: R) -> Self {
        Emulator { sqs, stream, on_queue, on_stream, pollers: 1, dead_letter: None }
    }

    /// With the queue's dead-letter queue at `dlq_url`, which the redrive policy moves a message
    /// to after `max_receive_count` receives.
    pub fn dead_letter(mut self, dlq_url: &str, max_receive_count: u32) -> Self {
        self.dead_letter = Some((dlq_url.to_owned(), max_receive_count));
        self
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
        let pollers = (0..self.pollers.max(1)).map(|_| poll_sqs(clients, &self.sqs, &self.on_queue));
        let mut round = Progress::default();
        for poll in futures_util::future::join_all(pollers).await {
            let poll = poll?;
            round.deliveries += poll.received;
            round.failed += poll.failed;
        }
        round.stream_records = poll_stream(clients, &mut self.stream, &self.on_stream).await?.delivered;
        Ok(round)
    }

    /// Runs `feed` until drained, then moves the DLQ ([`Emulator::dead_letter`]) back to the
    /// queue, as after a bug fix, and drains again. Returns how many messages the redrive moved.
    pub async fn run_and_redrive(
        &mut self,
        clients: &Clients,
        feed: &mut Feed,
        tracker: &mut Tracker,
    ) -> Result<usize> {
        let (dlq_url, max_receive_count) = self.dead_letter.clone().ok_or("the queue's mapping has no DLQ")?;
        let first = self.run_fed(clients, feed, |p| tracker.show(p)).await?;
        tracker.phase_done("producer and consumers until drained", first);
        // Poison is still poison, a reused key still reused, a record that always panics still
        // panics; the rest is harmless when every effect is keyed.
        let redriven = redrive(clients, &dlq_url, &self.sqs.queue_url).await?;
        tracker.expect_more(redriven * max_receive_count as usize);
        let second = self.run_until_drained(clients, |p| tracker.show(p)).await?;
        tracker.phase_done("DLQ redrive, drained again", second);
        Ok(redriven)
    }

    /// Passes the stream's checkpoint over what earlier runs left on it (handing it to the
    /// stream's function, which finds those records done): this run's rows come after it.
    pub async fn skip_stream_backlog(&mut self, clients: &Clients) -> Result<()> {
        while poll_stream(clients, &mut self.stream, &self.on_stream).await?.delivered > 0 {}
        Ok(())
    }
}
