//! Workloads: payment events with producer retries (same business id, new message id), poison
//! messages and rejections, with what the pipeline must end with.

use std::collections::BTreeMap;

use effects::PaymentEvent;
use serde_json::json;

/// What to send.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Unique valid events.
    pub events: usize,
    /// Share of deliveries that are duplicates, in percent (producer retries and redeliveries).
    pub duplicate_pct: u32,
    /// Malformed messages: they must end in the DLQ, alone.
    pub poison: usize,
    /// Seed of the shuffle and the amounts.
    pub seed: u64,
    /// Namespaces accounts, event ids and recipients, so runs never meet.
    pub run: String,
}

impl Workload {
    /// `events` events, 30 % duplicates, 5 poison messages, under a fresh run id.
    pub fn new(events: usize) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        Workload {
            events,
            duplicate_pct: 30,
            poison: 5,
            seed: nanos as u64 | 1,
            run: format!("r{}", nanos % 10_000_000_000),
        }
    }
}

/// The messages to send and the end state they must produce.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Message bodies in sending order.
    pub deliveries: Vec<String>,
    /// Every unique valid event.
    pub events: Vec<PaymentEvent>,
    /// Those that must apply.
    pub applied: Vec<PaymentEvent>,
    /// Those that must be rejected (debits on accounts that never get credit).
    pub rejected: Vec<PaymentEvent>,
    /// The poison bodies.
    pub poison: Vec<String>,
    /// Duplicate deliveries among `deliveries`.
    pub duplicates: usize,
}

impl Plan {
    /// The balance each account must end with.
    pub fn balances(&self) -> BTreeMap<String, i64> {
        let mut balances = BTreeMap::new();
        for e in &self.applied {
            *balances.entry(e.account_id.clone()).or_default() += e.amount_cents;
        }
        balances
    }

    /// The recipients that must get exactly one receipt.
    pub fn receipts(&self) -> Vec<String> {
        self.applied.iter().filter_map(|e| e.receipt_email.clone()).collect()
    }
}

/// A small deterministic generator (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Plans a workload: credits on `events / 10` accounts (one in four with a receipt email), one
/// debit in 25 on an account that never gets credit (rejected, whatever the order), duplicates
/// as extra deliveries of random events, poison of four kinds, all shuffled.
pub fn plan(w: &Workload) -> Plan {
    let mut rng = Rng(w.seed.max(1));
    let accounts = (w.events / 10).max(1);
    let rejected_n = if w.events >= 2 { (w.events / 25).max(1) } else { 0 };
    let mut plan = Plan::default();
    for i in 0..w.events {
        let event = if i < rejected_n {
            PaymentEvent {
                event_id: format!("pay-{}-{i}", w.run),
                account_id: format!("acct-{}-empty-{i}", w.run),
                amount_cents: -(100 + rng.below(900) as i64),
                currency: "USD".into(),
                receipt_email: None,
            }
        } else {
            PaymentEvent {
                event_id: format!("pay-{}-{i}", w.run),
                account_id: format!("acct-{}-{}", w.run, i % accounts),
                amount_cents: 100 + rng.below(100_000) as i64,
                currency: "USD".into(),
                receipt_email: (i % 4 == 0).then(|| format!("customer-{i}@{}.example.com", w.run)),
            }
        };
        if i < rejected_n {
            plan.rejected.push(event.clone());
        } else {
            plan.applied.push(event.clone());
        }
        plan.events.push(event);
    }
    let body = |e: &PaymentEvent| serde_json::to_string(e).expect("events serialise");
    plan.deliveries = plan.events.iter().map(body).collect();
    let pct = w.duplicate_pct.min(95) as usize;
    plan.duplicates = if plan.events.is_empty() { 0 } else { (plan.events.len() * pct).div_ceil(100 - pct) };
    for _ in 0..plan.duplicates {
        let e = &plan.events[rng.below(plan.events.len())];
        plan.deliveries.push(body(e));
    }
    for k in 0..w.poison {
        let id = format!("pay-{}-poison-{k}", w.run);
        let poison = match k % 4 {
            0 => format!("{{\"event_id\": \"{id}\", \"account_id\": "),
            1 => json!({"account_id": "acct-x", "amount_cents": 100, "currency": "USD"}).to_string(),
            2 => json!({"event_id": id, "account_id": "acct-x", "amount_cents": 0, "currency": "USD"}).to_string(),
            _ => json!({"event_id": id, "account_id": "acct-x", "amount_cents": 100, "currency": "usd"}).to_string(),
        };
        plan.poison.push(poison.clone());
        plan.deliveries.push(poison);
    }
    for i in (1..plan.deliveries.len()).rev() {
        plan.deliveries.swap(i, rng.below(i + 1));
    }
    plan
}

/// Message bodies of an SQS sample event file (`events/*.json`).
pub fn bodies_of_event_file(json: &str) -> Result<Vec<String>, String> {
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let records = value["Records"].as_array().ok_or("no Records")?;
    Ok(records.iter().filter_map(|r| r["body"].as_str().map(str::to_owned)).collect())
}

/// Sends bodies, ten per request; each gets a new message id, as a producer's retry does.
pub async fn send(sqs: &aws_sdk_sqs::Client, queue_url: &str, bodies: &[String]) -> Result<usize, String> {
    use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
    for chunk in bodies.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| SendMessageBatchRequestEntry::builder().id(i.to_string()).message_body(b).build())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let out = sqs
            .send_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| format!("send: {}", e.into_service_error()))?;
        if !out.failed().is_empty() {
            return Err(format!("send: {} messages refused", out.failed().len()));
        }
    }
    Ok(bodies.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_has_the_asked_shape() {
        let w = Workload { events: 200, duplicate_pct: 30, poison: 5, seed: 7, run: "t".into() };
        let p = plan(&w);
        assert_eq!(p.events.len(), 200);
        assert_eq!(p.rejected.len(), 8);
        assert_eq!(p.applied.len(), 192);
        assert_eq!(p.deliveries.len(), 200 + p.duplicates + 5);
        let share = p.duplicates as f64 / (200 + p.duplicates) as f64;
        assert!((0.29..0.32).contains(&share), "{share}");
        assert_eq!(p.receipts().len(), p.applied.iter().filter(|e| e.receipt_email.is_some()).count());
        for poison in &p.poison {
            assert!(PaymentEvent::parse(poison).is_err());
        }
    }
}
