//! `Idempotency::run` on one key: deliveries of one payload claim, run the handler's effect,
//! complete or release, under lost claim answers and their retries, lost completions and
//! releases, handler failures, crashes at any step and leases that end. The handler is cut off
//! at its lease's end, as `run` cuts it off.

use effectively_once::protocol::{self, Judged};
use effectively_once::{Config, ErrorKind, PayloadHash, Status};
use stateright::{Model, Property};

use crate::{claim_actions, claim_record, send_claim, ClaimFault, Unanswered, World};

/// Where one delivery is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// Not started.
    Idle,
    /// Its claim's answer did not come back: sent again, or given up.
    ClaimUnanswered(Unanswered),
    /// Holds the claim until `lease`; the handler is about to run its effect.
    Running {
        /// The attempt's lease end.
        lease: u64,
    },
    /// The effect is done; completing.
    Completing {
        /// The attempt's lease end.
        lease: u64,
    },
    /// The handler failed; releasing.
    Releasing,
    /// Finished: how.
    Done(End),
}

/// How a delivery finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum End {
    /// `Outcome::Fresh`: the handler ran and its record was completed.
    Fresh,
    /// `Outcome::Replayed`.
    Replayed,
    /// An error: in progress elsewhere, a lease lost, a store error, a handler error, a crash.
    Failed,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The claim (first or retried).
    Claim(usize, ClaimFault),
    /// The SDK gives up on the claim.
    GiveUp(usize),
    /// The handler's effect.
    Effect(usize),
    /// The handler fails.
    HandlerFails(usize),
    /// The completion: landed or not.
    Complete(usize, bool),
    /// The release: landed or not.
    Release(usize, bool),
    /// The delivery's invocation dies.
    Crash(usize),
    /// The clock moves on.
    Tick,
}

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Store and clock.
    pub world: World,
    /// Effects applied so far.
    pub effects: u8,
    /// Set when an effect ran while its delivery did not hold the claim.
    pub unfenced_effect: bool,
    /// The deliveries.
    pub deliveries: Vec<Delivery>,
}

/// The model: `deliveries` copies of one message.
pub struct RunModel {
    /// How many deliveries.
    pub deliveries: usize,
    /// The last moment the clock reaches.
    pub horizon: u64,
    hash: PayloadHash,
}

impl RunModel {
    /// `deliveries` copies of one message.
    pub fn new(deliveries: usize) -> Self {
        let hash = Config::default().payload_hash(&serde_json::json!({"n": 1})).expect("hashes");
        RunModel { deliveries, horizon: crate::MAX_NOW, hash }
    }

    /// The same model with the clock stopping at `horizon`.
    pub fn with_horizon(mut self, horizon: u64) -> Self {
        self.horizon = horizon;
        self
    }

    fn owner(i: usize) -> String {
        format!("d{i}")
    }

    fn judged(&self, judged: Judged, lease: u64) -> Delivery {
        match judged {
            Judged::Claimed(_) => Delivery::Running { lease },
            Judged::Blocked(existing) => match existing.replay::<u64>(&self.hash) {
                Ok(_) => Delivery::Done(End::Replayed),
                Err(e) if e.kind() == ErrorKind::InProgress => Delivery::Done(End::Failed),
                Err(_) => Delivery::Done(End::Failed),
            },
        }
    }
}

impl Model for RunModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            world: World::new(self.horizon),
            effects: 0,
            unfenced_effect: false,
            deliveries: vec![Delivery::Idle; self.deliveries],
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, delivery) in state.deliveries.iter().enumerate() {
            match delivery {
                Delivery::Idle | Delivery::ClaimUnanswered(_) => {
                    let unanswered = matches!(delivery, Delivery::ClaimUnanswered(_));
                    claim_actions(i, unanswered, Action::Claim, Action::GiveUp, actions);
                }
                Delivery::Running { .. } => actions.extend([Action::Effect(i), Action::HandlerFails(i)]),
                Delivery::Completing { .. } => actions.extend([Action::Complete(i, true), Action::Complete(i, false)]),
                Delivery::Releasing => actions.extend([Action::Release(i, true), Action::Release(i, false)]),
                Delivery::Done(_) => {}
            }
            if !matches!(delivery, Delivery::Idle | Delivery::Done(_)) {
                actions.push(Action::Crash(i));
            }
        }
        if state.world.can_tick() {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.world.now;
        let (i, next) = match action {
            Action::Tick => {
                state.world.now += 1;
                return Some(state);
            }
            Action::Claim(i, fault) => {
                let request = match &state.deliveries[i] {
                    Delivery::Idle => {
                        Unanswered { record: claim_record(&Self::owner(i), self.hash.as_str(), now), now }
                    }
                    Delivery::ClaimUnanswered(request) => request.clone(),
                    _ => return None,
                };
                let lease = request.record.lease_expires_at_ms;
                let next = match send_claim(&mut state.world, &request, fault, false) {
                    Some(judged) => self.judged(judged, lease),
                    None => Delivery::ClaimUnanswered(request),
                };
                (i, next)
            }
            Action::GiveUp(i) => (i, Delivery::Done(End::Failed)),
            Action::Effect(i) => {
                let Delivery::Running { lease } = state.deliveries[i] else { return None };
                if now > lease {
                    // `run` cuts the handler off at its lease's end: no effect.
                    (i, Delivery::Done(End::Failed))
                } else {
                    let holds = state.world.record().is_some_and(|r| {
                        r.owner == Self::owner(i) && r.status == Status::InProgress && r.lease_expires_at_ms >= now
                    });
                    state.unfenced_effect |= !holds;
                    state.effects += 1;
                    (i, Delivery::Completing { lease })
                }
            }
            Action::HandlerFails(i) => (i, Delivery::Releasing),
            Action::Complete(i, landed) => {
                let Delivery::Completing { lease } = state.deliveries[i] else { return None };
                // `Idempotency::complete` refuses at once past the lease; the store's condition
                // refuses the rest.
                let done = landed && now <= lease && state.world.complete(&Self::owner(i), "1", now);
                (i, Delivery::Done(if done { End::Fresh } else { End::Failed }))
            }
            Action::Release(i, landed) => {
                if landed {
                    let _ = protocol::release(&mut state.world.slot, &Self::owner(i));
                }
                (i, Delivery::Done(End::Failed))
            }
            Action::Crash(i) => (i, Delivery::Done(End::Failed)),
        };
        state.deliveries[i] = next;
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("the effect runs only while its delivery holds the claim", |_, state: &State| {
                !state.unfenced_effect
            }),
            Property::always("at most one delivery ends fresh", |_, state: &State| {
                state.deliveries.iter().filter(|d| **d == Delivery::Done(End::Fresh)).count() <= 1
            }),
            Property::always("a fresh end follows one effect, and no later one", |_, state: &State| {
                let fresh = state.deliveries.contains(&Delivery::Done(End::Fresh));
                // After a completion, no claim succeeds again: the effect count stops there.
                !fresh || state.world.record().is_some_and(|r| r.status == Status::Completed)
            }),
            Property::sometimes("a delivery ends fresh", |_, state: &State| {
                state.deliveries.contains(&Delivery::Done(End::Fresh))
            }),
        ]
    }
}
