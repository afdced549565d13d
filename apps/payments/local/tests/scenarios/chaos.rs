//! The chaos scenario, small: the payments workload, the Kinesis orders path and the Kafka
//! payments path under the fault proxy, crashes and panics, then every invariant read back from
//! the tables, the DLQ, the on-failure destinations, the park queues and the local SES must
//! hold, the stream path's and the Kafka path's among them.

use payments_local::chaos::{self, Options};
use payments_local::resources::Clients;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_chaos_run_with_the_orders_stream_and_kafka_keeps_every_invariant() {
    let clients = Clients::local().await;
    let options = Options { events: 60, poison: 3, orders: Some(60), kafka: Some(20), seed: 7, ..Options::default() };
    let report = chaos::run(&clients, &options).await.expect("the scenario runs");
    let table = report.table();
    let failed: Vec<_> = report.audit.checks.iter().filter(|c| !c.ok).map(|c| (&c.name, &c.detail)).collect();
    assert!(failed.is_empty(), "invariants failed: {failed:#?}\n{table}");
    let orders: Vec<_> = report.audit.checks.iter().filter(|c| c.name.starts_with("orders:")).collect();
    assert_eq!(orders.len(), 5, "the stream path's invariants are in the report:\n{table}");
    poison_parked(&report, &table);
    let stream = report.orders.as_ref().expect("the stream path ran");
    let traffic = |name: &str| stream.traffic.iter().find(|(k, _)| k.starts_with(name)).map(|(_, v)| *v);
    assert_eq!(traffic("shards after the mid-run split"), Some(4), "two shards, one split in two");
    assert!(traffic("records delivered").unwrap() > traffic("records put").unwrap(), "redeliveries happened");
    // Every poison kind and the order that always panics are accounted for.
    assert!(stream.outcomes.keys().any(|k| k.starts_with("handler panics on every delivery | in the on-failure")));
    // A poison record is parked, or goes to the destination with a batch discarded for a record
    // that kept failing beside it: either is accounted for, never stored.
    for kind in ["data is not JSON", "JSON that is not an order (an array of its fields)"] {
        let outcomes: Vec<&String> = stream.outcomes.keys().filter(|k| k.starts_with(kind)).collect();
        assert!(!outcomes.is_empty(), "{kind} was put");
        for outcome in outcomes {
            assert!(outcome.contains("parked") || outcome.contains("on-failure destination"), "{outcome}");
        }
    }
    kafka_path_ran(&report, &table);
    assert!(report.ok());
}

/// "Nothing lost" is counted per trigger, and the Kinesis and Kafka paths parked their poison:
/// read back from the park queues, each record once, none also applied.
fn poison_parked(report: &chaos::Report, table: &str) {
    let tally = |trigger: &str| report.audit.tallies.iter().find(|t| t.trigger.starts_with(trigger)).unwrap();
    let (sqs, kinesis, kafka) = (tally("SQS"), tally("Kinesis"), tally("Kafka"));
    for t in [sqs, kinesis, kafka] {
        assert!(t.holds(), "{t:?}:\n{table}");
    }
    assert_eq!(sqs.parked, 0, "SQS has its DLQ");
    assert!(kinesis.parked >= 1 && kafka.parked >= 3, "the poison was parked:\n{table}");
    assert_eq!(kafka.sent, report.kafka.as_ref().unwrap().outcomes.values().sum::<usize>());
}

/// The Kafka path's invariants are in the report, and its faults happened: a crash, a
/// rebalance overlap, redeliveries, a discard replayed, poison parked (key reuse among it).
fn kafka_path_ran(report: &chaos::Report, table: &str) {
    let checks = report.audit.checks.iter().filter(|c| c.name.starts_with("kafka:")).count();
    assert_eq!(checks, 6, "the Kafka path's invariants are in the report:\n{table}");
    let kafka = report.kafka.as_ref().expect("the Kafka path ran");
    // Its own tables only: the panic message of the whole report is cut short.
    let table = kafka.table();
    let figure = |name: &str| kafka.traffic.iter().find(|(k, _)| k.starts_with(name)).map(|(_, v)| *v).unwrap();
    assert!(figure("records handed to the function") > figure("records written"), "redeliveries:\n{table}");
    assert!(figure("pollers crashed") >= 1, "a poller crashed after its invocation:\n{table}");
    assert!(figure("rebalance overlaps") >= 1, "two pollers held the same records:\n{table}");
    assert!(figure("records discarded") >= 1 && figure("destination batches replayed") >= 1, "{table}");
    assert!(figure("failed permanently") >= 3, "every poison value failed for good:\n{table}");
    assert_eq!(figure("records parked"), 3, "every poison value parked, once each:\n{table}");
    assert!(figure("parcels in the park queue") >= 3, "{table}");
    let reuse = "poison: event id reused: an opening credit's, another amount | parked, nothing posted";
    assert_eq!(kafka.outcomes.get(reuse), Some(&1), "key reuse parked:\n{table}");
    assert!(kafka.outcomes.keys().any(|k| k.starts_with("credit, handler panics until the fix | applied once")));
}

#[test]
fn the_orders_default_to_half_the_events_and_zero_leaves_the_stream_out() {
    let options = Options { events: 300, ..Options::default() };
    assert_eq!(options.orders(), 150);
    assert_eq!(Options { orders: Some(0), ..options }.orders(), 0);
}

#[test]
fn the_kafka_payments_default_to_a_quarter_of_the_events_and_zero_leaves_kafka_out() {
    let options = Options { events: 300, ..Options::default() };
    assert_eq!(options.kafka(), 75);
    assert_eq!(Options { kafka: Some(0), ..options }.kafka(), 0);
}
