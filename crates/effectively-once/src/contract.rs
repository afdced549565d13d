//! The store contract: behaviour every [`Store`] must have, as test cases any store runs.
//!
//! ```text
//! async fn make_store() -> MyStore { MyStore::connect().await }
//! effectively_once::store_contract_tests!(make_store);
//! ```
//!
//! Each case uses its own keys, so cases may share one backend and run in parallel. Time moves
//! through a [`ManualClock`], never by sleeping, so the suite runs as well against a store over
//! the network as in memory.
//!
//! The cases are filed by behaviour: claims in `claim`, duplicates in `replay`, leases and
//! deadlines in `lease`, completion and release in `complete`; this file holds the macro, which
//! lists every case, and the helpers the cases share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{Config, Idempotency, Key, ManualClock, Record, Status, Store};

mod claim;
mod complete;
mod lease;
mod replay;

pub use self::claim::{
    a_lost_claim_answer_still_tells_what_it_replaced, a_run_of_takeovers_is_answered_with_its_first_record,
    claim_acquires_then_reports_the_existing_record, get_returns_every_field,
    lost_claim_answer_retried_counts_as_claimed,
};
pub(crate) use self::complete::LoseCompletionAnswers;
pub use self::complete::{
    a_lost_completion_answer_is_retried, complete_and_release_are_idempotent_for_the_owner,
    completion_after_the_lease_is_refused, handler_error_releases_and_a_retry_runs,
    release_deletes_only_an_in_progress_record_of_its_owner, stale_owner_is_fenced,
};
pub use self::lease::{
    a_handler_that_outruns_its_lease_is_not_completed, deadline_bounds_the_lease,
    dropped_attempt_blocks_until_its_lease_ends,
};
pub use self::replay::{
    concurrent_deliveries_run_the_handler_once, different_payload_is_key_reused, duplicate_replays_the_stored_response,
    record_past_its_dedup_window_is_claimable, response_too_large_completes_without_it,
};

/// Expands to one `#[tokio::test]` per contract case, each calling `$make().await` for a store.
#[macro_export]
macro_rules! store_contract_tests {
    ($make:path) => {
        $crate::store_contract_tests!(@cases $make;
            claim_acquires_then_reports_the_existing_record,
            get_returns_every_field,
            duplicate_replays_the_stored_response,
            lost_claim_answer_retried_counts_as_claimed,
            a_lost_claim_answer_still_tells_what_it_replaced,
            a_run_of_takeovers_is_answered_with_its_first_record,
            handler_error_releases_and_a_retry_runs,
            dropped_attempt_blocks_until_its_lease_ends,
            stale_owner_is_fenced,
            complete_and_release_are_idempotent_for_the_owner,
            different_payload_is_key_reused,
            record_past_its_dedup_window_is_claimable,
            concurrent_deliveries_run_the_handler_once,
            deadline_bounds_the_lease,
            response_too_large_completes_without_it,
            release_deletes_only_an_in_progress_record_of_its_owner,
            completion_after_the_lease_is_refused,
            a_handler_that_outruns_its_lease_is_not_completed,
            a_lost_completion_answer_is_retried,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::contract::$case($make().await).await;
            }
        )*
    };
}

fn unique(name: &str) -> Key {
    Key::new("contract", &format!("{name}-{}", uuid::Uuid::new_v4())).unwrap()
}

fn setup<S: Store>(store: S) -> (Idempotency<S>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let config = Config::default()
        .with_lease(Duration::from_secs(30))
        .with_dedup_window(Duration::from_secs(3600))
        .with_clock(clock.clone());
    (Idempotency::new(store, config), clock)
}

fn in_progress(key: &Key, owner: &str, now_ms: u64, lease_ms: u64) -> Record {
    Record {
        id: key.as_str().to_owned(),
        status: Status::InProgress,
        lease_expires_at_ms: now_ms + lease_ms,
        expiration_s: now_ms / 1000 + 3600,
        payload_hash: "hash".into(),
        owner: owner.into(),
        response: None,
    }
}

type Counted = Arc<AtomicUsize>;

/// A handler that counts its runs and answers `answer`.
async fn counted(runs: Counted, answer: u64) -> Result<u64, std::io::Error> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(answer)
}
