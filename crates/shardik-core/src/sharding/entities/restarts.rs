//! Restarts of failed remembered entities (Akka's `entity-restart-backoff`): a remembered
//! entity whose incarnation ended by a failure stays remembered, and its shard starts it again
//! after the back-off, without a message.
//!
//! This is only the schedule: which entity is due when. A restart that is no longer wanted is
//! cancelled (the entity was started again by a message, its shard stopped here), so what
//! comes due is exactly what the host should start. Times are nanoseconds of the kind task's
//! clock; each entry has a sequence number, so that an entry cancelled and scheduled again
//! is told apart from its stale predecessor in the time-ordered map.

use std::collections::BTreeMap;

use crate::sharding::{EntityId, ShardId};

/// The pending restarts of one kind's entities on one node (empty unless entities failed).
#[derive(Default)]
pub(super) struct RestartSchedule {
    /// (due, sequence) → the entity, in time order; may hold cancelled entries.
    due: BTreeMap<(u64, u64), (ShardId, EntityId)>,
    /// The live entry of each entity waiting for its restart. Ordered, so that cancelling a
    /// shard's entries is a range walk, not a scan of every pending restart.
    pending: BTreeMap<(ShardId, EntityId), (u64, u64)>,
    next_seq: u64,
}

impl RestartSchedule {
    /// Schedules entity `id` of `shard` to start at `due_ns` (replacing an earlier entry).
    pub fn schedule(&mut self, shard: &ShardId, id: &EntityId, due_ns: u64) {
        self.cancel(shard, id);
        let key = (due_ns, self.next_seq);
        self.next_seq += 1;
        self.due.insert(key, (shard.clone(), id.clone()));
        self.pending.insert((shard.clone(), id.clone()), key);
    }

    /// Forgets the restart of `id`, if one is pending (it started by other means).
    pub fn cancel(&mut self, shard: &ShardId, id: &EntityId) {
        if self.pending.is_empty() {
            return;
        }
        if let Some(key) = self.pending.remove(&(shard.clone(), id.clone())) {
            self.due.remove(&key);
        }
    }

    /// Forgets every pending restart of `shard` (it is stopping or stopped here).
    pub fn cancel_shard(&mut self, shard: &ShardId) {
        let ids: Vec<EntityId> = self
            .pending
            .range((shard.clone(), EntityId::from(""))..)
            .take_while(|((s, _), _)| s == shard)
            .map(|((_, id), _)| id.clone())
            .collect();
        for id in ids {
            self.cancel(shard, &id);
        }
    }

    /// When the next restart is due.
    pub fn next_due(&self) -> Option<u64> {
        self.due.keys().next().map(|&(due, _)| due)
    }

    /// Takes the next restart due by `now_ns`, if any.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(ShardId, EntityId)> {
        let (&key, _) = self.due.first_key_value()?;
        if key.0 > now_ns {
            return None;
        }
        let (shard, id) = self.due.remove(&key).expect("first key present");
        self.pending.remove(&(shard.clone(), id.clone()));
        Some((shard, id))
    }

    /// Whether any restart is pending.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests;
