//! Property tests: generated schedules of deliveries, duplicates, reorderings, concurrent
//! consumers, lease expiries and crashes against the in-memory store, with the invariants
//! checked after every step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotency::{
    Begin, Config, ErrorKind, Idempotency, InMemoryStore, Key, ManualClock, Outcome, RunError, Status, Store,
};
use proptest::prelude::*;
use serde_json::json;

const EVENTS: usize = 4;
const LEASE_MS: u64 = 1_000;

#[derive(Debug, Clone)]
enum Step {
    /// One delivery of an event.
    Deliver(usize),
    /// Two consumers deliver the same or different events at once.
    Concurrent(usize, usize),
    /// An attempt claims, then dies before its effect.
    CrashAfterClaim(usize),
    /// An attempt claims, applies its effect, then dies before completing.
    CrashAfterEffect(usize),
    /// A producer reuses the event id with another payload.
    Reuse(usize),
    /// Time passes (lease expiries).
    Advance(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..EVENTS).prop_map(Step::Deliver),
        2 => (0..EVENTS, 0..EVENTS).prop_map(|(a, b)| Step::Concurrent(a, b)),
        1 => (0..EVENTS).prop_map(Step::CrashAfterClaim),
        1 => (0..EVENTS).prop_map(Step::CrashAfterEffect),
        1 => (0..EVENTS).prop_map(Step::Reuse),
        2 => (0..3 * LEASE_MS).prop_map(Step::Advance),
    ]
}

/// What the world looks like: effects applied, handlers in flight, and what each run answered.
#[derive(Default)]
struct World {
    effects: HashMap<usize, u64>,
    in_flight: HashMap<usize, u32>,
    max_in_flight: u32,
    crashes_after_effect: HashMap<usize, u64>,
    answers: HashMap<usize, Vec<u64>>,
}

type Shared = Arc<Mutex<World>>;

fn key(e: usize) -> Key {
    Key::new("prop", &format!("event-{e}")).unwrap()
}

fn payload(e: usize, reused: &HashMap<usize, bool>) -> serde_json::Value {
    let amount = if reused.contains_key(&e) { 999_999 } else { 100 + e };
    json!({"event_id": format!("event-{e}"), "amount_cents": amount})
}

/// The handler: marks itself in flight, yields (so concurrent deliveries interleave), applies the
/// effect, answers the effect count it saw.
async fn handler(world: Shared, e: usize) -> Result<u64, std::convert::Infallible> {
    {
        let mut w = world.lock().unwrap();
        let n = w.in_flight.entry(e).or_default();
        *n += 1;
        let n = *n;
        w.max_in_flight = w.max_in_flight.max(n);
    }
    tokio::task::yield_now().await;
    let mut w = world.lock().unwrap();
    *w.in_flight.get_mut(&e).unwrap() -= 1;
    let count = w.effects.entry(e).or_default();
    *count += 1;
    Ok(*count)
}

async fn deliver(idem: &Idempotency<InMemoryStore>, world: &Shared, e: usize, reused: &HashMap<usize, bool>) {
    match idem.run(&key(e), &payload(e, reused), || handler(world.clone(), e)).await {
        Ok(Outcome::Fresh(v)) | Ok(Outcome::Replayed(v)) => world.lock().unwrap().answers.entry(e).or_default().push(v),
        Err(RunError::Idempotency(err)) => {
            assert_eq!(err.kind(), ErrorKind::InProgress, "only a live lease may refuse: {err}")
        }
        Err(RunError::Handler(never)) => match never {},
    }
}

async fn check(idem: &Idempotency<InMemoryStore>, world: &Shared) {
    {
        let w = world.lock().unwrap();
        assert!(w.max_in_flight <= 1, "two handler bodies ran at once for one key");
        for e in 0..EVENTS {
            let applied = w.effects.get(&e).copied().unwrap_or(0);
            let crashes = w.crashes_after_effect.get(&e).copied().unwrap_or(0);
            // Exactly once, but for the one window claim/complete cannot close: an attempt that
            // died after its effect and before completing (commit-once closes it for DynamoDB
            // writes).
            assert!(
                applied <= 1 + crashes,
                "event {e}: applied {applied} times with {crashes} crashes after the effect"
            );
            if let Some(answers) = w.answers.get(&e) {
                assert!(applied >= 1, "event {e}: answered without its effect");
                // Every answer after the first is the stored one: replays never run the handler.
                let first = answers[0];
                assert!(answers.iter().all(|a| *a == first) || crashes > 0, "event {e}: answers {answers:?}");
            }
        }
    }
    for e in 0..EVENTS {
        if let Some(record) = idem.store().get(key(e).as_str()).await.unwrap() {
            if record.status == Status::Completed {
                assert!(world.lock().unwrap().effects.get(&e).copied().unwrap_or(0) >= 1, "completed without effect");
            }
        }
    }
}

fn run_schedule(steps: Vec<Step>) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let clock = Arc::new(ManualClock::at(1_800_000_000_000));
        let config = Config::default()
            .lease(Duration::from_millis(LEASE_MS))
            .dedup_window(Duration::from_secs(365 * 24 * 3600))
            .clock(clock.clone());
        let idem = Idempotency::new(InMemoryStore::new(), config);
        let world: Shared = Arc::default();
        let mut reused = HashMap::new();
        for step in steps {
            match step {
                Step::Deliver(e) => deliver(&idem, &world, e, &reused).await,
                Step::Concurrent(a, b) => {
                    tokio::join!(deliver(&idem, &world, a, &reused), deliver(&idem, &world, b, &reused));
                }
                Step::CrashAfterClaim(e) => {
                    if let Ok(Begin::Claimed(attempt)) = idem.begin::<_, u64>(&key(e), &payload(e, &reused)).await {
                        drop(attempt);
                    }
                }
                Step::CrashAfterEffect(e) => {
                    if let Ok(Begin::Claimed(attempt)) = idem.begin::<_, u64>(&key(e), &payload(e, &reused)).await {
                        handler(world.clone(), e).await.unwrap();
                        *world.lock().unwrap().crashes_after_effect.entry(e).or_default() += 1;
                        drop(attempt);
                    }
                }
                Step::Reuse(e) if !reused.contains_key(&e) => {
                    let other = json!({"event_id": format!("event-{e}"), "amount_cents": 999_999});
                    match idem.run(&key(e), &other, || handler(world.clone(), e)).await {
                        Err(RunError::Idempotency(err)) => {
                            assert!(matches!(err.kind(), ErrorKind::KeyReused | ErrorKind::InProgress), "{err}");
                        }
                        Ok(Outcome::Fresh(v)) => {
                            // The key was free (never claimed, or released): the other payload
                            // is now this key's payload, and later deliveries send it.
                            reused.insert(e, true);
                            world.lock().unwrap().answers.insert(e, vec![v]);
                        }
                        other => panic!("a reused key must not replay another payload's answer: {other:?}"),
                    }
                }
                Step::Reuse(_) => {}
                Step::Advance(ms) => clock.advance(Duration::from_millis(ms)),
            }
            check(&idem, &world).await;
        }
        // Liveness: once every lease has ended, every event can complete.
        clock.advance(Duration::from_millis(2 * LEASE_MS));
        for e in 0..EVENTS {
            deliver(&idem, &world, e, &reused).await;
            let record = idem.store().get(key(e).as_str()).await.unwrap().unwrap();
            assert_eq!(record.status, Status::Completed, "event {e} never completed");
        }
        check(&idem, &world).await;
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn schedules_keep_the_invariants(steps in proptest::collection::vec(step(), 1..40)) {
        run_schedule(steps);
    }
}
