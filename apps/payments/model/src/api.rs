//! The payments API's held-key rules ([`payments_api::rules`]) on one `Idempotency-Key`: requests
//! with two bodies, each claiming, sending, completing or releasing as `Api::accept` does, under
//! lost claim answers and their retries, lost or refused sends, lost completions and releases,
//! crashes at any step and leases that end.

use effectively_once::protocol::Judged;
use effectively_once::{Config, ErrorKind, PayloadHash, Replaced};
use payments::PaymentEvent;
use payments_api::rules::{self, OnClaim, OnFailure, OnReused};
use payments_api::Answer;
use stateright::{Model, Property};

use crate::{claim_actions, claim_record, land_stray, send_claim, shared_actions, ClaimFault, Unanswered, World};

/// Where one request is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Req {
    /// Not sent yet.
    Idle,
    /// Its claim's answer did not come back: the SDK sends it again, or gives up (`503`).
    ClaimUnanswered(Unanswered),
    /// Holds the key, about to send; what its claim replaced.
    Send(Replaced),
    /// Storing `response` (an [`Answer`] as JSON); answers `status` whatever becomes of it.
    Complete {
        /// The answer stored.
        response: String,
        /// The status the client gets.
        status: u16,
    },
    /// Releasing the key after a refused send; answers `503`.
    Release,
    /// The key is another body's: reads its record back.
    ReadBack,
    /// Answered (`None`: crashed, the client got no answer).
    Done(Option<u16>),
}

/// What became of a send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendFault {
    /// Landed and answered.
    Ok,
    /// Landed; the answer was lost (a timeout): the outcome is unknown to the API.
    AnswerLost,
    /// Landed, then the invocation died.
    LandedThenCrash,
    /// Refused for sure (4xx): not on the queue.
    Refused,
}

const SEND_FAULTS: [SendFault; 4] =
    [SendFault::Ok, SendFault::AnswerLost, SendFault::LandedThenCrash, SendFault::Refused];

/// One step of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Request `usize` sends its claim (the first time, or the SDK's retry).
    Claim(usize, ClaimFault),
    /// The SDK gives up on an unanswered claim: `503`.
    GiveUp(usize),
    /// The send.
    Send(usize, SendFault),
    /// The completion: landed or not (a lost answer is retried by the core and lands).
    Complete(usize, bool),
    /// The release: landed or not.
    Release(usize, bool),
    /// The read of another body's record.
    ReadBack(usize),
    /// The invocation dies.
    Crash(usize),
    /// A claim request of request `usize` that was lost on the way lands after all, late (its
    /// answer goes nowhere).
    StrayLands(usize),
    /// The clock moves on.
    Tick,
}

/// The state: the store, the queue (a bit per body sent) and each request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Store and clock.
    pub world: World,
    /// Bit `b` set: body `b` is on the queue.
    pub queue: u8,
    /// The requests.
    pub reqs: Vec<Req>,
    /// Per request, a claim request lost on the way that may still land.
    pub strays: Vec<Option<Unanswered>>,
    /// Per body, the claims that let the handler run less the runs (sends) made: a run
    /// without a claim of its own (as the layer once reran a held body) takes it below zero.
    /// Counted as a difference, which mirrors the requests about to send, so it adds few
    /// states.
    pub unrun_claims: [i8; 2],
}

/// `n` requests' bodies: the first half X (0), the rest Y (1): X, X, Y for three.
pub fn bodies(n: usize) -> Vec<usize> {
    (0..n).map(|i| usize::from(i >= n.div_ceil(2))).collect()
}

/// The model: one key, a request per entry of `bodies` (an index into two bodies, X and Y).
pub struct ApiModel {
    /// Each request's body.
    pub bodies: Vec<usize>,
    /// The two payment events (bodies X and Y) and their payload hashes.
    events: [(PaymentEvent, PayloadHash); 2],
    /// The fix reverted: the store forgets what a claim replaced, and the API reads an unknown
    /// replaced record as a free key (as before `rules` held it).
    pub reverted: bool,
    /// The run fix reverted: a claim judges the record it replaced, not the one its run of
    /// takeovers began with.
    pub ignores_runs: bool,
    /// The takeover fix reverted: a refusal over a held body is stored naming it, and that
    /// body's retry runs again without a claim (as the HTTP layer once did).
    pub reruns_unclaimed: bool,
    /// The last moment the clock reaches.
    pub horizon: u64,
}

impl ApiModel {
    /// Requests with these bodies (0 is X, 1 is Y).
    pub fn new(bodies: Vec<usize>) -> Self {
        let config = Config::default();
        let event = |cents: i64| {
            let event = PaymentEvent {
                event_id: "k".into(),
                account_id: "a".into(),
                amount_cents: cents,
                currency: "USD".into(),
                receipt_email: None,
            };
            let hash = config.payload_hash(&event).expect("an event hashes");
            (event, hash)
        };
        ApiModel {
            bodies,
            events: [event(100), event(999)],
            reverted: false,
            ignores_runs: false,
            reruns_unclaimed: false,
            horizon: crate::MAX_NOW,
        }
    }

    /// The same model with the clock stopping at `horizon`.
    pub fn with_horizon(mut self, horizon: u64) -> Self {
        self.horizon = horizon;
        self
    }

    /// The same model judging the record replaced instead of the run's first.
    pub fn ignoring_runs(mut self) -> Self {
        self.ignores_runs = true;
        self
    }

    /// The same model with the takeover fix reverted: a held body reruns without a claim.
    pub fn rerunning_unclaimed(mut self) -> Self {
        self.reruns_unclaimed = true;
        self
    }

    /// The same model with the fix reverted.
    pub fn reverted(mut self) -> Self {
        self.reverted = true;
        self
    }

    fn owner(i: usize) -> String {
        format!("req{i}")
    }

    fn on_claim(&self, replaced: &Replaced, hash: &PayloadHash) -> OnClaim {
        match replaced {
            Replaced::Unknown if self.reverted => rules::on_claim(&Replaced::Nothing, hash),
            Replaced::Run { replaced, .. } if self.ignores_runs => {
                rules::on_claim(&Replaced::Record(replaced.clone()), hash)
            }
            _ => rules::on_claim(replaced, hash),
        }
    }

    fn on_failed_send(&self, refused: bool, replaced: &Replaced) -> OnFailure {
        match replaced {
            Replaced::Unknown if self.reverted => rules::on_failure(refused, &Replaced::Nothing),
            _ => rules::on_failure(refused, replaced),
        }
    }

    /// Where a request goes once it holds its claim's answer.
    fn judged(&self, judged: Judged, body: usize) -> Req {
        let (event, hash) = &self.events[body];
        match judged {
            Judged::Claimed(replaced) => match self.on_claim(&replaced, hash) {
                OnClaim::Run => Req::Send(replaced),
                // As the layer once did: the refusal stored, naming the held body.
                OnClaim::Refuse { held_for } if self.reruns_unclaimed => Req::Complete {
                    response: json(&payments_api::key_reused(event).holding_for(held_for)),
                    status: 422,
                },
                // The key is held for another body whose effect may have happened: refused, not
                // stored; the attempt is left in progress until its lease ends, so that body's
                // retry takes the key over (its claim's run begins with that body's record).
                OnClaim::Refuse { held_for: Some(_) } => Req::Done(Some(422)),
                OnClaim::Refuse { held_for: None } => {
                    Req::Complete { response: json(&payments_api::key_reused(event)), status: 422 }
                }
                OnClaim::Hold => Req::Complete { response: json(&payments_api::key_held(event)), status: 503 },
            },
            Judged::Blocked(existing) => match existing.replay::<Answer>(hash) {
                Ok(answer) => Req::Done(Some(answer.status)),
                Err(e) if e.kind() == ErrorKind::KeyReused => Req::ReadBack,
                Err(e) if e.kind() == ErrorKind::InProgress => Req::Done(Some(409)),
                Err(_) => Req::Done(Some(500)),
            },
        }
    }

    /// One step of request `i` with body `body`, or `None` where the action does not apply.
    fn step(&self, state: &mut State, i: usize, body: usize, action: &Action) -> Option<()> {
        let (event, hash) = &self.events[body];
        let owner = Self::owner(i);
        let req = state.reqs[i].clone();
        let next = match (req, action) {
            (Req::Idle, Action::Claim(_, fault)) => {
                let request =
                    Unanswered { record: claim_record(&owner, hash.as_str(), state.world.now), now: state.world.now };
                self.claim(state, i, body, request, *fault)
            }
            (Req::ClaimUnanswered(request), Action::Claim(_, fault)) => self.claim(state, i, body, request, *fault),
            (Req::ClaimUnanswered(_), Action::GiveUp(_)) => Req::Done(Some(503)),
            (Req::Send(replaced), Action::Send(_, fault)) => {
                state.unrun_claims[body] = state.unrun_claims[body].saturating_sub(1);
                if *fault != SendFault::Refused {
                    state.queue |= 1 << body;
                }
                match fault {
                    SendFault::Ok => Req::Complete { response: json(&payments_api::accepted(event)), status: 202 },
                    SendFault::LandedThenCrash => Req::Done(None),
                    SendFault::AnswerLost | SendFault::Refused => {
                        match self.on_failed_send(*fault == SendFault::Refused, &replaced) {
                            OnFailure::Release => Req::Release,
                            OnFailure::Hold => Req::Done(Some(503)),
                        }
                    }
                }
            }
            (Req::Complete { response, status }, Action::Complete(_, landed)) => {
                if *landed {
                    let now = state.world.now;
                    state.world.complete(&owner, &response, now);
                }
                Req::Done(Some(status))
            }
            (Req::Release, Action::Release(_, landed)) => {
                if *landed {
                    let _ = effectively_once::protocol::release(&mut state.world.slot, &owner);
                }
                Req::Done(Some(503))
            }
            (Req::ReadBack, Action::ReadBack(_)) => match rules::on_reused(state.world.record(), hash) {
                OnReused::Refuse => Req::Done(Some(422)),
                OnReused::Held => Req::Done(Some(503)),
                // As the layer once did: the held body runs again, with no claim of its own.
                OnReused::WaitForWindow if self.reruns_unclaimed => Req::Send(Replaced::Nothing),
                // A refusal stored by earlier versions over this body: `409` until its window
                // ends (never here: the model's window outlasts its horizon).
                OnReused::InProgress | OnReused::WaitForWindow => Req::Done(Some(409)),
            },
            (Req::Idle | Req::Done(_), Action::Crash(_)) => return None,
            (_, Action::Crash(_)) => Req::Done(None),
            _ => return None,
        };
        state.reqs[i] = next;
        Some(())
    }

    fn claim(&self, state: &mut State, i: usize, body: usize, request: Unanswered, fault: ClaimFault) -> Req {
        if fault == ClaimFault::RequestLost {
            // Lost on the way: it may never land, or land late, after anything else.
            state.strays[i] = Some(request.clone());
        }
        match send_claim(&mut state.world, &request, fault, self.reverted) {
            Some(judged) => {
                let claimed = matches!(judged, Judged::Claimed(_));
                let next = self.judged(judged, body);
                if claimed && matches!(next, Req::Send(_)) {
                    state.unrun_claims[body] = state.unrun_claims[body].saturating_add(1);
                }
                next
            }
            None => Req::ClaimUnanswered(request),
        }
    }

    /// What a request with `body`, sent after every lease has ended and met by no fault, is
    /// answered: the key's fate once the dust settles.
    pub fn probe(&self, state: &State, body: usize) -> Option<u16> {
        let mut state = state.clone();
        state.world.now += 2 * crate::LEASE + 2;
        let i = state.reqs.len();
        state.reqs.push(Req::Idle);
        state.strays.push(None);
        for _ in 0..8 {
            let action = match &state.reqs[i] {
                Req::Idle | Req::ClaimUnanswered(_) => Action::Claim(i, ClaimFault::Answered),
                Req::Send(_) => Action::Send(i, SendFault::Ok),
                Req::Complete { .. } => Action::Complete(i, true),
                Req::Release => Action::Release(i, true),
                Req::ReadBack => Action::ReadBack(i),
                Req::Done(status) => return *status,
            };
            self.step(&mut state, i, body, &action)?;
        }
        None
    }

    /// Whether the answers so far hold: no two bodies answered `202`.
    pub fn one_body_answered(&self, state: &State) -> bool {
        let mut accepted = state.reqs.iter().zip(&self.bodies).filter(|(r, _)| **r == Req::Done(Some(202)));
        match accepted.next() {
            None => true,
            Some((_, first)) => accepted.all(|(_, body)| body == first),
        }
    }
}

fn json(answer: &Answer) -> String {
    serde_json::to_string(answer).expect("an answer serialises")
}

impl Model for ApiModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.bodies.len();
        vec![State {
            world: World::new(self.horizon),
            queue: 0,
            reqs: vec![Req::Idle; n],
            strays: vec![None; n],
            unrun_claims: [0; 2],
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, req) in state.reqs.iter().enumerate() {
            match req {
                Req::Idle | Req::ClaimUnanswered(_) => {
                    let unanswered = matches!(req, Req::ClaimUnanswered(_));
                    claim_actions(i, unanswered, Action::Claim, Action::GiveUp, actions);
                }
                Req::Send(_) => actions.extend(SEND_FAULTS.iter().map(|fault| Action::Send(i, *fault))),
                Req::Complete { .. } => actions.extend([Action::Complete(i, true), Action::Complete(i, false)]),
                Req::Release => actions.extend([Action::Release(i, true), Action::Release(i, false)]),
                Req::ReadBack => actions.push(Action::ReadBack(i)),
                Req::Done(_) => {}
            }
            if !matches!(req, Req::Idle | Req::Done(_)) {
                actions.push(Action::Crash(i));
            }
        }
        shared_actions(&state.world, &state.strays, Action::StrayLands, Action::Tick, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let i = match &action {
            Action::Tick => {
                state.world.now += 1;
                return Some(state);
            }
            Action::StrayLands(i) => {
                land_stray(&mut state.world, &mut state.strays, *i, self.reverted)?;
                return Some(state);
            }
            Action::Claim(i, _)
            | Action::GiveUp(i)
            | Action::Send(i, _)
            | Action::Complete(i, _)
            | Action::Release(i, _)
            | Action::ReadBack(i)
            | Action::Crash(i) => *i,
        };
        self.step(&mut state, i, self.bodies[i], &action)?;
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no two bodies answered 202 for one key", |model: &ApiModel, state: &State| {
                model.one_body_answered(state)
            }),
            Property::always("a body is sent only under a claim of its own", |_, state: &State| {
                state.unrun_claims.iter().all(|&unrun| unrun >= 0)
            }),
            Property::always("at most one body on the queue", |_, state: &State| state.queue.count_ones() <= 1),
            Property::always("the body on the queue is never refused (422)", |model: &ApiModel, state: &State| {
                state
                    .reqs
                    .iter()
                    .zip(&model.bodies)
                    .all(|(r, body)| *r != Req::Done(Some(422)) || state.queue & (1 << body) == 0)
            }),
            Property::always("a body on the queue is never forgotten", |_, state: &State| {
                state.queue == 0 || state.world.slot.is_some()
            }),
            Property::always("every key ends decided or held", |model: &ApiModel, state: &State| {
                if !state.reqs.iter().all(|r| matches!(r, Req::Done(_))) {
                    return true;
                }
                (0..2).all(|body| {
                    let queued = state.queue & (1 << body) != 0;
                    let other_queued = state.queue & !(1 << body) != 0;
                    match model.probe(state, body) {
                        // (A fault-free probe answers 503 only as `key_held`: nothing it sends
                        // fails.) The body on the queue still gets its 202, or the key is held.
                        Some(202 | 503) if queued => true,
                        // Another body is on the queue: refused, or held.
                        Some(422 | 503) if other_queued => true,
                        // Nothing on the queue: answered for good, whichever way.
                        Some(202 | 422 | 503) => state.queue == 0,
                        _ => false,
                    }
                })
            }),
            Property::sometimes("a body is accepted", |model: &ApiModel, state: &State| {
                state.reqs.contains(&Req::Done(Some(202))) && model.one_body_answered(state)
            }),
        ]
    }
}
