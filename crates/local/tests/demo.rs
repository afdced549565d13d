//! The demo itself, small: a workload through the pipeline with every invariant checked.

use idempotency_dynamodb::testing::unique_name;
use local::resources::{self, Clients};
use local::workload::Workload;

#[tokio::test]
async fn the_demo_holds_every_invariant() {
    let clients = Clients::local().await;
    let r = resources::up(&clients, &unique_name("demo")).await.unwrap();
    let mut w = Workload::new(60);
    w.poison = 2;
    let summary = local::demo::run(&clients, &r, &w, 2).await.unwrap();
    assert!(summary.ok(), "{}", summary.table());
    assert_eq!(summary.events, 60);
    assert!(summary.deliveries >= summary.sent, "every message was delivered");
    assert_eq!(summary.applied + summary.rejected, 60);
    assert_eq!(summary.dlq.values().sum::<usize>(), 2);
    resources::down(&clients, &r).await.unwrap();
}
