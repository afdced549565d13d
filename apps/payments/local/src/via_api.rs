//! The demo through the inbound edge (`local demo --via-api`): producers send every payment to
//! the payments API over HTTP with its `Idempotency-Key`, as clients that time out and retry,
//! while the API's `SendMessage` answers are delayed or lost on the way back, and its claims'
//! answers are lost after the write landed (the SDK sends them again); then the pipeline drains
//! the queue and the invariants are read back from the tables: one ledger entry and one receipt
//! per key, however many requests and messages each key took.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use effectively_once::{Config, Idempotency};
use effectively_once_dynamodb::DynamoDbStore;
use futures_util::StreamExt;
use payments::PaymentEvent;
use payments_api::{Api, SqsQueue};

use crate::invariants::{self, Audit, Check, Table};
use crate::pipeline::Pipeline;
use crate::workload::{self, Workload};
use local::api::{post, serve, Reply, Server};
use local::error::{Result, ResultExt};
use local::proxy::{Fault, Proxy, RandomFaults};

/// What the clients and the API's queue are put through.
#[derive(Debug, Clone)]
pub struct Faults {
    /// Concurrent producers.
    pub producers: usize,
    /// How long a producer waits for an answer before it gives up and retries.
    pub client_timeout: Duration,
    /// `SendMessage` answers lost after the message landed, per mille.
    pub lost_per_mille: u32,
    /// `SendMessage` calls slowed past the client's timeout, per mille.
    pub slow_per_mille: u32,
    /// The API's claims (`PutItem` on its records) whose answer is lost after the write landed,
    /// per mille: the SDK sends the claim again, and it meets its own record.
    pub lost_claims_per_mille: u32,
    /// The API's lease: `409` answers say to retry when it ends.
    pub lease: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            producers: 8,
            client_timeout: Duration::from_millis(500),
            lost_per_mille: 50,
            slow_per_mille: 50,
            lost_claims_per_mille: 100,
            lease: Duration::from_secs(2),
        }
    }
}

/// What the clients saw, request by request.
#[derive(Debug, Default)]
struct Tally {
    requests: AtomicUsize,
    fresh: AtomicUsize,
    replayed: AtomicUsize,
    in_flight: AtomicUsize,
    unavailable: AtomicUsize,
    timeouts: AtomicUsize,
    refused: AtomicUsize,
}

/// What the run measured.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Keys (event ids) sent.
    pub keys: usize,
    /// What the clients got, by answer.
    pub answers: BTreeMap<&'static str, usize>,
    /// Keys a client saw `202` fresh more than once (must be none).
    pub fresh_twice: usize,
    /// Keys that never got a `202` (must be none).
    pub unanswered: usize,
    /// Deliveries of the payments queue to the consumer.
    pub deliveries: usize,
    /// Faults the proxy injected on `SendMessage`.
    pub injected: BTreeMap<String, u64>,
    /// The tables' invariants, and the API's.
    pub audit: Audit,
    /// Wall time.
    pub elapsed: Duration,
}

impl Summary {
    /// Whether every invariant held.
    pub fn ok(&self) -> bool {
        self.audit.ok()
    }

    /// The report.
    pub fn table(&self) -> String {
        let mut traffic = Table::new(&["through the API", "count"]);
        traffic.row(&[&"keys (event ids)", &self.keys]);
        for (answer, n) in &self.answers {
            traffic.row(&[answer, n]);
        }
        for (fault, n) in &self.injected {
            traffic.row(&[&format!("injected on the queue: {fault}"), n]);
        }
        traffic.row(&[&"deliveries of the payments queue", &self.deliveries]);
        format!("{traffic}\n{}", self.audit.table())
    }
}

/// Runs `workload` (its valid events; poison cannot pass the API) through the API on
/// `pipeline`, then the pipeline until drained, and checks the invariants.
pub async fn run(pipeline: &Pipeline, workload: &Workload, pollers: usize, faults: &Faults) -> Result<Summary> {
    pipeline.purge_queues().await;
    let started = Instant::now();
    let mut workload = workload.clone();
    // The API answers a malformed body or a reused key itself, so none of them reach the queue:
    // those are the API's own tests. Here every key is a valid, distinct payment.
    workload.poison = 0;
    workload.hostile = false;
    let plan = workload::plan(&workload);

    let (proxy, server) = start_api(pipeline, faults, workload.seed).await?;
    let addr = server.addr().to_string();
    eprintln!(
        "sending {} payments through the API at {} ({} producers, {} ms client timeout, {}‰ lost and {}‰ slow SendMessage answers, {}‰ lost claim answers, {} % sent again)",
        plan.sent.len(),
        server.url(),
        faults.producers,
        faults.client_timeout.as_millis(),
        faults.lost_per_mille,
        faults.slow_per_mille,
        faults.lost_claims_per_mille,
        workload.duplicate_pct
    );

    let tally = Tally::default();
    let resend_every = (workload.duplicate_pct > 0).then(|| (100 / workload.duplicate_pct.max(1)) as usize);
    let fresh: Vec<usize> = futures_util::stream::iter(plan.sent.iter().enumerate())
        .map(|(i, sent)| {
            let (addr, tally) = (&addr, &tally);
            let again = resend_every.is_some_and(|n| i % n == 0);
            async move { produce(addr, &sent.event, again, faults, tally).await }
        })
        .buffer_unordered(faults.producers.max(1))
        .collect()
        .await;
    drop(server);

    let mut esm = pipeline.emulator(pipeline.payments(), pipeline.relay()).pollers(pollers);
    esm.skip_stream_backlog(&pipeline.clients).await?;
    let drained = esm.run_until_drained(&pipeline.clients, |_| {}).await?;
    let mut audit = invariants::audit(pipeline, &plan, &workload.run, 0).await?;
    let fresh_twice = fresh.iter().filter(|&&n| n > 1 && n != usize::MAX).count();
    let unanswered = fresh.iter().filter(|&&n| n == usize::MAX).count();
    let answers = tally.answers();
    audit.checks.push(Check {
        name: "the API: every key answered 202, first-time at most once, then replayed".into(),
        ok: fresh_twice == 0 && unanswered == 0 && answers.get("400/422 refused").is_none_or(|n| *n == 0),
        detail: format!("{} keys, {fresh_twice} fresh twice, {unanswered} unanswered", plan.sent.len()),
    });
    Ok(Summary {
        keys: plan.sent.len(),
        answers,
        fresh_twice,
        unanswered,
        deliveries: drained.deliveries,
        injected: proxy.injected(),
        audit,
        elapsed: started.elapsed(),
    })
}

/// The API on `pipeline`'s table and queue, served on `127.0.0.1:0`, its `SendMessage` calls
/// through a fault proxy that loses and slows answers as `faults` says.
async fn start_api(pipeline: &Pipeline, faults: &Faults, seed: u64) -> Result<(Proxy, Server)> {
    let rules = RandomFaults::new(seed)
        .on(
            "amazonsqs:SendMessage",
            &[
                (Fault::DropResponse, faults.lost_per_mille),
                (Fault::Delay(faults.client_timeout * 2), faults.slow_per_mille),
            ],
        )
        .on("dynamodb:PutItem", &[(Fault::DropResponse, faults.lost_claims_per_mille)]);
    let proxy = Proxy::to_local_aws(Arc::new(rules)).await.context("fault proxy")?;
    // No SDK retries on the queue: a lost answer reaches the API, which answers 503, and the
    // client retries.
    let sdk = proxy.sdk_config(aws_config::retry::RetryConfig::disabled()).await;
    let queue = SqsQueue::new(aws_sdk_sqs::Client::new(&sdk), &pipeline.resources.queue_url, false);
    // The SDK's own retries on the records, as deployed: a claim whose answer is lost is sent
    // again and meets the claim's own record (what it replaced must not be lost with it).
    let records = proxy.sdk_config(aws_config::retry::RetryConfig::standard()).await;
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&records), &pipeline.resources.idempotency_table);
    let api = Arc::new(Api::new(Idempotency::new(store, Config::default().with_lease(faults.lease)), queue));
    let server = serve(move |request| {
        let api = api.clone();
        async move { api.handle(request).await }
    })
    .await?;
    Ok((proxy, server))
}

/// How many tries a client makes before it gives up on a key.
const MAX_TRIES: usize = 50;

/// One producer's sends of one payment: until a `202`, retrying on a timeout, a `409` (after its
/// `Retry-After`) or a `503`; then, when `again`, once more, as a client that lost the answer.
/// Returns how many fresh (not replayed) `202`s it saw, `usize::MAX` when none came.
async fn produce(addr: &str, event: &PaymentEvent, again: bool, faults: &Faults, tally: &Tally) -> usize {
    let mut body = serde_json::to_value(event).unwrap_or_default();
    if let Some(fields) = body.as_object_mut() {
        fields.remove("event_id");
    }
    let body = body.to_string();
    let mut fresh = 0;
    for round in 0..1 + usize::from(again) {
        let mut answered = false;
        for _ in 0..MAX_TRIES {
            tally.requests.fetch_add(1, Ordering::Relaxed);
            let reply = post(addr, "/payments", Some(&event.event_id), &body, faults.client_timeout).await;
            match reply {
                Err(_) => {
                    tally.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Reply { status: 202, ref headers, .. }) => {
                    if headers.get(payments_api::REPLAYED).is_some() {
                        tally.replayed.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tally.fresh.fetch_add(1, Ordering::Relaxed);
                        fresh += 1;
                    }
                    answered = true;
                    break;
                }
                Ok(reply @ Reply { status: 409 | 503, .. }) => {
                    let counter = if reply.status == 409 { &tally.in_flight } else { &tally.unavailable };
                    counter.fetch_add(1, Ordering::Relaxed);
                    let seconds = reply.header("retry-after").and_then(|s| s.parse::<u64>().ok()).unwrap_or(1);
                    tokio::time::sleep(Duration::from_secs(seconds.min(5))).await;
                }
                Ok(_) => {
                    tally.refused.fetch_add(1, Ordering::Relaxed);
                    return usize::MAX;
                }
            }
        }
        if !answered {
            eprintln!("{}: no 202 after {MAX_TRIES} tries (round {round})", event.event_id);
            return usize::MAX;
        }
    }
    fresh
}

impl Tally {
    fn answers(&self) -> BTreeMap<&'static str, usize> {
        let load = |n: &AtomicUsize| n.load(Ordering::Relaxed);
        BTreeMap::from([
            ("HTTP requests", load(&self.requests)),
            ("202 first time", load(&self.fresh)),
            ("202 replayed (Idempotent-Replayed)", load(&self.replayed)),
            ("409 in flight (waited Retry-After)", load(&self.in_flight)),
            ("503 send failed or its answer lost (retried)", load(&self.unavailable)),
            ("client timeouts (retried)", load(&self.timeouts)),
            ("400/422 refused", load(&self.refused)),
        ])
    }
}
