//! An ordered batch in lanes (`Ledger::post_batch_in_lanes`, the Kafka, Kinesis and FIFO
//! consumers' path) answers, with no fault, as posting its events one by one in batch order
//! does: every answer, entry and balance the same, on batches past DynamoDB's 100 actions with
//! copies across lanes, key reuse, overdrafts and another currency, on the local AWS.

use end_to_end::{summary, LedgerHarness, Rng};
use payments::PaymentEvent;

/// A batch of `len` events over `accounts` accounts and `lanes` lanes: credits and debits, some
/// in another currency, some copies of an earlier event (in any lane), some an earlier id with
/// another payload.
fn batch(seed: u64, len: usize, accounts: u64, lanes: u64, tag: &str) -> (Vec<PaymentEvent>, Vec<String>) {
    let mut rng = Rng(seed | 1);
    let (mut events, mut lanes_of): (Vec<PaymentEvent>, Vec<String>) = (Vec::new(), Vec::new());
    for n in 0..len {
        let lane = format!("payments-{}", rng.below(lanes));
        let roll = rng.below(100);
        let event = if roll < 8 && !events.is_empty() {
            let at = rng.below(events.len() as u64) as usize;
            events[at].clone()
        } else if roll < 12 && !events.is_empty() {
            let at = rng.below(events.len() as u64) as usize;
            let mut reused = events[at].clone();
            reused.amount_cents += 1;
            reused
        } else {
            let account = format!("{tag}-acct-{}", rng.below(accounts));
            let amount = if rng.below(3) == 0 { -(rng.below(300) as i64 + 1) } else { rng.below(200) as i64 + 1 };
            let currency = if rng.below(20) == 0 { "EUR" } else { "USD" };
            LedgerHarness::event(&format!("{tag}-ev-{n}"), &account, amount, currency)
        };
        events.push(event);
        lanes_of.push(lane);
    }
    (events, lanes_of)
}

async fn differential(seed: u64, len: usize, accounts: u64, lanes: u64) {
    let tag = format!("s{seed}");
    let (events, lanes_of) = batch(seed, len, accounts, lanes, &tag);
    let laned = LedgerHarness::new().await;
    let single = LedgerHarness::new().await;
    let lane_refs: Vec<Option<&str>> = lanes_of.iter().map(|lane| Some(lane.as_str())).collect();
    let from_batch: Vec<String> = laned
        .ledger
        .post_batch_in_lanes(&events, &lane_refs, payments::Delivery::Unknown)
        .await
        .iter()
        .map(summary)
        .collect();
    let mut one_by_one = Vec::new();
    for event in &events {
        one_by_one.push(summary(&single.ledger.post(event).await));
    }
    let differs: Vec<String> = from_batch
        .iter()
        .zip(&one_by_one)
        .enumerate()
        .filter(|(_, (b, s))| b != s)
        .map(|(i, (b, s))| format!("#{i} {} ({}): lanes {b}, one by one {s}", events[i].event_id, lanes_of[i]))
        .collect();
    assert!(differs.is_empty(), "seed {seed}: answers differ: {differs:#?}");
    for a in 0..accounts {
        let account = format!("{tag}-acct-{a}");
        assert_eq!(
            laned.ledger.balance(&account).await.unwrap(),
            single.ledger.balance(&account).await.unwrap(),
            "seed {seed}: {account}"
        );
        assert_eq!(
            laned.ledger.entries(&account).await.unwrap().len(),
            single.ledger.entries(&account).await.unwrap().len(),
            "seed {seed}: {account}'s entries"
        );
    }
}

/// 120 events over 3 lanes and 6 accounts (every account in every lane: one unit, cut), seeds
/// fixed.
#[tokio::test]
async fn lanes_answer_as_one_by_one_past_the_transaction_limits() {
    let seeds: Vec<u64> = match std::env::var("LANE_SEEDS") {
        Ok(n) => (1..=n.parse::<u64>().unwrap()).map(|s| s * 7919).collect(),
        Err(_) => vec![1, 7, 42, 1234, 99_991],
    };
    for seed in seeds {
        differential(seed, 120, 6, 3).await;
    }
}

/// 40 events over 8 lanes and 3 accounts.
#[tokio::test]
async fn many_lanes_of_few_accounts_answer_as_one_by_one() {
    for seed in [3u64, 11, 2024] {
        differential(seed, 40, 3, 8).await;
    }
}
