//! The idempotency record: one per key, as the store keeps it, and what it means for a
//! duplicate ([`Record::replay`]).

use std::fmt;

use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorKind};
use crate::hash::{HashVersion, PayloadHash};

/// The state of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// An attempt holds the key until its lease ends.
    InProgress,
    /// The handler finished; the record holds its response. A rejected business outcome is a
    /// completed record too, so a duplicate gets the same answer.
    Completed,
}

impl Status {
    /// The stored form: `IN_PROGRESS` or `COMPLETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "IN_PROGRESS",
            Status::Completed => "COMPLETED",
        }
    }

    /// Parses the stored form.
    pub fn parse(text: &str) -> Option<Status> {
        match text {
            "IN_PROGRESS" => Some(Status::InProgress),
            "COMPLETED" => Some(Status::Completed),
            _ => None,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An idempotency record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Record {
    /// `{prefix}#{business key}`, the store's partition key.
    pub id: String,
    /// In progress or completed.
    pub status: Status,
    /// End of the in-progress lease, in milliseconds since the Unix epoch. After it, another
    /// attempt may take the key over.
    pub lease_expires_at_ms: u64,
    /// End of the dedup window, in seconds since the Unix epoch (DynamoDB's TTL unit). After it,
    /// the key is claimable again as if new.
    pub expiration_s: u64,
    /// Hash of the canonical payload: the same key with another payload is an error. Tagged with
    /// its version (`v2:{hex}`; untagged hex is version 1), compared under that version
    /// ([`PayloadHash::matches`](crate::PayloadHash::matches)).
    pub payload_hash: String,
    /// The token of the attempt that claimed the record.
    pub owner: String,
    /// The handler's response as JSON; `None` while in progress, or when it was too large to keep.
    pub response: Option<String>,
}

impl Record {
    /// A record in progress: `owner`'s attempt holds `id` until `lease_expires_at_ms`, and the
    /// key stays deduplicated until `expiration_s`. No response yet.
    pub fn in_progress(
        id: impl Into<String>,
        payload_hash: impl Into<String>,
        owner: impl Into<String>,
        lease_expires_at_ms: u64,
        expiration_s: u64,
    ) -> Record {
        Record {
            id: id.into(),
            status: Status::InProgress,
            lease_expires_at_ms,
            expiration_s,
            payload_hash: payload_hash.into(),
            owner: owner.into(),
            response: None,
        }
    }

    /// A completed record written with its effect, outside claim and complete (commit once, a
    /// recorded answer, a carried record read back): no owner, no lease, and `response` (JSON)
    /// replayed to every duplicate until `expiration_s`.
    pub fn completed(
        id: impl Into<String>,
        payload_hash: impl Into<String>,
        response: Option<String>,
        expiration_s: u64,
    ) -> Record {
        Record {
            id: id.into(),
            status: Status::Completed,
            lease_expires_at_ms: 0,
            expiration_s,
            payload_hash: payload_hash.into(),
            owner: String::new(),
            response,
        }
    }

    /// Whether this record still blocks a claim at `now_ms`: the same predicate, negated, as
    /// the conditional write a store claims with.
    pub fn blocks_claim_at(&self, now_ms: u64) -> bool {
        let expired = self.expiration_s < now_ms / 1000;
        let lease_over = self.status == Status::InProgress && self.lease_expires_at_ms < now_ms;
        !(expired || lease_over)
    }
}

impl Record {
    /// What a record that blocked a claim means for a payload hashing to `payload`: the
    /// stored response of a completed record (a replay), or why there is none: key reused with
    /// another payload (permanent), in progress elsewhere (retryable), response not kept. The
    /// payload is compared under the hash version the record carries ([`PayloadHash::matches`]).
    pub fn replay<R: DeserializeOwned>(&self, payload: &PayloadHash) -> Result<R, Error> {
        if !payload.matches(&self.payload_hash) {
            let why = match HashVersion::of(&self.payload_hash) {
                Some(_) => String::new(),
                None => format!(
                    " (or the same one, under a payload hash version this build does not know: {:?}, \
                     written by a newer build)",
                    self.payload_hash.split_once(':').map_or("", |(v, _)| v)
                ),
            };
            return Err(Error::key_reused_because(&self.id, &why));
        }
        match (&self.status, &self.response) {
            (Status::InProgress, _) => Err(Error::in_progress(&self.id, Some(self.lease_expires_at_ms))),
            (Status::Completed, Some(json)) => serde_json::from_str(json).map_err(|e| {
                Error::new(ErrorKind::Serialization, format!("stored response of {} does not deserialise", self.id))
                    .with_source(e)
            }),
            (Status::Completed, None) => Err(Error::new(
                ErrorKind::ResponseTooLarge,
                format!("key {} completed, but its response was too large to keep", self.id),
            )),
        }
    }
}
