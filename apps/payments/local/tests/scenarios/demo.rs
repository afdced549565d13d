//! The demo itself, small: a hostile workload through the pipeline with every invariant checked
//! from the tables.

use effectively_once_dynamodb::testing::unique_name;
use payments_local::workload::{Kind, Workload};
use payments_local::{Clients, Pipeline};

#[tokio::test]
async fn the_demo_holds_every_invariant() {
    let clients = Clients::local().await;
    let pipeline = Pipeline::up(clients, &unique_name("demo")).await.unwrap();
    let mut w = Workload::new(60);
    w.poison = 2;
    let summary = payments_local::demo::run(&pipeline, &w, 2).await.unwrap();
    assert!(summary.ok(), "{}", summary.table());
    assert_eq!(summary.events, 60);
    assert!(summary.deliveries >= summary.sent, "every message was delivered");
    let outcomes = &summary.audit.outcomes;
    // Read back from the DLQ: the poison, the record that always panics, the reused ids' copies.
    let dlq = summary.dlq();
    assert_eq!(dlq.iter().filter(|(reason, _)| reason.starts_with("poison")).map(|(_, n)| n).sum::<usize>(), 2);
    // One event id; a producer retry of it (a duplicate delivery) is another message there.
    assert!(dlq.get("handler panicked on every delivery").is_some_and(|n| *n >= 1), "{dlq:?}");
    assert_eq!(outcomes[&Kind::PanicOnce].get("applied"), Some(&1), "a record that panicked once applied");
    assert_eq!(outcomes[&Kind::RefusedAddress].get("applied"), Some(&1));
    assert_eq!(summary.audit.rows.get("FAILED"), Some(&1), "the refused address's row failed, not sent");
    assert_eq!(outcomes[&Kind::Overdraft].get("rejected: insufficient funds"), Some(&1));
    pipeline.down().await.unwrap();
}
