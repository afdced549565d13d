//! The record as a DynamoDB item.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{Record, Status, StoreError, StoreErrorKind};

/// Attribute names of the record item.
pub mod attr {
    /// Partition key (S): `{prefix}#{business key}`.
    pub const ID: &str = "id";
    /// `IN_PROGRESS` or `COMPLETED` (S).
    pub const STATUS: &str = "status";
    /// End of the in-progress lease, ms since the epoch (N).
    pub const LEASE_EXPIRES_AT: &str = "lease_expires_at";
    /// End of the dedup window, s since the epoch (N); the table's TTL attribute.
    pub const EXPIRATION: &str = "expiration";
    /// SHA-256 of the canonical payload, hex (S).
    pub const PAYLOAD_HASH: &str = "payload_hash";
    /// The owning attempt's token (S).
    pub const OWNER: &str = "owner";
    /// The stored response, JSON (S); absent while in progress.
    pub const RESPONSE: &str = "response";
    /// While in progress: the `status` of the record the claim replaced, or NULL when the key
    /// was free. With the other `replaced_*` attributes, it tells a claim whose answer was lost
    /// (and which meets its own record on the retry) what its first write replaced.
    pub const REPLACED_STATUS: &str = "replaced_status";
    /// While in progress: the replaced record's `lease_expires_at` (or NULL).
    pub const REPLACED_LEASE_EXPIRES_AT: &str = "replaced_lease_expires_at";
    /// While in progress: the replaced record's `expiration` (or NULL).
    pub const REPLACED_EXPIRATION: &str = "replaced_expiration";
    /// While in progress: the replaced record's `payload_hash` (or NULL).
    pub const REPLACED_PAYLOAD_HASH: &str = "replaced_payload_hash";
    /// While in progress: the replaced record's `owner` (or NULL).
    pub const REPLACED_OWNER: &str = "replaced_owner";
    /// While in progress: the replaced record's `response` (or NULL, also when it had none).
    pub const REPLACED_RESPONSE: &str = "replaced_response";
}

/// Each record attribute and the attribute that keeps its value from the replaced record.
pub(crate) const REPLACED: [(&str, &str); 6] = [
    (attr::STATUS, attr::REPLACED_STATUS),
    (attr::LEASE_EXPIRES_AT, attr::REPLACED_LEASE_EXPIRES_AT),
    (attr::EXPIRATION, attr::REPLACED_EXPIRATION),
    (attr::PAYLOAD_HASH, attr::REPLACED_PAYLOAD_HASH),
    (attr::OWNER, attr::REPLACED_OWNER),
    (attr::RESPONSE, attr::REPLACED_RESPONSE),
];

/// What the claim of an in-progress item replaced, from its `replaced_*` attributes: `None`
/// when they are absent (an item written before they were kept, or by another writer: unknown),
/// `Some(None)` when the key was free, else the replaced record.
pub(crate) fn replaced_from_item(item: &HashMap<String, AttributeValue>) -> Option<Result<Option<Record>, StoreError>> {
    match item.get(attr::REPLACED_STATUS)? {
        AttributeValue::Null(_) => Some(Ok(None)),
        _ => {
            let mut old: HashMap<String, AttributeValue> = REPLACED
                .iter()
                .filter_map(|(name, kept)| match item.get(*kept) {
                    None | Some(AttributeValue::Null(_)) => None,
                    Some(value) => Some(((*name).to_owned(), value.clone())),
                })
                .collect();
            old.insert(attr::ID.to_owned(), item.get(attr::ID)?.clone());
            Some(from_item(&old).map(Some))
        }
    }
}

/// Encodes a record. Numbers are integers: TTL ignores anything else (TypeScript #2298 stored a
/// float and records never expired).
pub(crate) fn to_item(record: &Record) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        (attr::ID.to_owned(), AttributeValue::S(record.id.clone())),
        (attr::STATUS.to_owned(), AttributeValue::S(record.status.as_str().to_owned())),
        (attr::LEASE_EXPIRES_AT.to_owned(), AttributeValue::N(record.lease_expires_at_ms.to_string())),
        (attr::EXPIRATION.to_owned(), AttributeValue::N(record.expiration_s.to_string())),
        (attr::PAYLOAD_HASH.to_owned(), AttributeValue::S(record.payload_hash.clone())),
        (attr::OWNER.to_owned(), AttributeValue::S(record.owner.clone())),
    ]);
    if let Some(response) = &record.response {
        item.insert(attr::RESPONSE.to_owned(), AttributeValue::S(response.clone()));
    }
    item
}

/// Decodes a record item.
pub(crate) fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Record, StoreError> {
    let string = |name: &str| -> Result<String, StoreError> {
        match item.get(name) {
            Some(AttributeValue::S(v)) => Ok(v.clone()),
            _ => Err(malformed(item, name)),
        }
    };
    let number = |name: &str| -> Result<u64, StoreError> {
        match item.get(name) {
            Some(AttributeValue::N(v)) => v.parse().map_err(|_| malformed(item, name)),
            _ => Err(malformed(item, name)),
        }
    };
    Ok(Record {
        id: string(attr::ID)?,
        status: Status::parse(&string(attr::STATUS)?).ok_or_else(|| malformed(item, attr::STATUS))?,
        lease_expires_at_ms: number(attr::LEASE_EXPIRES_AT)?,
        expiration_s: number(attr::EXPIRATION)?,
        payload_hash: string(attr::PAYLOAD_HASH)?,
        owner: string(attr::OWNER)?,
        response: match item.get(attr::RESPONSE) {
            Some(AttributeValue::S(v)) => Some(v.clone()),
            None => None,
            Some(_) => return Err(malformed(item, attr::RESPONSE)),
        },
    })
}

fn malformed(item: &HashMap<String, AttributeValue>, name: &str) -> StoreError {
    let id = match item.get(attr::ID) {
        Some(AttributeValue::S(id)) => id.as_str(),
        _ => "?",
    };
    StoreError::new(StoreErrorKind::Malformed, format!("record {id}: attribute {name} missing or of the wrong type"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut r = Record {
            id: "p#k".into(),
            status: Status::InProgress,
            lease_expires_at_ms: 1_800_000_000_123,
            expiration_s: 1_800_000_000,
            payload_hash: "ab".into(),
            owner: "o".into(),
            response: None,
        };
        assert_eq!(from_item(&to_item(&r)).unwrap(), r);
        r.status = Status::Completed;
        r.response = Some("{}".into());
        assert_eq!(from_item(&to_item(&r)).unwrap(), r);
        let mut bad = to_item(&r);
        bad.insert(attr::EXPIRATION.into(), AttributeValue::N("1.5".into()));
        assert_eq!(from_item(&bad).unwrap_err().kind(), StoreErrorKind::Malformed);
    }
}
