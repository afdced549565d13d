//! The pre-read's trade-off measured from outside: the local AWS's own counters
//! (`/_local-aws/requests` on `infra/local/serve.py`: requests, and write units modelled from
//! the requests themselves) around the batches of the ledger's one pre-read mode at a sandbox
//! that never saw them, beside posting one by one.
//! The counters are the server's, shared by every client, so this runs alone on a local AWS of
//! its own (docs/bench.md, "Duplicates where they really land"):
//!
//! ```text
//! LOCAL_AWS_PORT=4671 infra/local/aws.sh up
//! AWS_ENDPOINT_URL=http://127.0.0.1:4671 cargo test -p end-to-end --test ledger preread_costs:: -- --ignored --nocapture
//! ```

use std::collections::BTreeMap;
use std::io::{Read, Write};

use effectively_once::Outcome;
use effectively_once_dynamodb::testing::endpoint;
use end_to_end::LedgerHarness;
use payments::{Delivery, Ledger, PaymentEvent};

/// What the server counted: DynamoDB requests by operation, and write units.
#[derive(Debug, Default, Clone)]
struct Counted {
    requests: BTreeMap<String, u64>,
    write_units: u64,
}

/// A route of the local AWS, by hand over a socket: the test crate has no HTTP client, and this
/// is one GET or POST of a loopback route whose answer is a small JSON object.
fn route(method: &str, path: &str) -> serde_json::Value {
    let url = endpoint();
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host).expect("the local AWS answers");
    let request = format!("{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.take(1 << 20).read_to_string(&mut answer).unwrap();
    let body = answer.split_once("\r\n\r\n").expect("an HTTP answer").1;
    serde_json::from_str(body).expect("a JSON body")
}

fn reset() {
    route("POST", "/_local-aws/requests/reset");
}

fn counted() -> Counted {
    let all = route("GET", "/_local-aws/requests");
    let dynamodb = |name: &str| -> BTreeMap<String, u64> {
        let map = all[name].as_object().expect("the counters").clone();
        map.into_iter().filter_map(|(op, n)| Some((op.strip_prefix("dynamodb:")?.to_owned(), n.as_u64()?))).collect()
    };
    Counted { requests: dynamodb("requests"), write_units: dynamodb("write_units").values().sum() }
}

/// Counts what `run` costs at the server.
async fn measure<F: std::future::Future<Output = ()>>(run: F) -> Counted {
    reset();
    run.await;
    counted()
}

/// The bench's events: 50 accounts, amounts from 100 to 100,000 cents, USD.
fn event(id: &str, i: usize) -> PaymentEvent {
    LedgerHarness::event(id, &format!("acct_{:02}", (i * 7) % 50), 100 + ((i * 7919) % 99_900) as i64, "USD")
}

fn events(prefix: &str, n: usize) -> Vec<PaymentEvent> {
    (0..n).map(|i| event(&format!("{prefix}-{i:04}"), i)).collect()
}

fn requests(c: &Counted) -> u64 {
    c.requests.values().sum()
}

fn op(c: &Counted, name: &str) -> u64 {
    c.requests.get(name).copied().unwrap_or(0)
}

/// Ten batches of ten at `sandbox`: in each, two duplicates of events the harness's own ledger
/// posted (20 %) and eight first deliveries.
async fn mix(h: &LedgerHarness, sandbox: &Ledger, tag: &str, delivery: Delivery) -> Counted {
    let seen = events(&format!("{tag}-seen"), 20);
    for chunk in seen.chunks(10) {
        h.ledger.post_batch(chunk).await;
    }
    let new = events(&format!("{tag}-new"), 80);
    let batches: Vec<Vec<PaymentEvent>> = (0..10)
        .map(|b| {
            let mut batch = new[b * 8..b * 8 + 8].to_vec();
            batch.insert(3, seen[2 * b].clone());
            batch.insert(7, seen[2 * b + 1].clone());
            batch
        })
        .collect();
    measure(async {
        for batch in &batches {
            let answers = sandbox.post_batch_as(batch, delivery).await;
            assert_eq!(answers.iter().filter(|a| matches!(a, Ok(Outcome::Replayed(_)))).count(), 2);
            assert_eq!(answers.iter().filter(|a| matches!(a, Ok(Outcome::Fresh(_)))).count(), 8);
        }
    })
    .await
}

/// One by one, at another sandbox: write units and requests a message of 80 new events and 20
/// duplicates of events the first sandbox posted, the reference of the targets.
async fn one_by_one_reference(h: &LedgerHarness) -> (f64, f64) {
    let one_by_one = h.ledger.clone_forgetting();
    let seen = events("obo-seen", 20);
    for event in &seen {
        h.ledger.post(event).await.unwrap();
    }
    let mut stream = events("obo-new", 80);
    for (b, dup) in seen.iter().enumerate() {
        stream.insert(b * 5 + 3, dup.clone());
    }
    let c = measure(async {
        for event in &stream {
            one_by_one.post(event).await.unwrap();
        }
    })
    .await;
    (c.write_units as f64 / 100.0, requests(&c) as f64 / 100.0)
}

#[tokio::test]
#[ignore = "reads the local AWS's own counters: run alone, on a local AWS of its own"]
async fn the_preread_trade_off_from_the_local_aws_counters() {
    let h = LedgerHarness::new().await;
    let mut rows = Vec::new();
    // Write units per message, by column, for the bounds below.
    let mut units: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    // One row: the ledger's one mode (docs/bench.md has the other modes' figures it beat).
    for name in ["batched"] {
        let sandbox = || h.ledger.clone_forgetting();
        let mut row = vec![name.to_owned()];
        // Ten duplicates at a sandbox that never saw them: redelivered by SQS (count above 1),
        // then retried by a producer (a new message, count 1).
        for (tag, delivery) in [("dup-hint", Delivery::MayBeRedelivery), ("dup-retry", Delivery::Unknown)] {
            let dups = events(&format!("{name}-{tag}"), 10);
            h.ledger.post_batch(&dups).await;
            let other = sandbox();
            let c = measure(async {
                let answers = other.post_batch_as(&dups, delivery).await;
                assert!(answers.iter().all(|a| matches!(a, Ok(Outcome::Replayed(_)))), "{answers:?}");
            })
            .await;
            row.push(format!("{:.2} WU, {} req", c.write_units as f64 / 10.0, requests(&c)));
            units.insert((name, tag), c.write_units as f64 / 10.0);
        }
        // Ten first deliveries: what a pre-read costs with nothing to find.
        let first = events(&format!("{name}-first"), 10);
        let other = sandbox();
        let c = measure(async {
            other.post_batch(&first).await;
        })
        .await;
        row.push(format!("{:.2} WU, {} req", c.write_units as f64 / 10.0, requests(&c)));
        // The 20 % mix at another sandbox: producer retries, then SQS redeliveries.
        for (tag, delivery) in [("mix-retry", Delivery::Unknown), ("mix-hint", Delivery::MayBeRedelivery)] {
            let c = mix(&h, &sandbox(), &format!("{name}-{tag}"), delivery).await;
            units.insert((name, tag), c.write_units as f64 / 100.0);
            row.push(format!(
                "{:.2} WU, {:.2} req ({} reads)",
                c.write_units as f64 / 100.0,
                requests(&c) as f64 / 100.0,
                op(&c, "BatchGetItem")
            ));
        }
        rows.push(row);
    }
    let (reference, reference_requests) = one_by_one_reference(&h).await;
    // Issue 26's targets: a batch of duplicates the hint flags costs at most 1 write unit a
    // duplicate, and the mix at another sandbox no more than one by one.
    assert!(units[&("batched", "dup-hint")] <= 1.0, "{units:?}");
    assert!(units[&("batched", "mix-retry")] <= reference, "{units:?} against {reference}");
    assert!(units[&("batched", "mix-hint")] <= reference, "{units:?} against {reference}");
    println!("\n| path | 10 duplicates, receive count > 1 (per duplicate) | 10 duplicates, producer retries (per duplicate) | 10 first deliveries (per message) | 20 % mix, producer retries (per message) | 20 % mix, SQS redeliveries (per message) |");
    println!("|---|---|---|---|---|---|");
    for row in &rows {
        println!("| {} |", row.join(" | "));
    }
    println!("| one by one (`Ledger::post`) | | | | {:.2} WU, {:.2} req | |\n", reference, reference_requests);
}
