//! The schedules suite: property tests any [`Store`] runs, over generated schedules of
//! deliveries, duplicates, reorderings, concurrent consumers, lease expiries, crashes, handlers
//! that outrun their lease (the clock moves while they run) and lost completion answers, with the
//! invariants checked after every step.
//!
//! ```text
//! async fn make_store() -> MyStore { MyStore::connect().await }
//! fn runtime() -> tokio::runtime::Runtime { /* current thread, the time driver on */ }
//! effectively_once::store_schedule_tests!(make_store, runtime, cases = 64);
//! ```
//!
//! Time moves through a [`ManualClock`], so the suite runs as well against a store over the
//! network (tokio's time running) as in memory (tokio's time paused). Each schedule runs on the
//! store `make_store` returns, with the same keys: give each call a namespace of its own.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;

use crate::contract::LoseCompletionAnswers;
use crate::{Begin, Clock, Config, ErrorKind, Idempotency, Key, ManualClock, Outcome, RunError, Status, Store};

// The macro's `proptest!` and config reach proptest through here, so a caller needs no
// dependency of its own on it.
#[doc(hidden)]
pub use proptest as __proptest;

/// Expands to the suite's tests for one store: two fixed schedules and a fixed run of a handler
/// that outruns its lease, each a `#[test]`, and `schedules_keep_the_invariants`, `cases`
/// generated [`schedule`]s. `$make().await` gives a store for each run, `$runtime()` the
/// runtime it runs on.
#[macro_export]
macro_rules! store_schedule_tests {
    ($make:path, $runtime:path, cases = $cases:expr $(,)?) => {
        /// A handler that outruns its lease, time passing before its effect, raced by a
        /// delivery that takes the key over: the late effect is never applied.
        #[test]
        fn a_handler_that_outruns_its_lease_does_not_apply_its_effect_after_it() {
            $runtime().block_on(async {
                $crate::schedules::run($make().await, $crate::schedules::outrun_before_effect()).await
            });
        }

        /// The same, the time passing after the effect: the result is not recorded, and the
        /// effect is repeated by the takeover only as after a crash (counted as one).
        #[test]
        fn a_handler_that_outruns_its_lease_after_its_effect_is_not_completed() {
            $runtime().block_on(async {
                $crate::schedules::run($make().await, $crate::schedules::outrun_after_effect()).await
            });
        }

        /// Alone, with no other delivery racing it: still not reported fresh.
        #[test]
        fn a_handler_that_outruns_its_lease_alone_is_not_reported_fresh() {
            $runtime().block_on(async { $crate::schedules::outrun_alone($make().await).await });
        }

        $crate::schedules::__proptest::proptest! {
            #![proptest_config($crate::schedules::__proptest::test_runner::Config {
                cases: $cases,
                ..$crate::schedules::__proptest::test_runner::Config::default()
            })]

            #[test]
            fn schedules_keep_the_invariants(steps in $crate::schedules::schedule()) {
                $runtime().block_on(async { $crate::schedules::run($make().await, steps).await });
            }
        }
    };
}

/// Events a schedule delivers, `0..EVENTS`.
pub const EVENTS: usize = 4;
/// The lease every attempt runs under.
pub const LEASE_MS: u64 = 1_000;

/// One step of a schedule.
#[derive(Debug, Clone)]
pub enum Step {
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
    /// A slow delivery: time passes inside its handler (before or after its effect), raced by
    /// a plain delivery of the same event that may take the key over once the lease has ended.
    Slow {
        /// The event delivered twice.
        event: usize,
        /// Time the slow handler lets pass.
        advance_ms: u64,
        /// Whether the time passes before its effect (else after).
        before_effect: bool,
    },
    /// A delivery whose completion answers are lost, each after its write landed or before;
    /// three lost answers exhaust the retries.
    LostCompletions {
        /// The event delivered.
        event: usize,
        /// How many completion answers are lost.
        lost: u32,
        /// Whether each lost completion's write landed.
        landed: bool,
    },
}

/// Any one step.
pub fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..EVENTS).prop_map(Step::Deliver),
        2 => (0..EVENTS, 0..EVENTS).prop_map(|(a, b)| Step::Concurrent(a, b)),
        1 => (0..EVENTS).prop_map(Step::CrashAfterClaim),
        1 => (0..EVENTS).prop_map(Step::CrashAfterEffect),
        1 => (0..EVENTS).prop_map(Step::Reuse),
        2 => (0..3 * LEASE_MS).prop_map(Step::Advance),
        2 => (0..EVENTS, 0..3 * LEASE_MS, any::<bool>())
            .prop_map(|(event, advance_ms, before_effect)| Step::Slow { event, advance_ms, before_effect }),
        1 => (0..EVENTS, 1..=3u32, any::<bool>()).prop_map(|(event, lost, landed)| Step::LostCompletions { event, lost, landed }),
    ]
}

/// What the world looks like: effects applied, handlers in flight (with the end of the lease
/// each runs under), and what each run answered.
#[derive(Default)]
struct World {
    effects: HashMap<usize, u64>,
    in_flight: HashMap<usize, Vec<(u64, u64)>>,
    next_handler: u64,
    crashes_after_effect: HashMap<usize, u64>,
    answers: HashMap<usize, Vec<u64>>,
}

type Shared = Arc<Mutex<World>>;

/// A schedule: 1 to 39 steps.
pub fn schedule() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step(), 1..40)
}

/// A handler that outruns its lease, time passing before its effect, raced by a plain delivery
/// that takes the key over once the lease has ended.
pub fn outrun_before_effect() -> Vec<Step> {
    vec![Step::Slow { event: 0, advance_ms: 2 * LEASE_MS, before_effect: true }]
}

/// The same, the time passing after the effect, then another delivery.
pub fn outrun_after_effect() -> Vec<Step> {
    vec![Step::Slow { event: 1, advance_ms: 2 * LEASE_MS, before_effect: false }, Step::Deliver(1)]
}

/// Tries `Idempotency::complete` makes before giving up.
const COMPLETE_TRIES: usize = 3;

fn key(e: usize) -> Key {
    Key::new("prop", &format!("event-{e}")).unwrap()
}

fn payload(e: usize, reused: &HashMap<usize, bool>) -> serde_json::Value {
    let amount = if reused.contains_key(&e) { 999_999 } else { 100 + e };
    json!({"event_id": format!("event-{e}"), "amount_cents": amount})
}

/// Time a handler lets pass while it runs, and whether before its effect.
#[derive(Debug, Clone, Copy)]
struct Slowness {
    advance_ms: u64,
    before_effect: bool,
}

/// Takes a handler out of the in-flight set however it ends, its future dropped included (an
/// attempt cut off at the end of its lease).
struct InFlight {
    world: Shared,
    event: usize,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut w = self.world.lock().unwrap_or_else(|p| p.into_inner());
        w.in_flight.entry(self.event).or_default().retain(|(id, _)| *id != self.id);
    }
}

/// The handler: marks itself in flight, yields (so concurrent deliveries interleave), applies the
/// effect, answers the effect count it saw. A slow one moves the clock on while it runs. It
/// starts right after its claim, so its lease ends `LEASE_MS` after its start. `applied` tells
/// the caller whether the effect happened before the handler ended or was cut off.
async fn handler(
    world: Shared,
    e: usize,
    clock: Arc<ManualClock>,
    slow: Option<Slowness>,
    applied: Arc<Mutex<bool>>,
) -> Result<u64, std::convert::Infallible> {
    let lease_end = clock.now_ms() + LEASE_MS;
    let _in_flight = {
        let mut w = world.lock().unwrap();
        let id = w.next_handler;
        w.next_handler += 1;
        let now = clock.now_ms();
        let running = w.in_flight.entry(e).or_default();
        // Another attempt may start only once the lease of every running one has ended.
        assert!(
            running.iter().all(|(_, end)| *end < now),
            "event {e}: a handler started while another ran within its lease"
        );
        running.push((id, lease_end));
        InFlight { world: world.clone(), event: e, id }
    };
    if let Some(s) = slow.filter(|s| s.before_effect) {
        clock.advance(Duration::from_millis(s.advance_ms));
    }
    tokio::task::yield_now().await;
    let count = {
        // The effect happens within the lease or not at all: an attempt past its lease may
        // already have been taken over, and its effect would be the second.
        assert!(clock.now_ms() <= lease_end, "event {e}: effect applied after the handler's lease ended");
        let mut w = world.lock().unwrap();
        let count = w.effects.entry(e).or_default();
        *count += 1;
        *applied.lock().unwrap() = true;
        *count
    };
    if let Some(s) = slow.filter(|s| !s.before_effect) {
        clock.advance(Duration::from_millis(s.advance_ms));
        tokio::task::yield_now().await;
    }
    Ok(count)
}

struct Env<'a, S> {
    idem: &'a Idempotency<LoseCompletionAnswers<S>>,
    world: &'a Shared,
    clock: &'a Arc<ManualClock>,
    reused: &'a HashMap<usize, bool>,
}

async fn deliver<S: Store>(env: &Env<'_, S>, e: usize, slow: Option<Slowness>) {
    let applied = Arc::new(Mutex::new(false));
    let run = || handler(env.world.clone(), e, env.clock.clone(), slow, applied.clone());
    let lost_all = env.idem.store().lost.load(Ordering::SeqCst) >= COMPLETE_TRIES;
    let outcome = env.idem.run(&key(e), &payload(e, env.reused), run).await;
    if let (Some(s), Ok(Outcome::Fresh(_))) = (slow, &outcome) {
        // A handler that ran longer than its whole lease outran it: its result must not be
        // reported as a fresh success (another attempt may have run meanwhile).
        assert!(s.advance_ms <= LEASE_MS, "event {e}: reported fresh after outrunning its lease by {s:?}");
    }
    match outcome {
        Ok(Outcome::Fresh(v)) | Ok(Outcome::Replayed(v)) => {
            env.world.lock().unwrap().answers.entry(e).or_default().push(v)
        }
        Err(RunError::Idempotency(err)) if err.kind() == ErrorKind::LeaseLost => {
            // Only a handler that outran its lease loses it; its result is not recorded, so an
            // effect it applied counts as an attempt that died after its effect.
            assert!(slow.is_some_and(|s| s.advance_ms > 0), "event {e}: lease lost without outrunning it: {err}");
            if *applied.lock().unwrap() {
                *env.world.lock().unwrap().crashes_after_effect.entry(e).or_default() += 1;
            }
        }
        Err(RunError::Idempotency(err)) if err.kind() == ErrorKind::StoreUnavailable => {
            // Only when every try of the completion lost its answer. The effect happened; the
            // record is completed if a try landed, else left in progress: an attempt that died
            // after its effect.
            assert!(lost_all, "event {e}: completion gave up before its tries ran out: {err}");
            let record = env.idem.store().get(key(e).as_str()).await.unwrap().unwrap();
            if record.status == Status::InProgress {
                *env.world.lock().unwrap().crashes_after_effect.entry(e).or_default() += 1;
            }
        }
        Err(RunError::Idempotency(err)) => {
            assert_eq!(err.kind(), ErrorKind::InProgress, "only a live lease may refuse: {err}")
        }
        Err(RunError::Handler(never)) => match never {},
    }
}

async fn check<S: Store>(idem: &Idempotency<LoseCompletionAnswers<S>>, world: &Shared) {
    {
        let w = world.lock().unwrap();
        for e in 0..EVENTS {
            let applied = w.effects.get(&e).copied().unwrap_or(0);
            let crashes = w.crashes_after_effect.get(&e).copied().unwrap_or(0);
            // Exactly once, but for the one window claim/complete cannot close: an attempt that
            // died (or outran its lease) after its effect and before completing (commit-once
            // closes it for DynamoDB writes).
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

/// A delivery of `e` that claims it and dies before completing: after the claim, or after the
/// effect ran (counted in the world).
async fn crash<S: Store>(env: &Env<'_, S>, e: usize, after_effect: bool) {
    if let Ok(Begin::Claimed(attempt)) = env.idem.begin::<_, u64>(&key(e), &payload(e, env.reused)).await {
        if after_effect {
            handler(env.world.clone(), e, env.clock.clone(), None, Arc::default()).await.unwrap();
            *env.world.lock().unwrap().crashes_after_effect.entry(e).or_default() += 1;
        }
        drop(attempt);
    }
}

/// Runs `steps` on `store`, checking the invariants after each, then checks that every event
/// completes once every lease has ended. Panics on the first invariant broken.
pub async fn run<S: Store>(store: S, steps: Vec<Step>) {
    let clock = Arc::new(ManualClock::at(1_800_000_000_000));
    let config = Config::default()
        .with_lease(Duration::from_millis(LEASE_MS))
        .with_dedup_window(Duration::from_secs(365 * 24 * 3600))
        .with_clock(clock.clone());
    let idem = Idempotency::new(LoseCompletionAnswers::new(store), config);
    let world: Shared = Arc::default();
    let mut reused = HashMap::new();
    for step in steps {
        let env = Env { idem: &idem, world: &world, clock: &clock, reused: &reused };
        let fresh = |e| handler(world.clone(), e, clock.clone(), None, Arc::default());
        match step {
            Step::Deliver(e) => deliver(&env, e, None).await,
            Step::Concurrent(a, b) => {
                tokio::join!(deliver(&env, a, None), deliver(&env, b, None));
            }
            Step::Slow { event, advance_ms, before_effect } => {
                let slow = Slowness { advance_ms, before_effect };
                tokio::join!(deliver(&env, event, Some(slow)), deliver(&env, event, None));
            }
            Step::LostCompletions { event, lost, landed } => {
                idem.store().lost.store(lost as usize, Ordering::SeqCst);
                idem.store().land.store(landed, Ordering::SeqCst);
                deliver(&env, event, None).await;
                // A replay sent no completion: no lost answer may leak into later steps.
                idem.store().lost.store(0, Ordering::SeqCst);
            }
            Step::CrashAfterClaim(e) => crash(&env, e, false).await,
            Step::CrashAfterEffect(e) => crash(&env, e, true).await,
            Step::Reuse(e) if !reused.contains_key(&e) => {
                let other = json!({"event_id": format!("event-{e}"), "amount_cents": 999_999});
                match idem.run(&key(e), &other, || fresh(e)).await {
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
    let env = Env { idem: &idem, world: &world, clock: &clock, reused: &reused };
    for e in 0..EVENTS {
        deliver(&env, e, None).await;
        let record = idem.store().get(key(e).as_str()).await.unwrap().unwrap();
        assert_eq!(record.status, Status::Completed, "event {e} never completed");
    }
    check(&idem, &world).await;
}

/// A handler that outruns its lease alone, with no other delivery racing it: not reported fresh,
/// not completed, and the next delivery takes the key over and runs the effect again, as after a
/// crash.
pub async fn outrun_alone<S: Store>(store: S) {
    let clock = Arc::new(ManualClock::at(1_800_000_000_000));
    let config = Config::default().with_lease(Duration::from_millis(LEASE_MS)).with_clock(clock.clone());
    let idem = Idempotency::new(LoseCompletionAnswers::new(store), config);
    let (world, reused) = (Shared::default(), HashMap::new());
    let env = Env { idem: &idem, world: &world, clock: &clock, reused: &reused };
    deliver(&env, 2, Some(Slowness { advance_ms: 2 * LEASE_MS, before_effect: false })).await;
    // Not completed: the next delivery takes the key over and runs the effect again, as
    // after a crash (counted as one by `deliver`).
    let record = idem.store().get(key(2).as_str()).await.unwrap().unwrap();
    assert_eq!(record.status, Status::InProgress);
    deliver(&env, 2, None).await;
    assert_eq!(world.lock().unwrap().effects.get(&2), Some(&2));
    check(&idem, &world).await;
}
