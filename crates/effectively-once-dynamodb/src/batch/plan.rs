//! A round's transactions, built: each unit's first chunk that fits one transaction (a unit is
//! a group, or groups joined by a lane, [`schedule::units`]), each group's members decided on
//! what the pass knows of its shared item ([`BatchWrites::decide`]), and the chunks packed in
//! order ([`schedule::pack`]), a unit's parts in one transaction.

use aws_sdk_dynamodb::types::TransactWriteItem;
use effectively_once::{Error, StoreError, StoreErrorKind};
use serde::Serialize;

use super::schedule::{self, Owner, States};
use super::{Batch, BatchWrites, Decided, Observed};
use crate::commit_once::{response_json, window_s};
use crate::transaction::{action_size, fits};
use crate::tx::Tx;

/// One transaction of a round.
pub(super) struct Planned<R> {
    pub(super) actions: Vec<TransactWriteItem>,
    pub(super) owners: Vec<Owner>,
    /// Members, with their responses.
    pub(super) members: Vec<(usize, R)>,
    /// Groups: their members.
    pub(super) groups: Vec<Vec<usize>>,
    /// Groups: how their members were decided.
    pub(super) shares: Vec<Share>,
}

/// How a group's members in one transaction were decided.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Share {
    /// What [`BatchWrites::decide`] decided them on; `None`: not decided, all applied under
    /// [`BatchWrites::shared`].
    pub(super) on: Option<Observed>,
    /// The group's item once the transaction commits.
    pub(super) after: Observed,
}

impl<R> Planned<R> {
    fn new() -> Self {
        Planned { actions: Vec::new(), owners: Vec::new(), members: Vec::new(), groups: Vec::new(), shares: Vec::new() }
    }

    /// Adds a group's part, its shared writes owned by its index here.
    fn add(&mut self, part: Planned<R>) {
        let group = self.groups.len();
        self.groups.push(part.members.iter().map(|(index, _)| *index).collect());
        self.actions.extend(part.actions);
        self.owners.extend(part.owners.into_iter().map(|owner| match owner {
            Owner::Shared(_) => Owner::Shared(group),
            other => other,
        }));
        self.members.extend(part.members);
        self.shares.extend(part.shares);
    }

    fn bytes(&self) -> usize {
        self.actions.iter().map(action_size).sum()
    }
}

impl<P, B> Batch<'_, '_, P, B>
where
    P: ?Sized + Sync,
{
    /// The transactions of a round (the first chunk of each unit), the members that must go
    /// alone (a carried record, writes that do not build), and the members deferred to the next
    /// round (a unit's later chunks).
    pub(super) fn plan<R>(&self, live: &[usize], states: &States<'_>) -> (Vec<Planned<R>>, Vec<usize>, Vec<usize>)
    where
        R: Serialize,
        B: BatchWrites<R>,
    {
        let (mut alone, mut deferred, mut units) = (Vec::new(), Vec::new(), Vec::new());
        for unit in schedule::units(self.entries, live) {
            // A unit too large for one transaction goes one chunk per round, in batch order: a
            // group's later chunk's shared write is conditioned on the state the chunk before it
            // left, and a lane's later member must not commit while an earlier one is undecided,
            // so the rest is sent only once that chunk is settled (committed, or its members gone
            // alone, which take the rest of their groups and lanes with them).
            match self.unit_parts(&unit, states) {
                Ok((parts, taken)) => {
                    deferred.extend(unit.iter().zip(taken).flat_map(|(group, taken)| group[taken..].iter().copied()));
                    units.push(parts);
                }
                // A member whose writes do not build, or that carries its record, goes alone,
                // where its error (or its carried record) is handled as for a single commit; its
                // unit goes with it, so its group and lane keep their order.
                Err(_) => alone.extend(unit.iter().flatten().copied()),
            }
        }
        let sizes: Vec<(usize, usize)> = units
            .iter()
            .map(|parts| {
                parts.iter().fold((0, 0), |(actions, bytes), part| (actions + part.actions.len(), bytes + part.bytes()))
            })
            .collect();
        let mut plans: Vec<Planned<R>> = Vec::new();
        for (parts, at) in units.into_iter().zip(schedule::pack(&sizes)) {
            if plans.len() == at {
                plans.push(Planned::new());
            }
            for part in parts {
                plans[at].add(part);
            }
        }
        (plans, alone, deferred)
    }

    /// The longest batch-order prefix of `unit` (at least one member, [`schedule::cut`]) whose
    /// actions and shared writes fit one transaction, built group by group, each group's members
    /// decided on what `states` knows of its item where the writes decide
    /// ([`BatchWrites::decide`]); and how many members of each group it took.
    fn unit_parts<R>(&self, unit: &[Vec<usize>], states: &States<'_>) -> Result<(Vec<Planned<R>>, Vec<usize>), Error>
    where
        R: Serialize,
        B: BatchWrites<R>,
    {
        let mut take: usize = unit.iter().map(Vec::len).sum();
        loop {
            let taken = schedule::cut(unit, take);
            let mut parts = Vec::new();
            for (group, &taken) in unit.iter().zip(&taken).filter(|(_, &taken)| taken > 0) {
                let observed = self.entries[group[0]].group.map_or(&Observed::Unseen, |name| states.get(name));
                parts.push(self.part(&group[..taken], observed)?);
            }
            let actions: usize = parts.iter().map(|part| part.actions.len()).sum();
            let bytes: usize = parts.iter().map(Planned::bytes).sum();
            if fits(actions, bytes) || take == 1 {
                return Ok((parts, taken));
            }
            take = schedule::shrink(take, actions);
        }
    }

    /// `chunk` (of one group, or one ungrouped member) built: its actions and shared writes, its
    /// members decided on `observed` where the writes decide ([`BatchWrites::decide`]).
    fn part<R>(&self, chunk: &[usize], observed: &Observed) -> Result<Planned<R>, Error>
    where
        R: Serialize,
        B: BatchWrites<R>,
    {
        let mut part = Planned::new();
        let mut shared = Tx::<R>::new();
        let (refusals, share) = self.share(chunk, observed, &mut shared)?;
        for (&index, refusal) in chunk.iter().zip(refusals) {
            self.member_part(index, refusal, &mut part)?;
        }
        for write in shared.writes {
            part.actions.push(write.into_item());
            part.owners.push(Owner::Shared(0));
        }
        part.shares.push(share);
        Ok(part)
    }

    /// The shared writes of `chunk` (of one group, or one ungrouped member), and each member's
    /// refusal: decided on `observed` if the writes decide, else none refused.
    #[allow(clippy::type_complexity)]
    fn share<R>(
        &self,
        chunk: &[usize],
        observed: &Observed,
        shared: &mut Tx<R>,
    ) -> Result<(Vec<Option<R>>, Share), Error>
    where
        B: BatchWrites<R>,
    {
        let none = || chunk.iter().map(|_| None).collect();
        if self.entries[chunk[0]].group.is_none() {
            return Ok((none(), Share { on: None, after: Observed::Unseen }));
        }
        match self.writes.decide(chunk, observed, shared) {
            Some(decided) => {
                let Decided { refusals, after } = decided?;
                if refusals.len() != chunk.len() {
                    let message = format!("decide answered {} members of {}", refusals.len(), chunk.len());
                    return Err(StoreError::new(StoreErrorKind::Misuse, message).into());
                }
                Ok((refusals, Share { on: Some(observed.clone()), after }))
            }
            None => {
                self.writes.shared(chunk, shared)?;
                Ok((none(), Share { on: None, after: Observed::Unseen }))
            }
        }
    }

    /// Adds member `index`'s writes and record to `part`; refused (`refusal`: its answer), its
    /// record with that answer and its writes' conditions only.
    fn member_part<R>(&self, index: usize, refusal: Option<R>, part: &mut Planned<R>) -> Result<(), Error>
    where
        R: Serialize,
        B: BatchWrites<R>,
    {
        let config = self.idempotency.config();
        let now_ms = config.now_ms();
        let mut tx = Tx::new();
        let response = self.writes.writes(index, &mut tx)?;
        if tx.carrier.is_some() {
            // Not an error anyone sees: the member goes alone (`plan`).
            return Err(StoreError::new(StoreErrorKind::Misuse, "a carried record commits alone").into());
        }
        let (tx, response) = match refusal {
            None => (tx, response),
            Some(answer) => match tx.into_checks() {
                Some(checks) => (checks, answer),
                // Its writes cannot be checked without writing them: it goes alone (`plan`).
                None => return Err(StoreError::new(StoreErrorKind::Misuse, "unchecked writes").into()),
            },
        };
        let json = response_json(&response, config.max_response_bytes())?;
        let parts = tx.into_commit(self.key(index), self.hash(index).as_str(), json, now_ms, window_s(config));
        let actions = parts.commit.into_actions(self.idempotency.store(), now_ms)?;
        part.owners.extend((0..actions.len() - 1).map(|_| Owner::Write(index)));
        part.owners.push(Owner::Record(index));
        part.actions.extend(actions);
        part.members.push((index, response));
        Ok(())
    }
}
