//! The idempotency record: one per key, as the store keeps it.

use std::fmt;

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
    /// Whether this record still blocks a claim at `now_ms`: the same predicate, negated, as
    /// the conditional write a store claims with.
    pub fn blocks_claim_at(&self, now_ms: u64) -> bool {
        let expired = self.expiration_s < now_ms / 1000;
        let lease_over = self.status == Status::InProgress && self.lease_expires_at_ms < now_ms;
        !(expired || lease_over)
    }
}
