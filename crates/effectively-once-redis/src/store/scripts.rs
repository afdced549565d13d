//! The [`Store`] implementation on Redis: claim, complete and release each one Lua script
//! (`lua/`) the server runs atomically, their expiry arguments, the one resend after a dropped
//! connection, and the records and verdicts read back from their answers.

use std::sync::atomic::Ordering;
use std::sync::LazyLock;

use effectively_once::{Claim, Completion, Record, Status, Store, StoreError, StoreErrorKind};
use redis::Script;

use super::RedisStore;
use crate::error::store_error;

/// A key's longest time to live, about 100 years: a record that "never expires" (the DynamoDB
/// crate's `NEVER_EXPIRES`) lives this long, as `PEXPIRE` takes no larger value safely. The
/// scripts' `MAX_TTL_MS` (`lua/common.lua`) is the same.
const MAX_TTL_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

// Each script is the shared helpers followed by its body; `Script` sends EVALSHA and falls back
// to loading the script on NOSCRIPT (a restarted or failed-over server has an empty cache).
static CLAIM: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("../lua/common.lua"), include_str!("../lua/claim.lua"))));
static COMPLETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("../lua/common.lua"), include_str!("../lua/complete.lua"))));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("../lua/common.lua"), include_str!("../lua/release.lua"))));

impl RedisStore {
    /// The expiry arguments of a key whose record matters until `end_ms`, stated in the
    /// writer's clock: its time to live counted from the writer's `now_ms`, and the server time
    /// (`end_ms` plus the grace) until which the script keeps it at least (see `expire` in
    /// `lua/common.lua`, and [`RedisStore`] on expiry).
    fn expiry(&self, end_ms: u64, now_ms: u64) -> (u64, u64) {
        let grace = u64::try_from(self.expiry_grace.as_millis()).unwrap_or(u64::MAX);
        let ttl = end_ms.saturating_sub(now_ms).saturating_add(grace).clamp(1, MAX_TTL_MS);
        (ttl, end_ms.saturating_add(grace))
    }

    /// Runs `script`, sending it once more if the connection turned out dead before an answer
    /// (after a Lambda sandbox was frozen, a failover, an idle timeout): the client reconnects
    /// on such an error but does not resend. Resending is safe because each script is
    /// idempotent for its owner: a claim that landed meets its own record, a completion its own
    /// completed record, a release the record gone; and a first send that runs late, after its
    /// attempt released its record, meets its owner's fence (see [`RedisStore`] on resends).
    /// Answers whether the answer is a resend's.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        what: &str,
        script: &redis::ScriptInvocation<'_>,
    ) -> Result<(T, bool), StoreError> {
        let mut tries = 0;
        loop {
            tries += 1;
            self.requests.fetch_add(1, Ordering::Relaxed);
            match script.invoke_async(&mut self.connection.clone()).await {
                Ok(value) => return Ok((value, tries > 1)),
                Err(e) if tries == 1 && (e.is_connection_dropped() || e.is_io_error()) => {
                    tracing::debug!(error = %e, "redis {what}: connection lost; sending once more");
                }
                Err(e) => return Err(store_error(what, e)),
            }
        }
    }
}

/// The first millisecond at which a record with this window no longer blocks a claim:
/// `expiration_s < now_ms / 1000` holds from `(expiration_s + 1) * 1000` on.
fn window_end_ms(expiration_s: u64) -> u64 {
    expiration_s.saturating_add(1).saturating_mul(1000)
}

/// Whether a hash field is a released owner's fence (`released:{owner}`, `released_until`; see
/// `lua/common.lua`), kept beside a record, not part of it.
fn is_fence(name: &[u8]) -> bool {
    name == b"released_until" || name.starts_with(b"released:")
}

/// A record from the flat field list `HGETALL` answers (or a script passes back).
fn parse(id: &str, fields: Vec<Vec<u8>>) -> Result<Record, StoreError> {
    let malformed = |what: &str| StoreError::new(StoreErrorKind::Malformed, format!("record {id}: {what}"));
    let (mut status, mut lease, mut expiration, mut hash, mut owner, mut response) =
        (None, None, None, None, None, None);
    let mut fields = fields.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        let value = String::from_utf8(value).map_err(|_| malformed("a field is not UTF-8"))?;
        match name.as_slice() {
            b"status" => status = Some(value),
            b"lease_expires_at" => lease = Some(value),
            b"expiration" => expiration = Some(value),
            b"payload_hash" => hash = Some(value),
            b"owner" => owner = Some(value),
            b"response" => response = Some(value),
            _ => {}
        }
    }
    let number = |field: Option<String>, name: &str| {
        field.and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| malformed(&format!("{name} missing or not a number")))
    };
    Ok(Record {
        id: id.to_owned(),
        status: status.as_deref().and_then(Status::parse).ok_or_else(|| malformed("status missing or unknown"))?,
        lease_expires_at_ms: number(lease, "lease_expires_at")?,
        expiration_s: number(expiration, "expiration")?,
        payload_hash: hash.ok_or_else(|| malformed("payload_hash missing"))?,
        owner: owner.ok_or_else(|| malformed("owner missing"))?,
        response,
    })
}

/// The claim script's answer: its code, the replaced (or blocking) record's fields, and those of
/// the record a run of takeovers began with.
type ClaimAnswer = (i64, Vec<Vec<u8>>, Vec<Vec<u8>>);

/// What the complete and release scripts answer, as a result.
fn verdict(id: &str, code: i64) -> Result<(), StoreError> {
    let fenced = |why: &str| Err(StoreError::new(StoreErrorKind::Fenced, format!("{id}: {why}")));
    match code {
        0 => Ok(()),
        1 => fenced("no record (released, or its key expired); not recreated"),
        2 => fenced("owned by another attempt"),
        3 => fenced("the lease ended; not completed"),
        5 => fenced("completed; a completed record is never released"),
        4 => Err(StoreError::new(StoreErrorKind::Malformed, format!("record {id}: unknown status or lease"))),
        other => Err(StoreError::new(StoreErrorKind::Other, format!("{id}: unexpected script answer {other}"))),
    }
}

impl Store for RedisStore {
    async fn claim(&self, record: &Record, now_ms: u64) -> Result<Claim, StoreError> {
        let end_ms = window_end_ms(record.expiration_s).max(record.lease_expires_at_ms);
        let (ttl, deadline) = self.expiry(end_ms, now_ms);
        let mut script = CLAIM.key(self.key(&record.id));
        script
            .arg(now_ms)
            .arg(now_ms / 1000)
            .arg(ttl)
            .arg(record.lease_expires_at_ms)
            .arg(record.expiration_s)
            .arg(&record.payload_hash)
            .arg(&record.owner)
            .arg(deadline);
        let ((code, old, first), _): (ClaimAnswer, _) = self.invoke("claim", &script).await?;
        if code == 3 {
            // A late copy of a claim whose attempt has released its record: nothing written.
            // No live caller sends one (owners are unique per attempt); its answer goes to a
            // connection given up on, and says the record is gone, as a release would leave it.
            return Err(StoreError::new(
                StoreErrorKind::Fenced,
                format!("{}: this owner released its record; a late copy of its claim writes nothing", record.id),
            ));
        }
        if code != 1 && code != 2 {
            return Ok(Claim::Exists(parse(&record.id, old)?));
        }
        // Written, or a resent claim that met its own record: what the write replaced.
        if old.is_empty() {
            return Ok(Claim::Acquired { replaced: None });
        }
        let first = if first.is_empty() { None } else { Some(parse(&record.id, first)) };
        match (parse(&record.id, old), first.transpose()) {
            (Ok(replaced), Ok(first)) => {
                let first = first.unwrap_or_else(|| replaced.clone());
                Ok(effectively_once::protocol::acquired(Some(replaced), Some(first)))
            }
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(id = %record.id, %error, "claimed over an unreadable record");
                Ok(Claim::AcquiredOverUnreadable)
            }
        }
    }

    async fn complete(&self, id: &str, owner: &str, completion: Completion<'_>) -> Result<(), StoreError> {
        let (ttl, deadline) = self.expiry(window_end_ms(completion.expiration_s), completion.now_ms);
        let mut script = COMPLETE.key(self.key(id));
        script
            .arg(owner)
            .arg(completion.now_ms)
            .arg(ttl)
            .arg(completion.expiration_s)
            .arg(if completion.response.is_some() { "1" } else { "0" })
            .arg(completion.response.unwrap_or(""))
            .arg(deadline);
        verdict(id, self.invoke("complete", &script).await?.0)
    }

    async fn release(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        let grace = u64::try_from(self.expiry_grace.as_millis()).unwrap_or(u64::MAX);
        let mut script = RELEASE.key(self.key(id));
        script.arg(owner).arg(grace);
        let (code, resent): (i64, bool) = self.invoke("release", &script).await?;
        // The release script says 3 for a completed record; complete's 3 is a lease ended.
        match verdict(id, if code == 3 { 5 } else { code }) {
            // A resend that finds the record another attempt's, or completed, follows a first
            // send that may have landed (deleted the record, the answer lost with the connection)
            // before another delivery claimed the free key. The store cannot tell whether it did,
            // and need not: a release follows a failed handler, whose message is retried either
            // way, and this answer changes no record (the resend touched nothing, as the script
            // deletes only this owner's record). So it is success, as "already gone" is. The core
            // makes the same call for its own retries; this resend is hidden from it, which
            // would make it a first try's `Fenced`, `LeaseLost` for a release that landed.
            // Claim and complete resends need no such rule: each meets its own record.
            Err(error) if resent && error.kind() == StoreErrorKind::Fenced => {
                tracing::info!(key = %id, "a resent release found the record not ours: the first send may have landed");
                Ok(())
            }
            answer => answer,
        }
    }

    async fn get(&self, id: &str) -> Result<Option<Record>, StoreError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let fields: Vec<Vec<u8>> = redis::cmd("HGETALL")
            .arg(self.key(id))
            .query_async(&mut self.connection.clone())
            .await
            .map_err(|e| store_error("get", e))?;
        // A key that holds only the fences of released owners holds no record.
        if !fields.chunks(2).any(|field| !is_fence(&field[0])) {
            return Ok(None);
        }
        parse(id, fields).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_cap_the_ttl_as_the_store_does() {
        let line = format!("local MAX_TTL_MS = {MAX_TTL_MS}\n");
        assert!(include_str!("../lua/common.lua").contains(&line), "{line}");
    }

    #[test]
    fn window_end_matches_the_claim_predicate() {
        let record = |expiration_s| Record {
            id: "a".into(),
            status: Status::Completed,
            lease_expires_at_ms: 0,
            expiration_s,
            payload_hash: "h".into(),
            owner: "o".into(),
            response: None,
        };
        let end = window_end_ms(100);
        assert!(record(100).blocks_claim_at(end - 1));
        assert!(!record(100).blocks_claim_at(end));
        assert_eq!(window_end_ms(u64::MAX / 2), u64::MAX);
    }

    #[test]
    fn parse_reads_every_field_and_refuses_a_malformed_one() {
        let fields = |pairs: &[(&str, &str)]| {
            pairs.iter().flat_map(|(k, v)| [k.as_bytes().to_vec(), v.as_bytes().to_vec()]).collect::<Vec<_>>()
        };
        let full = [
            ("status", "COMPLETED"),
            ("lease_expires_at", "5"),
            ("expiration", "6"),
            ("payload_hash", "v2:ab"),
            ("owner", "o"),
            ("response", "1"),
        ];
        let record = parse("x", fields(&full)).unwrap();
        assert_eq!((record.lease_expires_at_ms, record.expiration_s, record.response.as_deref()), (5, 6, Some("1")));
        let bad = parse("x", fields(&[("status", "DONE"), ("owner", "o")])).unwrap_err();
        assert_eq!(bad.kind(), StoreErrorKind::Malformed);
    }
}
