//! What the Redis store adds to the contract: key expiry on the caller's and the server's clocks,
//! a record gone from the server, malformed keys, connection and auth failures, requests per
//! message.

use std::sync::Arc;
use std::time::Duration;

use effectively_once::{
    Claim, Completion, Config, Idempotency, Key, ManualClock, Outcome, Record, Status, Store, StoreErrorKind,
};
use effectively_once_redis::testing::url as test_url;
use effectively_once_redis::{RedisStore, DEFAULT_EXPIRY_GRACE};
use serde_json::json;

const NOW: u64 = 1_800_000_000_000;

fn record(id: &str, owner: &str, now_ms: u64, expiration_s: u64) -> Record {
    Record {
        id: id.to_owned(),
        status: Status::InProgress,
        lease_expires_at_ms: now_ms + 30_000,
        expiration_s,
        payload_hash: "hash".into(),
        owner: owner.into(),
        response: None,
    }
}

async fn pttl(store: &RedisStore, id: &str) -> i64 {
    redis::cmd("PTTL").arg(store.key(id)).query_async(&mut store.connection()).await.unwrap()
}

/// The server's clock (`TIME`), in milliseconds since the Unix epoch.
async fn server_now_ms(store: &RedisStore) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut store.connection()).await.unwrap();
    s * 1000 + us / 1000
}

/// The server time at which the key of `id` expires, at the earliest: read the server's clock,
/// then the key's PTTL (the PTTL is counted from a moment no earlier than that reading).
async fn expires_no_earlier_than(store: &RedisStore, id: &str) -> u64 {
    let before = server_now_ms(store).await;
    let ttl = pttl(store, id).await;
    assert!(ttl > 0, "the key of {id} has a time to live: {ttl}");
    before + ttl as u64
}

async fn raw(store: &RedisStore, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let _: redis::Value = cmd.query_async(&mut store.connection()).await.unwrap();
}

/// The key lives until the end of the window by the caller's clock, plus the grace; completion
/// restarts it from the new window. (The caller's clock is the server's here, to the second: the
/// server's clock asks no longer a life.)
#[tokio::test]
async fn the_key_expires_with_the_window_on_the_callers_clock() {
    let store = crate::common::fresh_store("ttl").await;
    let grace = DEFAULT_EXPIRY_GRACE.as_millis() as i64;
    let now = server_now_ms(&store).await / 1000 * 1000;
    store.claim(&record("a", "o", now, now / 1000 + 60), now).await.unwrap();
    let ttl = pttl(&store, "a").await;
    // The window ends at (expiration + 1) s, 61 s from now (which is on a whole second).
    assert!((61_000 + grace - 1_000..=61_000 + grace).contains(&ttl), "ttl {ttl}");
    let completion = Completion { response: Some("1"), expiration_s: now / 1000 + 3600, now_ms: now };
    store.complete("a", "o", completion).await.unwrap();
    let ttl = pttl(&store, "a").await;
    assert!((3_601_000 + grace - 1_000..=3_601_000 + grace).contains(&ttl), "ttl {ttl}");
}

/// A caller whose clock stands in the past (a test clock, or a clock far behind the server's):
/// its records do not vanish at once, as an absolute PEXPIREAT would make them; the duplicate
/// is a replay.
#[tokio::test]
async fn a_clock_in_the_past_keeps_its_records() {
    let store = crate::common::fresh_store("past").await;
    let clock = Arc::new(ManualClock::at(1_000_000_000_000)); // 2001
    let idem = Idempotency::new(store, Config::default().with_clock(clock));
    let key = Key::new("t", "past").unwrap();
    let first = idem.run(&key, &json!(1), || async { Ok::<_, std::io::Error>(1u32) }).await.unwrap();
    let second = idem.run(&key, &json!(1), || async { Ok::<_, std::io::Error>(2u32) }).await.unwrap();
    assert_eq!((first, second), (Outcome::Fresh(1), Outcome::Replayed(1)));
    assert!(pttl(idem.store(), key.as_str()).await > 14 * 24 * 3600 * 1000, "the whole window, from the caller's now");
}

/// A writer whose clock runs an hour ahead of the server's (and of the other callers', which
/// keep to the server's) states its window in its own clock: a window of a minute by its clock
/// ends an hour and a minute from now by theirs. The key must outlive that end, plus the grace,
/// on the server's clock, or Redis deletes the record while the others still count its window
/// open and a duplicate runs the effect again. Claim and completion alike.
#[tokio::test]
async fn a_writer_clock_ahead_of_the_servers_keeps_the_key_for_the_window_the_server_counts() {
    let store = crate::common::fresh_store("ahead").await;
    let grace = DEFAULT_EXPIRY_GRACE.as_millis() as u64;
    let ahead = server_now_ms(&store).await + 3_600_000;
    store.claim(&record("a", "o", ahead, ahead / 1000 + 60), ahead).await.unwrap();
    let window_end = (ahead / 1000 + 61) * 1000;
    let expires = expires_no_earlier_than(&store, "a").await;
    // 5 ms for the server's script clock against `TIME`.
    assert!(expires + 5 >= window_end + grace, "expires {} ms early", window_end + grace - expires);

    let completion = Completion { response: Some("1"), expiration_s: ahead / 1000 + 120, now_ms: ahead + 1_000 };
    store.complete("a", "o", completion).await.unwrap();
    let window_end = (ahead / 1000 + 121) * 1000;
    let expires = expires_no_earlier_than(&store, "a").await;
    assert!(expires + 5 >= window_end + grace, "expires {} ms early", window_end + grace - expires);
    assert_eq!(store.get("a").await.unwrap().unwrap().status, Status::Completed);
}

/// A window that never ends (u64::MAX / 2 s) keeps the key about a century, no overflow.
#[tokio::test]
async fn a_window_that_never_ends_keeps_the_key() {
    let store = crate::common::fresh_store("never").await;
    store.claim(&record("n", "o", NOW, u64::MAX / 2), NOW).await.unwrap();
    assert!(pttl(&store, "n").await > 99 * 365 * 24 * 3600 * 1000);
    assert_eq!(store.get("n").await.unwrap().unwrap().expiration_s, u64::MAX / 2);
}

/// A record gone from the server (its key expired, or it was released) is not recreated by a
/// late completion: refused as fenced, nothing written.
#[tokio::test]
async fn a_completion_after_the_key_is_gone_is_fenced_and_writes_nothing() {
    let store = crate::common::fresh_store("gone").await;
    store.claim(&record("g", "o", NOW, NOW / 1000 + 60), NOW).await.unwrap();
    raw(&store, &["DEL", &store.key("g")]).await; // what the server's expiry does
    let completion = Completion { response: Some("1"), expiration_s: NOW / 1000 + 60, now_ms: NOW + 1 };
    assert_eq!(store.complete("g", "o", completion).await.unwrap_err().kind(), StoreErrorKind::Fenced);
    assert_eq!(store.get("g").await.unwrap(), None);
    store.release("g", "o").await.unwrap();
}

/// The store resends a claim whose connection died; the first send may still reach the server
/// late, after the resend was answered, the handler failed and the attempt released its record.
/// That late copy (the same owner, the same arguments) must recreate nothing: a record in
/// progress again would block the key until its lease ends, then make the next taker believe it
/// took over a crashed attempt. It is answered `Fenced` (its record is gone), the key holds no
/// record, and another owner's claim takes the key at once, as a free key, and keeps it.
#[tokio::test]
async fn a_late_copy_of_a_released_claim_recreates_nothing() {
    let store = crate::common::fresh_store("late-claim").await;
    let grace = DEFAULT_EXPIRY_GRACE.as_millis() as u64;
    let now = server_now_ms(&store).await;
    let mine = record("l", "released", now, now / 1000 + 60);
    assert_eq!(store.claim(&mine, now).await.unwrap(), Claim::Acquired { replaced: None });
    store.release("l", "released").await.unwrap();

    let late = store.claim(&mine, now).await;
    assert!(matches!(&late, Err(e) if e.kind() == StoreErrorKind::Fenced), "{late:?}");
    assert_eq!(store.get("l").await.unwrap(), None, "no record recreated");
    let status: Option<String> =
        redis::cmd("HGET").arg(store.key("l")).arg("status").query_async(&mut store.connection()).await.unwrap();
    assert_eq!(status, None);
    // The fence lasts at least to the released attempt's lease end plus the grace.
    assert!(expires_no_earlier_than(&store, "l").await + 5 >= mine.lease_expires_at_ms + grace);

    let next = record("l", "next", now + 1, now / 1000 + 60);
    assert_eq!(store.claim(&next, now + 1).await.unwrap(), Claim::Acquired { replaced: None }, "no takeover");
    assert_eq!(store.get("l").await.unwrap(), Some(next.clone()));
    let late = store.claim(&mine, now).await;
    assert!(matches!(&late, Err(e) if e.kind() == StoreErrorKind::Fenced), "{late:?}");
    assert_eq!(store.get("l").await.unwrap(), Some(next), "the late copy changed nothing");
    let done = Completion { response: Some("1"), expiration_s: now / 1000 + 60, now_ms: now + 2 };
    store.complete("l", "next", done).await.unwrap();
    let kept = store.get("l").await.unwrap().unwrap();
    assert_eq!((kept.owner.as_str(), kept.status, kept.response.as_deref()), ("next", Status::Completed, Some("1")));
}

/// A released owner's fence is no part of the record: it stays through other owners' claims,
/// takeovers and releases, each released owner fenced on its own, and no claim answers it.
/// (Only released owners: `b`, taken over, is not fenced.)
#[tokio::test]
async fn fences_of_released_owners_outlast_takeovers_and_other_releases() {
    let store = crate::common::fresh_store("fences").await;
    let now = server_now_ms(&store).await;
    let a = record("f", "a", now, now / 1000 + 60);
    store.claim(&a, now).await.unwrap();
    store.release("f", "a").await.unwrap();
    let b = Record { lease_expires_at_ms: now + 1_000, ..record("f", "b", now, now / 1000 + 60) };
    assert_eq!(store.claim(&b, now).await.unwrap(), Claim::Acquired { replaced: None });
    let later = now + 2_000;
    let c = record("f", "c", later, later / 1000 + 60);
    assert_eq!(store.claim(&c, later).await.unwrap(), Claim::Acquired { replaced: Some(b.clone()) });
    assert_eq!(store.release("f", "b").await.unwrap_err().kind(), StoreErrorKind::Fenced, "c holds it");
    store.release("f", "c").await.unwrap();
    for (late, at) in [(&a, now), (&c, later)] {
        let answer = store.claim(late, at).await;
        assert!(matches!(&answer, Err(e) if e.kind() == StoreErrorKind::Fenced), "{}: {answer:?}", late.owner);
    }
    assert_eq!(store.get("f").await.unwrap(), None);
    let d = record("f", "d", later, later / 1000 + 60);
    assert_eq!(store.claim(&d, later).await.unwrap(), Claim::Acquired { replaced: None });
    assert_eq!(store.get("f").await.unwrap(), Some(d));
}

/// A takeover replaces every field: the old response does not survive into the new record.
#[tokio::test]
async fn a_takeover_after_the_window_leaves_nothing_of_the_old_record() {
    let store = crate::common::fresh_store("takeover").await;
    store.claim(&record("t", "old", NOW, NOW / 1000 + 1), NOW).await.unwrap();
    let done = Completion { response: Some("\"old\""), expiration_s: NOW / 1000 + 1, now_ms: NOW };
    store.complete("t", "old", done).await.unwrap();
    let later = NOW + 5_000;
    let new = record("t", "new", later, later / 1000 + 60);
    let Claim::Acquired { replaced: Some(old) } = store.claim(&new, later).await.unwrap() else {
        panic!("the window ended: acquired over the old record")
    };
    assert_eq!((old.owner.as_str(), old.response.as_deref()), ("old", Some("\"old\"")));
    assert_eq!(store.get("t").await.unwrap(), Some(new));
}

/// A key that holds no record: a claim is refused as malformed, and a malformed record whose
/// window ended is claimed over as unreadable.
#[tokio::test]
async fn malformed_keys() {
    let store = crate::common::fresh_store("malformed").await;
    raw(&store, &["SET", &store.key("s"), "not a hash"]).await;
    let err = store.claim(&record("s", "o", NOW, NOW / 1000 + 60), NOW).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Malformed);

    raw(&store, &["HSET", &store.key("h"), "status", "DONE", "expiration", "9"]).await;
    assert_eq!(store.get("h").await.unwrap_err().kind(), StoreErrorKind::Malformed);
    let claimed = store.claim(&record("h", "o", NOW, NOW / 1000 + 60), NOW).await.unwrap();
    assert_eq!(claimed, Claim::AcquiredOverUnreadable);
    assert_eq!(store.get("h").await.unwrap().unwrap().owner, "o");

    raw(&store, &["HSET", &store.key("b"), "status", "COMPLETED", "expiration", "soon"]).await;
    let err = store.claim(&record("b", "o", NOW, NOW / 1000 + 60), NOW).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Malformed, "an unreadable window blocks and is reported");
}

/// No server: `Unavailable` (retryable), at connect time.
#[tokio::test]
async fn no_server_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = RedisStore::builder(format!("redis://127.0.0.1:{port}")).reconnect_tries(0).connect().await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert_eq!(err.retry(), effectively_once::Retry::Now);
}

/// A wrong user or password: `Misconfigured`.
#[tokio::test]
async fn wrong_password_is_misconfigured() {
    let url = crate::common::with_credentials(&test_url(), "nobody:wrong");
    let err = RedisStore::builder(url).reconnect_tries(0).connect().await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Misconfigured, "{err}");
}

/// A first delivery is two calls (claim, complete), a duplicate one; the server counts the same
/// scripts run.
#[tokio::test]
async fn requests_per_message() {
    let store = crate::common::fresh_store("requests").await;
    let idem = Idempotency::new(store.clone(), Config::default());
    let key = Key::new("t", "requests").unwrap();
    idem.run(&key, &json!(1), || async { Ok::<_, std::io::Error>(1u32) }).await.unwrap();
    assert_eq!(store.requests(), 2);
    let replay = idem.run(&key, &json!(1), || async { Ok::<_, std::io::Error>(2u32) }).await.unwrap();
    assert_eq!(replay, Outcome::Replayed(1));
    assert_eq!(store.requests(), 3);
    let record = store.get(key.as_str()).await.unwrap().unwrap();
    assert_eq!((record.status, record.response.as_deref()), (Status::Completed, Some("1")));
}

/// Clones and prefixes share the one connection; prefixes keep records apart.
#[tokio::test]
async fn prefixes_keep_records_apart() {
    let store = crate::common::fresh_store("prefix").await;
    let other = store.with_key_prefix(&format!("{}other", store.key_prefix())).unwrap();
    store.claim(&record("p", "a", NOW, NOW / 1000 + 60), NOW).await.unwrap();
    assert_eq!(other.get("p").await.unwrap(), None);
    let claimed = other.claim(&record("p", "b", NOW, NOW / 1000 + 60), NOW).await.unwrap();
    assert_eq!(claimed, Claim::Acquired { replaced: None });
    tokio::time::timeout(Duration::from_secs(5), store.get("p")).await.unwrap().unwrap().unwrap();
}

/// A key is `{prefix}:{id}`; the default prefix `idempotency` keeps the keys the store wrote
/// when its default was `idempotency:`.
#[tokio::test]
async fn the_key_is_the_prefix_a_colon_and_the_id() {
    let store = RedisStore::connect(&test_url(), effectively_once_redis::DEFAULT_KEY_PREFIX).await.unwrap();
    let id = format!("t#{}", uuid::Uuid::new_v4().simple());
    store.claim(&record(&id, "o", NOW, NOW / 1000 + 60), NOW).await.unwrap();
    let expected = format!("idempotency:{id}");
    assert_eq!(store.key(&id), expected);
    let owner: Option<String> =
        redis::cmd("HGET").arg(&expected).arg("owner").query_async(&mut store.connection()).await.unwrap();
    assert_eq!(owner.as_deref(), Some("o"));
    raw(&store, &["DEL", &expected]).await;
}

/// A prefix that is empty or holds a character outside `[A-Za-z0-9._-]` (the `:` delimiter
/// above all) is refused before any connection, and by `with_key_prefix`; a prefix that ended
/// in `:` is told how to keep its keys.
#[tokio::test]
async fn an_invalid_key_prefix_is_refused_at_construction() {
    let store = crate::common::fresh_store("prefixes").await;
    for prefix in ["", "idempotency:", "x:a#b:", "a#b", "{tag}", "caf\u{e9}", "a b"] {
        // A closed port: the prefix is refused before any connection is tried.
        let built = RedisStore::builder("redis://127.0.0.1:1").key_prefix(prefix).connect().await;
        let error = built.expect_err(prefix);
        assert_eq!(error.kind(), StoreErrorKind::Misconfigured, "{prefix:?}: {error}");
        assert!(error.to_string().contains("[A-Za-z0-9._-]"), "{error}");
        let derived = store.with_key_prefix(prefix).expect_err(prefix);
        assert_eq!(derived.kind(), StoreErrorKind::Misconfigured, "{prefix:?}");
    }
    let error = RedisStore::connect(&test_url(), "idempotency:").await.unwrap_err();
    assert!(error.to_string().contains("write it `idempotency`"), "{error}");
    for prefix in ["a", "app-2", "App_2.v1", "0"] {
        store.with_key_prefix(prefix).unwrap();
    }
}

/// The store's `Debug` shows its prefix and no part of the URL's password.
#[tokio::test]
async fn the_store_debug_hides_the_password() {
    // The local Redis's password, or, on a server without one (its default user takes any), ours.
    let url = test_url();
    let url = if url.contains('@') { url } else { crate::common::with_credentials(&url, "default:hunter2-secret") };
    let secret = url.rsplit_once('@').unwrap().0.rsplit_once(':').unwrap().1.to_owned();
    let store = RedisStore::connect(&url, "debug").await.unwrap();
    store.get("nothing").await.unwrap();
    let shown = format!("{store:?}");
    assert!(shown.contains("\"debug\"") && !shown.contains(&secret), "{shown}");
    let builder = format!("{:?}", RedisStore::builder(&url));
    assert!(builder.contains(":REDACTED@") && !builder.contains(&secret), "{builder}");
}

/// The server drops our connection (an idle timeout, a frozen Lambda sandbox, a failover): the
/// next calls go through, on a new connection, with nothing lost or doubled.
#[tokio::test]
async fn a_dropped_connection_is_survived() {
    let store = crate::common::fresh_store("dropped").await;
    let killer = crate::common::fresh_store("killer").await;
    let idem = Idempotency::new(store.clone(), Config::default());
    let key = Key::new("t", "dropped").unwrap();
    idem.run(&key, &json!(1), || async { Ok::<_, std::io::Error>(1u32) }).await.unwrap();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query_async(&mut store.connection()).await.unwrap();
    let killed: i64 =
        redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query_async(&mut killer.connection()).await.unwrap();
    assert_eq!(killed, 1);
    let replay = idem.run(&key, &json!(1), || async { Ok::<_, std::io::Error>(2u32) }).await.unwrap();
    assert_eq!(replay, Outcome::Replayed(1));
    let other = Key::new("t", "after-drop").unwrap();
    assert_eq!(
        idem.run(&other, &json!(1), || async { Ok::<_, std::io::Error>(3u32) }).await.unwrap(),
        Outcome::Fresh(3)
    );
    assert_eq!(store.get(other.as_str()).await.unwrap().unwrap().status, Status::Completed);
}

/// `Builder`'s `Debug` leaves the URL's password out: `tracing::info!(?builder)` or a panic
/// message that formats it must not put the ElastiCache AUTH token in the logs.
#[test]
fn builder_debug_hides_the_password() {
    let builder = RedisStore::builder("rediss://payments-user:hunter2-secret@cache.example:6379");
    let shown = format!("{builder:?}");
    assert!(!shown.contains("hunter2-secret"), "{shown}");
}
