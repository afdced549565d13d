//! The record protocol as models a model checker explores exhaustively: every interleaving of
//! two or three workers on one key, with lost answers on each write (the request lost, or the
//! write landed and its answer lost, and the SDK's retry of it), crashes at any step, and
//! leases that end.
//!
//! The models hold no copy of the rules they check. Every store step is one of
//! [`effectively_once::protocol`]'s functions (the ones [`InMemoryStore`] applies, and that the
//! store contract suite holds the DynamoDB and Redis stores to); a claim's answer is judged by
//! [`protocol::judge`] and [`Record::replay`], as `Idempotency::begin` judges it; the payments
//! API decides with [`payments_api::rules`] and the keyed email with
//! [`effectively_once_effects::sends_once_claimed`] and [`effectively_once_effects::on_send_error`],
//! as the handlers do. What the models add is only the choice of what happens next.
//!
//! - [`run::RunModel`]: `Idempotency::run`: the handler's effect runs only while its worker holds
//!   the claim, and at most one run ends fresh.
//! - [`api::ApiModel`]: the payments API's held-key rules: no two bodies are ever answered `202`
//!   for one key, one body at most is ever on the queue, and every key ends decided or held.
//! - [`email::EmailModel`]: keyed email at most once: never two emails.
//!
//! [`InMemoryStore`]: effectively_once::InMemoryStore

use effectively_once::protocol::{self, Stored};
use effectively_once::{Completion, Record, Status};

pub mod api;
pub mod email;
pub mod run;

/// A lease, in the models' milliseconds: a record claimed at `t` blocks claims until `t + LEASE`
/// and is taken over from `t + LEASE + 1` on.
pub const LEASE: u64 = 1;
/// The last moment the clock reaches by default: enough for two takeovers of one key.
pub const MAX_NOW: u64 = 4;
/// The dedup window's end, in seconds: never reached (the API keeps its records for good).
pub const WINDOW_S: u64 = 1_000_000;
/// The one key every model works on.
pub const ID: &str = "m#k";

/// The store and the clock: what all workers share.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    /// The key's slot, as [`protocol`] keeps it.
    pub slot: Option<Stored>,
    /// Now, in milliseconds.
    pub now: u64,
    /// The last moment the clock reaches.
    pub horizon: u64,
}

impl World {
    /// An empty store at time zero, with the clock stopping at `horizon`.
    pub fn new(horizon: u64) -> Self {
        World { slot: None, now: 0, horizon }
    }

    /// Whether the clock may move on.
    pub fn can_tick(&self) -> bool {
        self.now < self.horizon
    }

    /// The record, if any.
    pub fn record(&self) -> Option<&Record> {
        self.slot.as_ref().map(|stored| &stored.record)
    }

    /// Completes `owner`'s record with `response` at `now_ms` (the store's step; its answer
    /// does not matter to the callers modelled, which answer the same either way).
    pub fn complete(&mut self, owner: &str, response: &str, now_ms: u64) -> bool {
        let completion = Completion { response: Some(response), expiration_s: WINDOW_S, now_ms };
        protocol::complete(&mut self.slot, owner, &completion).is_ok()
    }
}

impl Default for World {
    fn default() -> Self {
        World::new(MAX_NOW)
    }
}

/// The record a claim at `now` writes, as `Idempotency::begin` builds it.
pub fn claim_record(owner: &str, payload_hash: &str, now: u64) -> Record {
    Record {
        id: ID.to_owned(),
        status: Status::InProgress,
        lease_expires_at_ms: now + LEASE,
        expiration_s: WINDOW_S,
        payload_hash: payload_hash.to_owned(),
        owner: owner.to_owned(),
        response: None,
    }
}

/// What became of a claim's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimFault {
    /// Applied and answered.
    Answered,
    /// Applied; the answer was lost: the SDK sends the same request again.
    AnswerLost,
    /// Never applied (the connection failed first): the SDK sends it again.
    RequestLost,
}

/// The claim faults, for the models' action lists ([`claim_actions`]).
pub const CLAIM_FAULTS: [ClaimFault; 3] = [ClaimFault::Answered, ClaimFault::AnswerLost, ClaimFault::RequestLost];

/// A claim request in flight: the record and the clock it was sent with. A retry sends the same
/// request (the SDK re-sends it as built, `:now` included).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unanswered {
    /// The record the request writes.
    pub record: Record,
    /// The clock it carries.
    pub now: u64,
}

/// Sends a claim through `fault`: the store's answer, or `None` when the worker did not get one.
/// `forgets` stands for a store that does not keep what a claim replaced (the behaviour before
/// the fix): its own in-progress record is answered as it stands.
pub fn send_claim(
    world: &mut World,
    request: &Unanswered,
    fault: ClaimFault,
    forgets: bool,
) -> Option<protocol::Judged> {
    if fault == ClaimFault::RequestLost {
        return None;
    }
    let own = world.record().filter(|r| r.owner == request.record.owner && r.status == Status::InProgress).cloned();
    let answer = match own {
        Some(own) if forgets => effectively_once::Claim::Exists(own),
        _ => protocol::claim(&mut world.slot, &request.record, request.now),
    };
    (fault == ClaimFault::Answered).then(|| protocol::judge(answer, &request.record))
}

/// A worker's claim steps: its claim sent (or sent again) under each fault, and, once a claim
/// went unanswered, giving up on it.
pub fn claim_actions<A>(
    i: usize,
    unanswered: bool,
    claim: impl Fn(usize, ClaimFault) -> A,
    give_up: impl Fn(usize) -> A,
    actions: &mut Vec<A>,
) {
    actions.extend(CLAIM_FAULTS.iter().map(|fault| claim(i, *fault)));
    if unanswered {
        actions.push(give_up(i));
    }
}

/// The steps every model offers besides its workers' own: each claim request lost on the way
/// may land late (`stray(i)`), and the clock may move on (`tick`) until its horizon.
pub fn shared_actions<A>(
    world: &World,
    strays: &[Option<Unanswered>],
    stray: impl Fn(usize) -> A,
    tick: A,
    actions: &mut Vec<A>,
) {
    actions.extend(strays.iter().enumerate().filter(|(_, s)| s.is_some()).map(|(i, _)| stray(i)));
    if world.can_tick() {
        actions.push(tick);
    }
}

/// Lands worker `i`'s stray claim request late: applied, its answer going nowhere.
pub fn land_stray(world: &mut World, strays: &mut [Option<Unanswered>], i: usize, forgets: bool) -> Option<()> {
    let stray = strays[i].take()?;
    send_claim(world, &stray, ClaimFault::AnswerLost, forgets);
    Some(())
}

/// What a check found: the states explored, how deep, and each violated property's trace.
#[derive(Debug)]
pub struct Report {
    /// The model's name.
    pub model: &'static str,
    /// Distinct states explored.
    pub states: usize,
    /// States generated, repeats included.
    pub generated: usize,
    /// The deepest path explored.
    pub depth: usize,
    /// Each `always` property that failed, with its counterexample (the actions, in order).
    pub violations: Vec<(&'static str, String)>,
    /// Each `sometimes` property that found no example.
    pub unreached: Vec<&'static str>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}: {} states ({} generated), depth {}", self.model, self.states, self.generated, self.depth)?;
        for (name, trace) in &self.violations {
            writeln!(f, "  VIOLATED: {name}\n{trace}")?;
        }
        for name in &self.unreached {
            writeln!(f, "  never reached: {name}")?;
        }
        if self.violations.is_empty() && self.unreached.is_empty() {
            writeln!(f, "  every property holds")?;
        }
        Ok(())
    }
}

/// Explores `model` breadth first, down to `depth` steps (`None`: every reachable state), on
/// `threads` threads.
pub fn check<M>(name: &'static str, model: M, depth: Option<usize>, threads: usize) -> Report
where
    M: stateright::Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    explore(name, model, depth, threads, None)
}

/// Explores `model` breadth first until it finds a counterexample to `property` (the shortest),
/// or has seen every reachable state.
pub fn find<M>(name: &'static str, model: M, property: &'static str, threads: usize) -> Report
where
    M: stateright::Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    explore(name, model, None, threads, Some(property))
}

fn explore<M>(name: &'static str, model: M, depth: Option<usize>, threads: usize, until: Option<&'static str>) -> Report
where
    M: stateright::Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    use stateright::{Checker, Expectation, HasDiscoveries};
    let mut builder = model.checker().threads(threads);
    if let Some(depth) = depth {
        builder = builder.target_max_depth(depth);
    }
    if let Some(property) = until {
        builder = builder.finish_when(HasDiscoveries::AnyOf([property].into()));
    }
    let checker = builder.spawn_bfs().join();
    let mut violations = Vec::new();
    let mut unreached = Vec::new();
    for property in checker.model().properties() {
        let found = checker.discovery(property.name);
        match (property.expectation, found) {
            (Expectation::Sometimes, None) => unreached.push(property.name),
            (Expectation::Sometimes, Some(_)) => {}
            (_, Some(path)) => violations.push((property.name, path.to_string())),
            (_, None) => {}
        }
    }
    Report {
        model: name,
        states: checker.unique_state_count(),
        generated: checker.state_count(),
        depth: checker.max_depth(),
        violations,
        unreached,
    }
}
