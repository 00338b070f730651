//! One entity's record: its value while idle, what waits for it, when it was last used, and
//! whether it is stopping. Every idle entity pays for this record, so it is kept to four words
//! for a one-word entity (its shard and the stop flag share what would otherwise be padding).

use std::collections::VecDeque;

use super::table::Homed;
use super::types::{Asker, Done, Job, Lifecycle, Output};
use crate::sharding::{EntityId, ShardId};

/// What waits for an entity.
pub(super) enum Item<L: Lifecycle> {
    Job(Job<L>),
    /// Stop after what is ahead in the queue (stop message first, if the kind has one).
    Stop,
}

/// One entity.
pub(super) struct Slot<L: Lifecycle> {
    /// The value while idle; `None` while a handler holds it.
    pub entity: Option<L::Entity>,
    /// Waiting work; allocated only when something waits. Boxed so that an idle entity
    /// pays one pointer for it, not an empty deque's three words.
    #[allow(clippy::box_collection)]
    queue: Option<Box<VecDeque<Item<L>>>>,
    /// Seconds (of the lifecycle's clock) when the entity last finished a command, in the
    /// low 31 bits (68 years); the top bit is set while a stop is queued or running (so idle
    /// scans and further stops do nothing).
    used_and_stopping: u32,
    /// Its shard's index in the table.
    shard: u32,
}

/// The top bit of [`Slot::used_and_stopping`].
const STOPPING: u32 = 1 << 31;

impl<L: Lifecycle> Slot<L> {
    /// A new idle entity, last used at `now_s`.
    pub fn idle(entity: L::Entity, now_s: u32) -> Self {
        Slot {
            entity: Some(entity),
            queue: None,
            used_and_stopping: now_s & !STOPPING,
            // Set by the table when it adds the slot.
            shard: u32::MAX,
        }
    }

    pub fn last_used(&self) -> u32 {
        self.used_and_stopping & !STOPPING
    }

    pub fn set_last_used(&mut self, now_s: u32) {
        self.used_and_stopping = (self.used_and_stopping & STOPPING) | (now_s & !STOPPING);
    }

    pub fn stopping(&self) -> bool {
        self.used_and_stopping & STOPPING != 0
    }

    pub fn set_stopping(&mut self, stopping: bool) {
        if stopping {
            self.used_and_stopping |= STOPPING;
        } else {
            self.used_and_stopping &= !STOPPING;
        }
    }

    /// Queues `item` behind what waits.
    pub fn push(&mut self, item: Item<L>) {
        self.queue
            .get_or_insert_with(Default::default)
            .push_back(item);
    }

    /// Takes the next waiting item; the queue goes once it is empty.
    pub fn pop(&mut self) -> Option<Item<L>> {
        let queue = self.queue.as_mut()?;
        let item = queue.pop_front();
        if queue.is_empty() {
            self.queue = None;
        }
        item
    }

    /// Whether a queue exists (something waits, or waited this turn).
    pub fn has_queue(&self) -> bool {
        self.queue.is_some()
    }

    /// Whether a command (not a stop) is next in the queue.
    pub fn next_is_command(&self) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|q| matches!(q.front(), Some(Item::Job(_))))
    }

    /// Whether a command (not a stop) is last in the queue.
    pub fn last_is_command(&self) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|q| matches!(q.back(), Some(Item::Job(_))))
    }

    /// Takes a stop that is next in the queue. True if there was one.
    pub fn pop_stop(&mut self) -> bool {
        let next_is_stop = self
            .queue
            .as_ref()
            .is_some_and(|q| matches!(q.front(), Some(Item::Stop)));
        if next_is_stop {
            self.pop();
        }
        next_is_stop
    }

    /// Whether a stop waits in the queue.
    pub fn has_stop(&self) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|q| q.iter().any(|item| matches!(item, Item::Stop)))
    }

    /// Forgets the waiting commands the entity sent itself (its timers, its messages to
    /// self): they belong to the incarnation that just ended, and a new one must not get
    /// them. Returns how many.
    pub fn drop_own_commands(&mut self) -> usize {
        let Some(queue) = self.queue.as_mut() else {
            return 0;
        };
        let before = queue.len();
        queue.retain(|item| !matches!(item, Item::Job(job) if job.from_context));
        let dropped = before - queue.len();
        if queue.is_empty() {
            self.queue = None;
        }
        dropped
    }

    /// The commands still waiting, for an entity that is dropped.
    pub fn into_jobs(self) -> impl Iterator<Item = Job<L>> {
        self.queue
            .into_iter()
            .flat_map(|q| q.into_iter())
            .filter_map(|item| match item {
                Item::Job(job) => Some(job),
                Item::Stop => None,
            })
    }
}

impl<L: Lifecycle> Homed for Slot<L> {
    fn shard(&self) -> u32 {
        self.shard
    }

    fn set_shard(&mut self, at: u32) {
        self.shard = at;
    }
}

/// What [`finish_at_once`] made of a handler that finished when it started.
pub(super) enum AtOnce<L: Lifecycle> {
    /// Completed in its slot; the ids come back for the timers' activity record.
    Finished { shard: ShardId, id: EntityId },
    /// Needs the full completion.
    Left(Done<L>),
}

/// Completes, in its slot, a handler that finished when it started and asks for nothing
/// beyond handing the entity back and its reply out: no requests through its context, no
/// passivation, no failure, nothing queued behind it. That is almost every command, and it
/// then costs neither a second lookup of the slot nor a move of the [`Done`] through the
/// finished queue. Anything else is handed back. The caller tells the timers about the
/// activity.
pub(super) fn finish_at_once<L: Lifecycle>(
    slot: &mut Slot<L>,
    done: Done<L>,
    now_s: u32,
    out: &mut Vec<Output<L>>,
) -> AtOnce<L> {
    let plain = done.entity.is_some()
        && !done.was_stop
        && !done.passivate
        && done.requests.is_empty()
        && !slot.stopping()
        && slot.queue.is_none()
        && matches!(done.outcome, Ok(Some(_)));
    if !plain {
        return AtOnce::Left(done);
    }
    let Done {
        shard,
        id,
        entity,
        reply,
        outcome,
        from_context,
        ..
    } = done;
    slot.entity = entity;
    if !from_context {
        slot.set_last_used(now_s);
    }
    if reply.waits()
        && let Ok(Some(r)) = outcome
    {
        out.push(Output::Reply(reply, Ok(r)));
    }
    AtOnce::Finished { shard, id }
}

/// Takes an idle entity out of its slot to handle `job`, or queues `job` behind the command
/// the entity is busy with (`None`). Split from the lifecycle's methods so that the caller can
/// do it while it holds the slot it looked up.
pub(super) fn start_or_queue<L: Lifecycle>(
    slot: &mut Slot<L>,
    job: Job<L>,
) -> Option<(L::Entity, Job<L>)> {
    match slot.entity.take() {
        Some(entity) => Some((entity, job)),
        None => {
            slot.push(Item::Job(job));
            None
        }
    }
}
