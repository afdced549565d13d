//! Keyed email at most once (`effectively_once_effects::send_once`): relay invocations of one
//! receipt claim its marker, send or record the email ambiguous, and complete the marker while
//! they own it (`complete_while_owned`), or release it after a definite failure; under lost
//! claim answers and their retries, sends that go out with their answer lost, refusals,
//! throttling, lost completions and releases, crashes at any step and leases that end.

use effectively_once::protocol::{self, Judged};
use effectively_once::{Config, PayloadHash, Replaced};
use effectively_once_effects::{on_send_error, sends_once_claimed, OnSendError, Policy, SendErrorKind};
use stateright::{Model, Property};

use crate::{claim_actions, claim_record, land_stray, send_claim, shared_actions, ClaimFault, Unanswered, World};

/// Where one relay invocation is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Relay {
    /// Not started.
    Idle,
    /// Its claim's answer did not come back.
    ClaimUnanswered(Unanswered),
    /// Holds the marker until `lease`; about to send.
    Sending {
        /// The attempt's lease end.
        lease: u64,
    },
    /// Recording an outcome on the marker it owns.
    Recording {
        /// The attempt's lease end.
        lease: u64,
    },
    /// Releasing the marker after a definite failure.
    Releasing,
    /// Finished.
    Done,
}

/// What became of a send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Send {
    /// Sent and answered.
    Sent,
    /// Sent; the answer lost (`Ambiguous`).
    SentAnswerLost,
    /// Not sent, but the failure is ambiguous (a timeout before it went out).
    LostBeforeSending,
    /// Sent, then the invocation died.
    SentThenCrash,
    /// Throttled: not sent (`Throttled`).
    Throttled,
    /// Refused for good (`Rejected`).
    Rejected,
}

const SENDS: [Send; 6] =
    [Send::Sent, Send::SentAnswerLost, Send::LostBeforeSending, Send::SentThenCrash, Send::Throttled, Send::Rejected];

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The marker's claim (first or retried).
    Claim(usize, ClaimFault),
    /// The SDK gives up on the claim.
    GiveUp(usize),
    /// The send, and what became of it.
    Send(usize, Send),
    /// The marker's completion: landed or not.
    Record(usize, bool),
    /// The release: landed or not.
    Release(usize, bool),
    /// The invocation dies.
    Crash(usize),
    /// A marker claim of relay `usize` that was lost on the way lands after all, late.
    StrayLands(usize),
    /// The clock moves on.
    Tick,
}

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Store and clock.
    pub world: World,
    /// Emails that went out.
    pub emails: u8,
    /// The invocations.
    pub relays: Vec<Relay>,
    /// Per relay, a claim request lost on the way that may still land.
    pub strays: Vec<Option<Unanswered>>,
}

/// The model: `relays` invocations of one receipt, under `policy`.
pub struct EmailModel {
    /// How many invocations.
    pub relays: usize,
    /// The policy.
    pub policy: Policy,
    /// The last moment the clock reaches.
    pub horizon: u64,
    hash: PayloadHash,
}

impl EmailModel {
    /// `relays` invocations under at most once.
    pub fn new(relays: usize) -> Self {
        let hash = Config::default().payload_hash(&serde_json::json!({"to": "a@example.com"})).expect("hashes");
        EmailModel { relays, policy: Policy::AtMostOnce, horizon: crate::MAX_NOW, hash }
    }

    /// The same model with the clock stopping at `horizon`.
    pub fn with_horizon(mut self, horizon: u64) -> Self {
        self.horizon = horizon;
        self
    }

    fn owner(i: usize) -> String {
        format!("r{i}")
    }

    fn claimed(&self, replaced: &Replaced, lease: u64) -> Relay {
        if sends_once_claimed(replaced, self.policy) {
            Relay::Sending { lease }
        } else {
            Relay::Recording { lease }
        }
    }

    /// Relay `i` sends its claim (again, if its answer was lost) under `fault`: where it goes
    /// next, or `None` when it has no claim to send.
    fn claim(&self, state: &mut State, i: usize, fault: ClaimFault) -> Option<Relay> {
        let now = state.world.now;
        let request = match &state.relays[i] {
            Relay::Idle => Unanswered { record: claim_record(&Self::owner(i), self.hash.as_str(), now), now },
            Relay::ClaimUnanswered(request) => request.clone(),
            _ => return None,
        };
        let lease = request.record.lease_expires_at_ms;
        if fault == ClaimFault::RequestLost {
            state.strays[i] = Some(request.clone());
        }
        Some(match send_claim(&mut state.world, &request, fault, false) {
            Some(Judged::Claimed(replaced)) => self.claimed(&replaced, lease),
            // A replay (or another attempt in progress): nothing sent.
            Some(Judged::Blocked(_)) => Relay::Done,
            None => Relay::ClaimUnanswered(request),
        })
    }

    fn after_send_error(&self, kind: SendErrorKind, lease: u64) -> Relay {
        match on_send_error(kind, self.policy) {
            OnSendError::RecordFailed | OnSendError::RecordAmbiguous => Relay::Recording { lease },
            OnSendError::Release => Relay::Releasing,
        }
    }
}

impl Model for EmailModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.relays;
        vec![State { world: World::new(self.horizon), emails: 0, relays: vec![Relay::Idle; n], strays: vec![None; n] }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, relay) in state.relays.iter().enumerate() {
            match relay {
                Relay::Idle | Relay::ClaimUnanswered(_) => {
                    let unanswered = matches!(relay, Relay::ClaimUnanswered(_));
                    claim_actions(i, unanswered, Action::Claim, Action::GiveUp, actions);
                }
                Relay::Sending { .. } => actions.extend(SENDS.iter().map(|s| Action::Send(i, *s))),
                Relay::Recording { .. } => actions.extend([Action::Record(i, true), Action::Record(i, false)]),
                Relay::Releasing => actions.extend([Action::Release(i, true), Action::Release(i, false)]),
                Relay::Done => {}
            }
            if !matches!(relay, Relay::Idle | Relay::Done) {
                actions.push(Action::Crash(i));
            }
        }
        shared_actions(&state.world, &state.strays, Action::StrayLands, Action::Tick, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.world.now;
        let (i, next) = match action {
            Action::Tick => {
                state.world.now += 1;
                return Some(state);
            }
            Action::StrayLands(i) => {
                land_stray(&mut state.world, &mut state.strays, i, false)?;
                return Some(state);
            }
            Action::Claim(i, fault) => (i, self.claim(&mut state, i, fault)?),
            Action::GiveUp(i) | Action::Crash(i) => (i, Relay::Done),
            Action::Send(i, send) => {
                let Relay::Sending { lease } = state.relays[i] else { return None };
                if matches!(send, Send::Sent | Send::SentAnswerLost | Send::SentThenCrash) {
                    state.emails += 1;
                }
                let next = match send {
                    Send::Sent => Relay::Recording { lease },
                    Send::SentThenCrash => Relay::Done,
                    Send::SentAnswerLost | Send::LostBeforeSending => {
                        self.after_send_error(SendErrorKind::Ambiguous, lease)
                    }
                    Send::Throttled => self.after_send_error(SendErrorKind::Throttled, lease),
                    Send::Rejected => self.after_send_error(SendErrorKind::Rejected, lease),
                };
                (i, next)
            }
            Action::Record(i, landed) => {
                let Relay::Recording { lease } = state.relays[i] else { return None };
                if landed {
                    // `complete_while_owned`: the owner fence alone, judged at the lease's end.
                    state.world.complete(&Self::owner(i), "\"outcome\"", now.min(lease));
                }
                (i, Relay::Done)
            }
            Action::Release(i, landed) => {
                if landed {
                    let _ = protocol::release(&mut state.world.slot, &Self::owner(i));
                }
                (i, Relay::Done)
            }
        };
        state.relays[i] = next;
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no email is sent twice (at most once)", |_, state: &State| state.emails <= 1),
            Property::sometimes("an email is sent", |_, state: &State| state.emails == 1),
        ]
    }
}
