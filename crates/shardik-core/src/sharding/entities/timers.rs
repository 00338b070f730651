//! The timers and receive timeouts of one kind's entities on one node: one schedule per kind,
//! driven by the kind task's deadline, so that an entity without timers pays nothing for them
//! (no field in its record, no task, no tokio timer).
//!
//! Times are nanoseconds of the kind task's clock. Each scheduled firing has a sequence number;
//! restarting or cancelling a timer forgets its number, so a stale entry in the schedule is
//! recognised and skipped when it comes due.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::sharding::{EntityId, ShardId};

use super::types::{CommandMaker, ContextRequest, TimerCommand};

/// One named timer of an entity.
struct Timer<C> {
    key: Box<str>,
    seq: u64,
    delay: Duration,
    command: TimerCommand<C>,
}

/// An entity's receive timeout.
struct ReceiveTimeout<C> {
    timeout: Duration,
    make: CommandMaker<C>,
    /// The scheduled firing.
    seq: u64,
}

/// What one entity has set; present only while it has something set.
struct EntityTimers<C> {
    /// Usually one or two, so a list beats a map.
    timers: Vec<Timer<C>>,
    receive: Option<ReceiveTimeout<C>>,
}

impl<C> EntityTimers<C> {
    fn is_empty(&self) -> bool {
        self.timers.is_empty() && self.receive.is_none()
    }
}

/// The timers of every entity of one kind on one node.
pub(super) struct Timers<C> {
    /// Firings in time order: (due, sequence) → the entity.
    due: BTreeMap<(u64, u64), (ShardId, EntityId)>,
    owners: HashMap<ShardId, HashMap<EntityId, EntityTimers<C>>>,
    next_seq: u64,
}

impl<C> Default for Timers<C> {
    fn default() -> Self {
        Timers {
            due: BTreeMap::new(),
            owners: HashMap::new(),
            next_seq: 0,
        }
    }
}

/// Nanoseconds `d` after `now`, saturating (a delay of years must not wrap around).
fn after(now: u64, d: Duration) -> u64 {
    now.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The shortest period of a repeating timer or a receive timeout: a period of zero would be
/// due again the moment it fired, and the kind's task would do nothing else.
const MIN_PERIOD: Duration = Duration::from_millis(1);

impl<C> Timers<C> {
    fn schedule(&mut self, at: u64, shard: &ShardId, id: &EntityId) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.due.insert((at, seq), (shard.clone(), id.clone()));
        seq
    }

    fn entry(&mut self, shard: &ShardId, id: &EntityId) -> &mut EntityTimers<C> {
        self.owners
            .entry(shard.clone())
            .or_default()
            .entry(id.clone())
            .or_insert_with(|| EntityTimers {
                timers: Vec::new(),
                receive: None,
            })
    }

    fn get_mut(&mut self, shard: &str, id: &str) -> Option<&mut EntityTimers<C>> {
        self.owners.get_mut(shard)?.get_mut(id)
    }

    /// Forgets an entity's record once nothing is set in it.
    fn tidy(&mut self, shard: &str, id: &str) {
        if let Some(entities) = self.owners.get_mut(shard) {
            if entities.get(id).is_some_and(EntityTimers::is_empty) {
                entities.remove(id);
            }
            if entities.is_empty() {
                self.owners.remove(shard);
            }
        }
    }

    /// Carries out a timer request of the entity `id`. `TellSelf` is not a timer request and
    /// is handed back.
    pub fn apply(
        &mut self,
        shard: &ShardId,
        id: &EntityId,
        request: ContextRequest<C>,
        now: u64,
    ) -> Option<C> {
        match request {
            ContextRequest::TellSelf(cmd) => return Some(cmd),
            ContextRequest::StartTimer {
                key,
                command,
                delay,
            } => {
                let delay = match command {
                    TimerCommand::Repeat(_) => delay.max(MIN_PERIOD),
                    TimerCommand::Once(_) => delay,
                };
                let seq = self.schedule(after(now, delay), shard, id);
                let timers = &mut self.entry(shard, id).timers;
                let timer = Timer {
                    key,
                    seq,
                    delay,
                    command,
                };
                // Restarting a key replaces the timer: the old firing's number is forgotten.
                match timers.iter_mut().find(|t| t.key == timer.key) {
                    Some(old) => *old = timer,
                    None => timers.push(timer),
                }
            }
            ContextRequest::CancelTimer(key) => {
                if let Some(e) = self.get_mut(shard, id) {
                    e.timers.retain(|t| t.key != key);
                }
                self.tidy(shard, id);
            }
            ContextRequest::CancelAllTimers => {
                if let Some(e) = self.get_mut(shard, id) {
                    e.timers.clear();
                }
                self.tidy(shard, id);
            }
            ContextRequest::ReceiveTimeout(Some((timeout, make))) => {
                let timeout = timeout.max(MIN_PERIOD);
                let seq = self.schedule(after(now, timeout), shard, id);
                self.entry(shard, id).receive = Some(ReceiveTimeout { timeout, make, seq });
            }
            ContextRequest::ReceiveTimeout(None) => {
                if let Some(e) = self.get_mut(shard, id) {
                    e.receive = None;
                }
                self.tidy(shard, id);
            }
        }
        None
    }

    /// The entity `id` handled a command: its receive timeout, if any, counts from `now`.
    pub fn activity(&mut self, shard: &ShardId, id: &EntityId, now: u64) {
        if self.owners.is_empty() {
            return;
        }
        let Some(timeout) = self
            .get_mut(shard, id)
            .and_then(|e| e.receive.as_ref())
            .map(|r| r.timeout)
        else {
            return;
        };
        let seq = self.schedule(after(now, timeout), shard, id);
        if let Some(r) = self.get_mut(shard, id).and_then(|e| e.receive.as_mut()) {
            r.seq = seq;
        }
    }

    /// Cancels everything the entity `id` has set (its incarnation ended).
    pub fn cancel_entity(&mut self, shard: &str, id: &str) {
        if self.owners.is_empty() {
            return;
        }
        if let Some(entities) = self.owners.get_mut(shard) {
            entities.remove(id);
            if entities.is_empty() {
                self.owners.remove(shard);
            }
        }
    }

    /// Cancels everything the entities of `shard` have set.
    pub fn cancel_shard(&mut self, shard: &str) {
        self.owners.remove(shard);
    }

    /// When the next firing is due (possibly a stale one, which costs a wake-up and nothing
    /// else).
    pub fn next_due(&self) -> Option<u64> {
        self.due.keys().next().map(|&(at, _)| at)
    }

    /// The next firing due by `now`, with the command it delivers; stale firings are skipped.
    /// A repeating timer and the receive timeout are scheduled again.
    pub fn pop_due(&mut self, now: u64) -> Option<(ShardId, EntityId, C)> {
        loop {
            let (&(at, seq), _) = self.due.first_key_value()?;
            if at > now {
                return None;
            }
            let (shard, id) = self.due.remove(&(at, seq)).expect("first key");
            if let Some(cmd) = self.fire(&shard, &id, seq, now) {
                return Some((shard, id, cmd));
            }
        }
    }

    fn fire(&mut self, shard: &ShardId, id: &EntityId, seq: u64, now: u64) -> Option<C> {
        let e = self.get_mut(shard, id)?;
        if let Some(r) = e.receive.as_ref().filter(|r| r.seq == seq) {
            let (cmd, timeout) = ((r.make)(), r.timeout);
            let next = self.schedule(after(now, timeout), shard, id);
            if let Some(r) = self.get_mut(shard, id).and_then(|e| e.receive.as_mut()) {
                r.seq = next;
            }
            return Some(cmd);
        }
        let pos = e.timers.iter().position(|t| t.seq == seq)?;
        match &e.timers[pos].command {
            TimerCommand::Repeat(make) => {
                let (cmd, delay) = (make(), e.timers[pos].delay);
                let next = self.schedule(after(now, delay), shard, id);
                if let Some(t) = self
                    .get_mut(shard, id)
                    .and_then(|e| e.timers.iter_mut().find(|t| t.seq == seq))
                {
                    t.seq = next;
                }
                Some(cmd)
            }
            TimerCommand::Once(_) => {
                let timer = e.timers.swap_remove(pos);
                self.tidy(shard, id);
                match timer.command {
                    TimerCommand::Once(cmd) => Some(cmd),
                    TimerCommand::Repeat(_) => None,
                }
            }
        }
    }

    /// Scheduled firings, stale ones included (for tests of the bookkeeping).
    #[cfg(test)]
    fn scheduled(&self) -> usize {
        self.due.len()
    }
}

#[cfg(test)]
mod tests;
