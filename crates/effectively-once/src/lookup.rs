//! Reading a key's stored answer without claiming it: [`Idempotency::get`].

use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorKind};
use crate::idempotency::Idempotency;
use crate::key::Key;
use crate::record::{Record, Status};
use crate::store::Store;

/// What the store holds for a key, as [`Idempotency::get`] reads it at the configured clock's
/// now. Each case says what the next delivery of that key would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<R> {
    /// No record, or one past its dedup window: the next delivery runs the handler.
    Absent,
    /// An attempt holds the key and its lease lasts: the next delivery is refused as in
    /// progress ([`ErrorKind::InProgress`]) until the lease ends.
    InProgress {
        /// When the lease ends, in milliseconds since the Unix epoch.
        lease_expires_at_ms: u64,
    },
    /// An attempt claimed the key and its lease ended before it completed: it crashed, timed
    /// out or was cut off, maybe mid-effect. The next delivery takes the key over
    /// ([`Attempt::took_over`](crate::Attempt::took_over)) and runs the handler again.
    Stalled {
        /// When the lease ended, in milliseconds since the Unix epoch.
        lease_expired_at_ms: u64,
    },
    /// Completed within its dedup window: the response a duplicate is answered with.
    Completed(R),
    /// Completed within its dedup window, but the response was too large to keep: the handler
    /// will not run again, and a duplicate gets [`ErrorKind::ResponseTooLarge`].
    CompletedWithoutResponse,
}

impl<R> Lookup<R> {
    /// The stored response, when the key completed with one.
    pub fn completed(self) -> Option<R> {
        match self {
            Lookup::Completed(response) => Some(response),
            _ => None,
        }
    }

    /// Whether the next delivery of this key would run the handler (no live record, or a
    /// stalled one it takes over).
    pub fn would_run(&self) -> bool {
        matches!(self, Lookup::Absent | Lookup::Stalled { .. })
    }

    /// Reads a record at `now_ms`, as a claim at that instant would judge it
    /// ([`Record::blocks_claim_at`]).
    fn of(record: Option<Record>, now_ms: u64) -> Result<Lookup<R>, Error>
    where
        R: DeserializeOwned,
    {
        let Some(record) = record else { return Ok(Lookup::Absent) };
        // The same test as the claim's condition: past its window, the record is as good as gone
        // (DynamoDB's TTL deletes it some time later, not at once).
        if record.expiration_s < now_ms / 1000 {
            return Ok(Lookup::Absent);
        }
        match (record.status, record.response) {
            (Status::InProgress, _) if record.lease_expires_at_ms < now_ms => {
                Ok(Lookup::Stalled { lease_expired_at_ms: record.lease_expires_at_ms })
            }
            (Status::InProgress, _) => Ok(Lookup::InProgress { lease_expires_at_ms: record.lease_expires_at_ms }),
            (Status::Completed, None) => Ok(Lookup::CompletedWithoutResponse),
            (Status::Completed, Some(json)) => serde_json::from_str(&json).map(Lookup::Completed).map_err(|e| {
                Error::new(ErrorKind::Serialization, format!("stored response of {} does not deserialise", record.id))
                    .with_source(e)
            }),
        }
    }
}

impl<S: Store> Idempotency<S> {
    /// Reads what the store holds for `key`, with its stored response deserialised as `R`: one
    /// read, no claim, nothing written. For answering "what became of event X?" (a status
    /// endpoint, an audit, a test) from the record a duplicate would be answered with.
    ///
    /// Judged at the configured clock's now, as a claim would be: a record past its dedup
    /// window is [`Lookup::Absent`] even while the table still holds it. No payload is given,
    /// so none is compared: a key reused with another payload reads as the first one's answer.
    /// The read is eventually consistent where the store is (DynamoDB's default `GetItem`): a
    /// record completed a moment ago may still read as in progress.
    ///
    /// ```
    /// use effectively_once::{Config, Idempotency, InMemoryStore, Key, Lookup};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let idempotency = Idempotency::new(InMemoryStore::new(), Config::default());
    /// let key = Key::new("orders", "ord_1")?;
    /// assert_eq!(idempotency.get::<String>(&key).await?, Lookup::Absent);
    ///
    /// idempotency.run(&key, &"order", || async { Ok::<_, std::io::Error>("confirmed".to_owned()) }).await?;
    /// assert_eq!(idempotency.get::<String>(&key).await?, Lookup::Completed("confirmed".to_owned()));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Errors: the store's (retryable or not, by kind), and [`ErrorKind::Serialization`] when
    /// the stored response is not an `R`.
    pub async fn get<R: DeserializeOwned>(&self, key: &Key) -> Result<Lookup<R>, Error> {
        let record = self.store().get(key.as_str()).await?;
        Lookup::of(record, self.config().now_ms())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{Begin, Config, InMemoryStore, ManualClock, DEFAULT_DEDUP_WINDOW, DEFAULT_LEASE};

    fn setup() -> (Idempotency<InMemoryStore>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        (Idempotency::new(InMemoryStore::new(), Config::default().with_clock(clock.clone())), clock)
    }

    #[tokio::test]
    async fn a_key_read_through_its_life() {
        let (idem, clock) = setup();
        let key = Key::new("orders", "ord_1").unwrap();
        assert_eq!(idem.get::<u32>(&key).await.unwrap(), Lookup::Absent);

        let Begin::Claimed(attempt) = idem.begin::<_, u32>(&key, &1).await.unwrap() else { panic!("claimed") };
        let lease_end = attempt.lease_expires_at_ms();
        let busy = idem.get::<u32>(&key).await.unwrap();
        assert_eq!(busy, Lookup::InProgress { lease_expires_at_ms: lease_end });
        assert!(!busy.would_run());

        idem.complete(attempt, &7u32).await.unwrap();
        assert_eq!(idem.get::<u32>(&key).await.unwrap(), Lookup::Completed(7));
        assert_eq!(idem.get::<u32>(&key).await.unwrap().completed(), Some(7));

        // Up to the last second of the window it answers; past it, it is gone for a claim and
        // for a read alike, though the store still holds it.
        clock.advance(DEFAULT_DEDUP_WINDOW);
        assert_eq!(idem.get::<u32>(&key).await.unwrap(), Lookup::Completed(7));
        clock.advance(Duration::from_secs(1));
        assert_eq!(idem.get::<u32>(&key).await.unwrap(), Lookup::Absent);
        assert_eq!(idem.store().records().len(), 1);
    }

    #[tokio::test]
    async fn an_attempt_past_its_lease_is_stalled_and_the_next_delivery_runs() {
        let (idem, clock) = setup();
        let key = Key::new("orders", "ord_2").unwrap();
        let Begin::Claimed(attempt) = idem.begin::<_, u32>(&key, &1).await.unwrap() else { panic!("claimed") };
        clock.advance(DEFAULT_LEASE + Duration::from_millis(1));
        let stalled = idem.get::<u32>(&key).await.unwrap();
        assert_eq!(stalled, Lookup::Stalled { lease_expired_at_ms: attempt.lease_expires_at_ms() });
        assert!(stalled.would_run());
        let Begin::Claimed(takeover) = idem.begin::<_, u32>(&key, &1).await.unwrap() else { panic!("taken over") };
        assert!(takeover.took_over());
    }

    #[tokio::test]
    async fn a_response_too_large_to_keep_reads_as_completed_without_it() {
        let clock = Arc::new(ManualClock::new());
        let config = Config::default().with_clock(clock).with_max_response_bytes(4);
        let idem = Idempotency::new(InMemoryStore::new(), config);
        let key = Key::new("orders", "ord_3").unwrap();
        let run = idem.run(&key, &1, || async { Ok::<_, ()>("a long answer".to_owned()) }).await;
        assert!(run.is_err(), "too large to keep");
        assert_eq!(idem.get::<String>(&key).await.unwrap(), Lookup::CompletedWithoutResponse);
    }

    #[tokio::test]
    async fn a_response_of_another_type_is_a_serialization_error() {
        let (idem, _) = setup();
        let key = Key::new("orders", "ord_4").unwrap();
        idem.run(&key, &1, || async { Ok::<_, ()>("text".to_owned()) }).await.unwrap();
        let error = idem.get::<u32>(&key).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Serialization);
        assert_eq!(error.retry(), crate::Retry::AfterFix);
    }
}
