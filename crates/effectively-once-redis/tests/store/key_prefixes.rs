//! Key prefixes keep stores apart: two stores on one server, whatever their prefixes and keys,
//! never read or block each other's records.

use crate::common::{claim_record, NOW};
use effectively_once::{Claim, Completion, Key, Store};

/// Two stores whose prefixes differ by a suffix (`{p}app` and `{p}app2`): were the prefix not
/// delimited, `{p}app` + `2orders#1` would be the same Redis key as `{p}app2` + `orders#1`, and
/// application `app`'s record for `2orders#1` would block `app2`'s first delivery of `orders#1`
/// (another payload: key reused; the same hash: a replay of someone else's response).
#[tokio::test]
async fn a_prefix_that_extends_another_never_shares_its_keys() {
    let base = crate::common::fresh_store("collide").await;
    // `with_key_prefix` now answers a `Result` (an invalid prefix is refused).
    let app = base.with_key_prefix(&format!("{}app", base.key_prefix())).unwrap();
    let app2 = base.with_key_prefix(&format!("{}app2", base.key_prefix())).unwrap();
    let theirs = Key::new("2orders", "1").unwrap();
    let ours = Key::new("orders", "1").unwrap();

    app.claim(&claim_record(&theirs, "app-owner", "v2:aa"), NOW).await.unwrap();
    let done = Completion { response: Some("\"app's answer\""), expiration_s: NOW / 1000 + 3600, now_ms: NOW };
    app.complete(theirs.as_str(), "app-owner", done).await.unwrap();

    let claimed = app2.claim(&claim_record(&ours, "app2-owner", "v2:bb"), NOW).await.unwrap();
    assert_eq!(claimed, Claim::Acquired { replaced: None }, "app2 never wrote orders#1");
}

/// A business key may hold `#` and `:`, so with `:`-terminated prefixes, prefix `{p}x:` with key
/// `a#b:orders#1` would be prefix `{p}x:a#b:` with key `orders#1`. A prefix is therefore
/// `[A-Za-z0-9._-]+` and the store adds the `:`: such prefixes are `Misconfigured`, and the same
/// two claims under the nearest valid prefixes keep apart (a key splits at its first `:` only).
#[tokio::test]
async fn colon_terminated_prefixes_are_refused_and_keys_split_at_the_first_colon() {
    use effectively_once::StoreErrorKind;

    let base = crate::common::fresh_store("collide2").await;
    for prefix in [format!("{}x:", base.key_prefix()), format!("{}x:a#b:", base.key_prefix())] {
        let refused = base.with_key_prefix(&prefix).unwrap_err();
        assert_eq!(refused.kind(), StoreErrorKind::Misconfigured, "{prefix}");
    }
    let outer = base.with_key_prefix(&format!("{}x", base.key_prefix())).unwrap();
    let inner = base.with_key_prefix(&format!("{}x.a-b", base.key_prefix())).unwrap();
    let theirs = Key::new("a", "b:orders#1").unwrap();
    let ours = Key::new("orders", "1").unwrap();

    outer.claim(&claim_record(&theirs, "outer", "v2:aa"), NOW).await.unwrap();
    let claimed = inner.claim(&claim_record(&ours, "inner", "v2:bb"), NOW).await.unwrap();
    assert_eq!(claimed, Claim::Acquired { replaced: None }, "inner never wrote orders#1");
}
