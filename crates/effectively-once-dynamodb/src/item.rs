//! The record as a DynamoDB item: its own item ([`attr`]), or carried on a business item
//! ([`carried`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use effectively_once::{protocol, Claim, Record, Status, StoreError, StoreErrorKind};

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
    /// Prefix of the attributes that keep, while the record is in progress, the record its
    /// claim replaced (`replaced_status`, `replaced_lease_expires_at`, ...; `replaced_status`
    /// is NULL when the key was free). A claim whose answer was lost is sent again, meets its
    /// own record and learns from them what its first write replaced.
    pub const REPLACED: &str = "replaced_";
    /// Prefix of the attributes that keep, while in progress, the record the run of takeovers
    /// this claim continued began with (see `effectively_once::protocol::Stored`); absent when
    /// that is the replaced record itself.
    pub const FIRST: &str = "first_";
}

/// Attributes a carried record adds to its carrier item. They share a reserved prefix, so they
/// cannot collide with the caller's own attributes: a carrier item that already holds an
/// attribute under the prefix is refused before sending, never overwritten.
pub mod carried {
    /// The prefix no caller attribute may use.
    pub const RESERVED_PREFIX: &str = "__once_";
    /// The idempotency key (S), `{prefix}#{business key}`.
    pub const KEY: &str = "__once_key";
    /// Hash of the canonical payload (S).
    pub const PAYLOAD_HASH: &str = "__once_payload_hash";
    /// The stored response, JSON (S).
    pub const RESPONSE: &str = "__once_response";

    /// The names carried records had before the reserved prefix (a ledger entry written by an
    /// earlier build): still read, never written.
    pub mod legacy {
        /// The idempotency key (S).
        pub const KEY: &str = "idempotency_key";
        /// Hash of the canonical payload (S).
        pub const PAYLOAD_HASH: &str = "payload_hash";
        /// The stored response, JSON (S).
        pub const RESPONSE: &str = "response";
    }
}

/// The expiration of a record that never expires: DynamoDB's TTL deletes only items whose
/// expiration has passed, and the claim condition's `expiration < now` never holds for it.
pub const NEVER_EXPIRES: u64 = u64::MAX;

/// A DynamoDB item.
type Item = HashMap<String, AttributeValue>;

/// The attributes of a record that `replaced_*` and `first_*` copy (all but the id).
const COPIED: [&str; 6] =
    [attr::STATUS, attr::LEASE_EXPIRES_AT, attr::EXPIRATION, attr::PAYLOAD_HASH, attr::OWNER, attr::RESPONSE];

/// The `replaced_*` and `first_*` attribute names, for a completion's `REMOVE`.
pub(crate) fn copies() -> impl Iterator<Item = String> {
    [attr::REPLACED, attr::FIRST]
        .into_iter()
        .flat_map(|prefix| COPIED.iter().map(move |name| format!("{prefix}{name}")))
}

/// The claim's item: `record`, what its claim replaced (`None`: the key was free) and the
/// run's first record (kept when it is not the replaced one).
pub(crate) fn claim_item(
    record: &Record,
    replaced: Option<&Record>,
    first: Option<&Record>,
) -> HashMap<String, AttributeValue> {
    let mut item = to_item(record);
    let Some(replaced) = replaced else {
        item.insert(format!("{}{}", attr::REPLACED, attr::STATUS), AttributeValue::Null(true));
        return item;
    };
    for (prefix, copied) in [(attr::REPLACED, Some(replaced)), (attr::FIRST, first.filter(|f| *f != replaced))] {
        for (name, value) in copied.map(to_item).into_iter().flatten() {
            if name != attr::ID {
                item.insert(format!("{prefix}{name}"), value);
            }
        }
    }
    item
}

/// The claim's item over an item that does not decode: its attributes kept raw as `replaced_*`
/// (`replaced_status` set to `UNREADABLE` unless it is a string), so the claim's retry, and every claim
/// that continues its run, find the copy unreadable and answer `AcquiredOverUnreadable`.
pub(crate) fn claim_item_over_unreadable(record: &Record, unreadable: &Item) -> Item {
    let mut item = to_item(record);
    copy_raw(unreadable, "", attr::REPLACED, &mut item);
    // A status that is no string (missing, or NULL: the mark of a free key) becomes one no
    // record has, so the copy never reads as "replaced nothing".
    let status = format!("{}{}", attr::REPLACED, attr::STATUS);
    if !matches!(item.get(&status), Some(AttributeValue::S(_))) {
        item.insert(status, AttributeValue::S("UNREADABLE".into()));
    }
    item
}

/// The claim's item over `existing`, in progress, whose run's first record is unknown: the
/// unreadable copy `seen` keeps (its `first_*`, else its `replaced_*`) is passed on raw.
pub(crate) fn claim_item_unknown_first(record: &Record, existing: &Record, seen: &Item) -> Item {
    let mut item = claim_item(record, Some(existing), None);
    let has_first = seen.contains_key(&format!("{}{}", attr::FIRST, attr::STATUS));
    copy_raw(seen, if has_first { attr::FIRST } else { attr::REPLACED }, attr::FIRST, &mut item);
    item
}

/// Copies the record attributes under `from_prefix` in `from` to `into`, under `to_prefix`, as
/// they are.
fn copy_raw(from: &Item, from_prefix: &str, to_prefix: &str, into: &mut Item) {
    for name in COPIED {
        if let Some(value) = from.get(&format!("{from_prefix}{name}")) {
            into.insert(format!("{to_prefix}{name}"), value.clone());
        }
    }
}

/// The claim's answer for an in-progress item's own attempt, from its `replaced_*` and
/// `first_*` attributes: `None` when they are absent (an item written before they were kept:
/// what it replaced is unknown); a copy that does not decode is `AcquiredOverUnreadable`.
pub(crate) fn claim_answer(item: &HashMap<String, AttributeValue>) -> Option<Claim> {
    let copied = |prefix: &str| -> Option<Result<Record, StoreError>> {
        item.get(&format!("{prefix}{}", attr::STATUS))?;
        let mut old: HashMap<String, AttributeValue> = COPIED
            .iter()
            .filter_map(|name| item.get(&format!("{prefix}{name}")).map(|v| ((*name).to_owned(), v.clone())))
            .collect();
        old.insert(attr::ID.to_owned(), item.get(attr::ID)?.clone());
        Some(from_item(&old))
    };
    if let AttributeValue::Null(_) = item.get(&format!("{}{}", attr::REPLACED, attr::STATUS))? {
        return Some(Claim::Acquired { replaced: None });
    }
    match (copied(attr::REPLACED)?, copied(attr::FIRST).transpose()) {
        (Ok(replaced), Ok(first)) => {
            let first = first.unwrap_or_else(|| replaced.clone());
            Some(protocol::acquired(Some(replaced), Some(first)))
        }
        _ => Some(Claim::AcquiredOverUnreadable),
    }
}

/// Encodes a record. Numbers are integers: TTL ignores anything else (TypeScript #2298 stored a
/// float and records never expired).
pub(crate) fn to_item(record: &Record) -> HashMap<String, AttributeValue> {
    into_item(record.clone())
}

/// [`to_item`], moving the record's strings into the item.
pub(crate) fn into_item(record: Record) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::with_capacity(7);
    item.insert(attr::ID.to_owned(), AttributeValue::S(record.id));
    item.insert(attr::STATUS.to_owned(), AttributeValue::S(record.status.as_str().to_owned()));
    item.insert(attr::LEASE_EXPIRES_AT.to_owned(), AttributeValue::N(record.lease_expires_at_ms.to_string()));
    item.insert(attr::EXPIRATION.to_owned(), AttributeValue::N(record.expiration_s.to_string()));
    item.insert(attr::PAYLOAD_HASH.to_owned(), AttributeValue::S(record.payload_hash));
    item.insert(attr::OWNER.to_owned(), AttributeValue::S(record.owner));
    if let Some(response) = record.response {
        item.insert(attr::RESPONSE.to_owned(), AttributeValue::S(response));
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

/// Reads the record a carrier item holds, under the reserved names or, for an item written by an
/// earlier build, the legacy ones ([`carried::legacy`]).
pub fn record_carried_by(item: &HashMap<String, AttributeValue>) -> Result<Record, StoreError> {
    let names = if item.contains_key(carried::KEY) {
        [carried::KEY, carried::PAYLOAD_HASH, carried::RESPONSE]
    } else {
        [carried::legacy::KEY, carried::legacy::PAYLOAD_HASH, carried::legacy::RESPONSE]
    };
    let string = |name: &str| match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v.clone()),
        _ => Err(StoreError::new(StoreErrorKind::Malformed, format!("carried record: {name} missing"))),
    };
    Ok(Record::completed(string(names[0])?, string(names[1])?, string(names[2]).ok(), NEVER_EXPIRES))
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
