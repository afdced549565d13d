//! An ordered batch in lanes under faults (`Ledger::post_batch_in_lanes` through the fault
//! proxy, on the local AWS): after a throttled, failed, refused or unanswered transaction, no
//! record of a lane takes effect behind an earlier one of its lane answered retryable, and once
//! the failed records are delivered again the ledger is the one posting one by one leaves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_config::retry::RetryConfig;
use effectively_once::Outcome;
use effectively_once_dynamodb::DynamoDbStore;
use end_to_end::{summary, LedgerHarness, Rng};
use local::proxy::{Fault, Proxy, Rules};
use payments::{Ledger, PaymentEvent};

/// `fault` on the `nth` and `also`-th `TransactWriteItems` (from 1), everything else passes.
struct Nth {
    nth: u64,
    also: u64,
    fault: Fault,
    seen: AtomicU64,
}

impl Rules for Nth {
    fn decide(&self, operation: &str) -> Fault {
        if operation.starts_with("dynamodb:TransactWriteItems") {
            let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
            if n == self.nth || n == self.also {
                return self.fault;
            }
        }
        Fault::Pass
    }
}

/// `len` events on `accounts` accounts in `lanes` lanes: credits, debits (some overdrawing),
/// copies of an earlier event and earlier ids with another payload, in any lane.
fn batch(seed: u64, len: usize, accounts: u64, lanes: u64, tag: &str) -> (Vec<PaymentEvent>, Vec<String>) {
    let mut rng = Rng(seed | 1);
    let (mut events, mut lanes_of): (Vec<PaymentEvent>, Vec<String>) = (Vec::new(), Vec::new());
    for n in 0..len {
        let lane = format!("p-{}", rng.below(lanes));
        let roll = rng.below(100);
        let event = if roll < 8 && !events.is_empty() {
            events[rng.below(events.len() as u64) as usize].clone()
        } else if roll < 12 && !events.is_empty() {
            let mut reused = events[rng.below(events.len() as u64) as usize].clone();
            reused.amount_cents += 1;
            reused
        } else {
            let account = format!("{tag}-acct-{}", rng.below(accounts));
            let amount = if rng.below(3) == 0 { -(rng.below(300) as i64 + 1) } else { rng.below(200) as i64 + 1 };
            LedgerHarness::event(&format!("{tag}-ev-{n}"), &account, amount, "USD")
        };
        events.push(event);
        lanes_of.push(lane);
    }
    (events, lanes_of)
}

fn retryable(result: &Result<Outcome<payments::Posting>, payments::Error>) -> bool {
    result.as_ref().is_err_and(|error| error.retry() != effectively_once::Retry::Never)
}

/// What a posting says, fresh or replayed alike.
fn posting(s: &str) -> String {
    s.trim_start_matches("fresh ").trim_start_matches("replayed ").to_owned()
}

/// `fault` on the `nth` and `also`-th transaction of the first delivery.
async fn run(seed: u64, fault: Fault, nth: u64, also: u64, len: usize, accounts: u64, lanes: u64) {
    let tag = format!("f{seed}n{nth}{fault:?}").replace(['(', ')', ' '], "");
    let rules = Arc::new(Nth { nth, also, fault, seen: AtomicU64::new(0) });
    run_with(seed, &tag, rules, None, len, accounts, lanes).await;
}

/// `rules` on the first delivery (and on the redeliveries too, given `again`).
async fn run_with(
    seed: u64,
    tag: &str,
    rules: Arc<dyn Rules>,
    again: Option<Arc<dyn Rules>>,
    len: usize,
    accounts: u64,
    lanes: u64,
) {
    let (events, lanes_of) = batch(seed, len, accounts, lanes, tag);
    let lane_refs: Vec<Option<&str>> = lanes_of.iter().map(|lane| Some(lane.as_str())).collect();
    let h = LedgerHarness::new().await;
    let through = |rules: Arc<dyn Rules>| {
        let table = (h.ledger.store().table().to_owned(), h.ledger.table().to_owned());
        async move {
            let proxy = Proxy::to_local_aws(rules).await.expect("the fault proxy");
            let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config(RetryConfig::disabled()).await);
            // Every record said to be a redelivery (below): each batch reads them first.
            let ledger = Ledger::new(DynamoDbStore::new(client, table.0), table.1, None);
            (ledger, proxy)
        }
    };
    let (faulty, _proxy) = through(rules).await;
    let first = faulty.post_batch_in_lanes(&events, &lane_refs, payments::Delivery::MayBeRedelivery).await;
    assert_lanes_kept(seed, tag, &events, &lanes_of, &first);
    // Delivered again, the failed ones, in order, until none is left.
    let mut answers: Vec<String> = first.iter().map(summary).collect();
    let mut left: Vec<usize> = (0..events.len()).filter(|&i| retryable(&first[i])).collect();
    let again_rules = again;
    for _ in 0..30 {
        if left.is_empty() {
            break;
        }
        let again: Vec<PaymentEvent> = left.iter().map(|&i| events[i].clone()).collect();
        let again_lanes: Vec<Option<&str>> = left.iter().map(|&i| Some(lanes_of[i].as_str())).collect();
        // Another sandbox each time (nothing remembered), through the faults when `again` says.
        let results = match &again_rules {
            Some(rules) => {
                let (ledger, _proxy) = through(rules.clone()).await;
                ledger.post_batch_in_lanes(&again, &again_lanes, payments::Delivery::MayBeRedelivery).await
            }
            None => h.ledger.post_batch_in_lanes(&again, &again_lanes, payments::Delivery::Unknown).await,
        };
        let again_lane_names: Vec<String> = left.iter().map(|&i| lanes_of[i].clone()).collect();
        assert_lanes_kept(seed, tag, &again, &again_lane_names, &results);
        let mut still = Vec::new();
        for (&i, result) in left.iter().zip(&results) {
            answers[i] = summary(result);
            if retryable(result) {
                still.push(i);
            }
        }
        left = still;
    }
    assert!(left.is_empty(), "seed {seed}: still failing after redeliveries: {left:?}");
    assert_as_one_by_one(seed, tag, (&events, &lanes_of), &answers, &h, accounts).await;
}

/// The answers after the redeliveries, and every account's balance, are those of posting the
/// events one by one in batch order on a ledger of their own.
async fn assert_as_one_by_one(
    seed: u64,
    tag: &str,
    (events, lanes_of): (&[PaymentEvent], &[String]),
    answers: &[String],
    h: &LedgerHarness,
    accounts: u64,
) {
    let single = LedgerHarness::new().await;
    let mut reference = Vec::new();
    for event in events {
        reference.push(summary(&single.ledger.post(event).await));
    }
    let differs: Vec<String> = (0..events.len())
        .filter(|&i| posting(&answers[i]) != posting(&reference[i]))
        .map(|i| {
            format!("#{i} {} ({}): {} vs one by one {}", events[i].event_id, lanes_of[i], answers[i], reference[i])
        })
        .collect();
    assert!(differs.is_empty(), "seed {seed} {tag}: {differs:#?}");
    for a in 0..accounts {
        let account = format!("{tag}-acct-{a}");
        assert_eq!(
            h.ledger.balance(&account).await.unwrap(),
            single.ledger.balance(&account).await.unwrap(),
            "seed {seed} {tag}: {account}"
        );
    }
}

/// No record of a lane takes effect (fresh) behind an earlier one of its lane answered retryable.
fn assert_lanes_kept(
    seed: u64,
    tag: &str,
    events: &[PaymentEvent],
    lanes_of: &[String],
    results: &[Result<Outcome<payments::Posting>, payments::Error>],
) {
    for (i, result) in results.iter().enumerate() {
        if !retryable(result) {
            continue;
        }
        for j in i + 1..events.len() {
            if lanes_of[j] == lanes_of[i] {
                assert!(
                    !matches!(results[j], Ok(Outcome::Fresh(_))),
                    "seed {seed} {tag}: #{j} {} took effect behind #{i} {} of lane {} answered {}",
                    events[j].event_id,
                    events[i].event_id,
                    lanes_of[i],
                    summary(&results[i])
                );
            }
        }
    }
}

/// Throttles, lost answers and 500s at random on every DynamoDB request, on the first delivery
/// and on each redelivery (another sandbox each time, pre-reading every record); seeds from
/// `LANE_SEEDS` (default 2).
#[tokio::test]
async fn random_faults_keep_lanes_and_redelivery_converges() {
    let seeds: u64 = std::env::var("LANE_SEEDS").map(|n| n.parse().unwrap()).unwrap_or(2);
    for seed in 1..=seeds {
        let faults = || -> Arc<dyn Rules> {
            Arc::new(
                local::proxy::RandomFaults::new(seed)
                    .on("dynamodb:", &[(Fault::Throttle, 80), (Fault::DropResponse, 80), (Fault::ServerError, 40)]),
            )
        };
        run_with(seed * 17, &format!("r{seed}"), faults(), Some(faults()), 80, 6, 3).await;
    }
}

/// One fault on the first to third transaction (and the one two later), of each kind; seeds
/// from `LANE_SEEDS` (default 1).
#[tokio::test]
async fn a_failed_transaction_holds_its_lanes_and_redelivery_converges() {
    let seeds: u64 = std::env::var("LANE_SEEDS").map(|n| n.parse().unwrap()).unwrap_or(1);
    for seed in 1..=seeds {
        for fault in [Fault::Throttle, Fault::DropResponse, Fault::ServerError, Fault::Refuse] {
            for nth in 1..=3 {
                run(seed * 31, fault, nth, nth + 2, 60, 5, 3).await;
            }
        }
    }
}

/// A failure inside a transaction (a throttle, an answer lost) holds the failed members' groups,
/// their accounts, in every lane, as `commit_batch` does so that a batch answers as posting one
/// by one in batch order: lane `p-0`'s first transaction throttled holds `p-0`, its payment to
/// `acct-x` with it, and lane `p-1`'s one payment to `acct-x`. Such a failure passes; so does the
/// hold: delivered again, every payment is applied once. (A failure that lasts, found before the
/// ledger's transaction, holds its lane and event id only: `delivery/partitions.rs` in the Kafka
/// consumer.)
#[tokio::test]
async fn a_throttled_transaction_holds_its_accounts_for_one_delivery_only() {
    let tag = "other-lane";
    let mut events: Vec<PaymentEvent> = (0..60)
        .map(|n| LedgerHarness::event(&format!("{tag}-ev-{n}"), &format!("{tag}-acct-{n}"), 100, "USD"))
        .collect();
    events.push(LedgerHarness::event(&format!("{tag}-ev-x0"), &format!("{tag}-acct-x"), 100, "USD"));
    events.push(LedgerHarness::event(&format!("{tag}-ev-x1"), &format!("{tag}-acct-x"), 100, "USD"));
    let mut lanes: Vec<Option<&str>> = vec![Some("p-0"); events.len()];
    *lanes.last_mut().unwrap() = Some("p-1");
    let h = LedgerHarness::new().await;
    let rules = Arc::new(Nth { nth: 1, also: 0, fault: Fault::Throttle, seen: AtomicU64::new(0) });
    let proxy = Proxy::to_local_aws(rules).await.expect("the fault proxy");
    let client = aws_sdk_dynamodb::Client::new(&proxy.sdk_config(RetryConfig::disabled()).await);
    let ledger = Ledger::new(DynamoDbStore::new(client, h.ledger.store().table()), h.ledger.table(), None);
    let results = ledger.post_batch_in_lanes(&events, &lanes, payments::Delivery::Unknown).await;
    assert!(retryable(&results[0]), "the throttled transaction's first member: {}", summary(&results[0]));
    assert!(retryable(results.last().unwrap()), "held through its account: {}", summary(results.last().unwrap()));

    // Delivered again (the failed records, in order, each in its lane), with the fault gone.
    let again: Vec<usize> = (0..events.len()).filter(|&at| retryable(&results[at])).collect();
    let retried: Vec<PaymentEvent> = again.iter().map(|&at| events[at].clone()).collect();
    let retried_lanes: Vec<Option<&str>> = again.iter().map(|&at| lanes[at]).collect();
    let second = h.ledger.post_batch_in_lanes(&retried, &retried_lanes, payments::Delivery::Unknown).await;
    assert!(second.iter().all(|result| !retryable(result)), "{:?}", second.iter().map(summary).collect::<Vec<_>>());
    let balance = h.ledger.balance(&format!("{tag}-acct-x")).await.unwrap().map(|b| (b.balance_cents, b.entry_count));
    assert_eq!(balance, Some((200, 2)), "each payment once");
}
