//! The demo through the payments API, small: producers that time out and retry, lost and slow
//! `SendMessage` answers, and one ledger entry and one receipt per key read back.

use effectively_once_dynamodb::testing::unique_name;
use payments_local::via_api::{run, Faults};
use payments_local::workload::Workload;
use payments_local::{Clients, Pipeline};

#[tokio::test]
async fn the_demo_through_the_api_holds_every_invariant() {
    let pipeline = Pipeline::up(Clients::local().await, &unique_name("viaapi")).await.unwrap();
    // Faults often enough that a small run meets each of them.
    let faults = Faults { lost_per_mille: 150, slow_per_mille: 100, ..Faults::default() };
    let summary = run(&pipeline, &Workload::new(40), 2, &faults).await.unwrap();
    assert!(summary.ok(), "{}", summary.table());
    assert_eq!((summary.keys, summary.fresh_twice, summary.unanswered), (40, 0, 0));
    let lost = summary.injected.get("lost response amazonsqs:SendMessage").copied().unwrap_or(0) as usize;
    assert!(
        summary.deliveries >= 40 + lost,
        "each lost answer's message is on the queue, and its resend: {}",
        summary.table()
    );
    assert!(summary.answers["HTTP requests"] > 40);
    pipeline.down().await.unwrap();
}
