//! The entity table of one kind on one node: one flat map from entity id to its slot, so that
//! a delivery finds its entity with one lookup, and beside it what the shards need (which
//! entities each has, its passivation strategy).
//!
//! A slot names its shard by a small index into the table's list of shards (4 bytes, where a
//! shard id would cost 16 per entity). A shard's entities are not kept in a list of their own
//! (that too would cost every idle entity): the few operations that need them (stopping a
//! shard, forcing it to stop) find them with a scan of the table, and a burst of them (a node
//! that leaves hands off every shard) shares one scan through an index of members that lives
//! only as long as the burst ([`Table::members`], [`Table::forget_members`]).

use std::collections::HashMap;

use crate::sharding::{EntityId, ShardId};
use shardik_passivation::Strategy;

use crate::sharding::id_map::IdMap;

/// A record that keeps its shard's index in the table. The index lives in the record (not
/// beside it) so that it can take what would otherwise be the record's padding.
pub(super) trait Homed {
    /// The index of the entity's shard.
    fn shard(&self) -> u32;
    /// Set by the table when it adds the entity.
    fn set_shard(&mut self, at: u32);
}

/// One shard with entities here.
pub(super) struct Shard {
    pub id: ShardId,
    /// Live entities of the shard.
    len: usize,
    /// The shard's passivation strategy, when a limit-based one is configured.
    pub strategy: Option<Strategy<EntityId>>,
}

/// Where an entity id stands in the table, for one shard.
pub(super) enum Found<'a, S> {
    /// It lives in this shard.
    Here(&'a mut S),
    /// It lives in another shard (a message named a shard the kind's own extractor did not).
    Elsewhere(ShardId),
    /// It does not live here.
    Absent,
}

/// The entities of one kind on one node, by id, and their shards.
pub(super) struct Table<S> {
    entities: IdMap<S>,
    /// Shard id → index in `shards`.
    index: IdMap<u32>,
    /// Shards by index; `None` is a free index (in `free`).
    shards: Vec<Option<Shard>>,
    free: Vec<u32>,
    /// Each shard's entities, while a burst of shard stops needs them (see the module text).
    /// It may name entities that are gone since: users check.
    members: Option<HashMap<u32, Vec<EntityId>>>,
}

impl<S> Default for Table<S> {
    fn default() -> Self {
        Table {
            entities: IdMap::default(),
            index: IdMap::default(),
            shards: Vec::new(),
            free: Vec::new(),
            members: None,
        }
    }
}

impl<S: Homed> Table<S> {
    /// Entity `id`, if it lives in `shard`.
    pub fn get_mut(&mut self, shard: &ShardId, id: &EntityId) -> Option<&mut S> {
        match self.find(shard, id) {
            Found::Here(slot) => Some(slot),
            _ => None,
        }
    }

    /// Where `id` stands with respect to `shard`: one lookup of the id, and a comparison of
    /// shard ids that is almost always one of pointers.
    pub fn find(&mut self, shard: &ShardId, id: &EntityId) -> Found<'_, S> {
        let Some(slot) = self.entities.get_mut(id) else {
            return Found::Absent;
        };
        let home = &self.shards[slot.shard() as usize]
            .as_ref()
            .expect("an entity's shard is in the table")
            .id;
        if std::sync::Arc::ptr_eq(home, shard) || **home == **shard {
            Found::Here(slot)
        } else {
            Found::Elsewhere(home.clone())
        }
    }

    /// The table's own copy of the id `text` of an entity that lives here.
    pub fn id_of(&self, text: &str) -> Option<&EntityId> {
        self.entities.key_of(text)
    }

    /// Whether `id` lives here, in any shard.
    pub fn contains(&self, id: &EntityId) -> bool {
        self.entities.contains_key(id)
    }

    /// Adds `shard` (with `strategy`) if it is not here yet. True if it was added.
    pub fn ensure_shard(
        &mut self,
        shard: &ShardId,
        strategy: impl FnOnce() -> Option<Strategy<EntityId>>,
    ) -> bool {
        if self.index.contains_key(shard) {
            return false;
        }
        let entry = Shard {
            id: shard.clone(),
            len: 0,
            strategy: strategy(),
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.shards[at as usize] = Some(entry);
                at
            }
            None => {
                self.shards.push(Some(entry));
                u32::try_from(self.shards.len() - 1).expect("fewer than 2^32 shards")
            }
        };
        self.index.insert(shard.clone(), at);
        true
    }

    /// Whether `shard` is here (it has entities, or just got its first).
    pub fn has_shard(&self, shard: &ShardId) -> bool {
        self.index.contains_key(shard)
    }

    /// The shard `shard`, if here.
    pub fn shard_mut(&mut self, shard: &ShardId) -> Option<&mut Shard> {
        let at = *self.index.get(shard)?;
        self.shards[at as usize].as_mut()
    }

    /// Shards here.
    pub fn shard_count(&self) -> usize {
        self.index.len()
    }

    /// The shards here.
    pub fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.shards.iter().flatten()
    }

    /// The ids of the shards here.
    pub fn shard_ids(&self) -> Vec<ShardId> {
        self.shards().map(|s| s.id.clone()).collect()
    }

    /// Live entities of `shard` (0 if it is not here).
    pub fn shard_len(&self, shard: &ShardId) -> usize {
        self.index
            .get(shard)
            .and_then(|&at| self.shards[at as usize].as_ref())
            .map_or(0, |s| s.len)
    }

    /// Removes `shard`, which must have no entities left. True if it was here.
    pub fn remove_shard(&mut self, shard: &ShardId) -> bool {
        let Some(at) = self.index.remove(shard) else {
            return false;
        };
        debug_assert_eq!(self.shards[at as usize].as_ref().map(|s| s.len), Some(0));
        self.shards[at as usize] = None;
        self.free.push(at);
        if let Some(members) = &mut self.members {
            members.remove(&at);
        }
        true
    }

    /// Adds entity `id` to `shard` (which must be here) unless it lives here already (in any
    /// shard). Returns its slot and whether it was added.
    pub fn insert_with(
        &mut self,
        shard: &ShardId,
        id: &EntityId,
        make: impl FnOnce() -> S,
    ) -> (&mut S, bool) {
        let at = *self.index.get(shard).expect("the shard was added first");
        let mut added = false;
        let slot = self.entities.get_or_insert_with(id, || {
            added = true;
            let mut slot = make();
            slot.set_shard(at);
            slot
        });
        if added {
            self.shards[at as usize]
                .as_mut()
                .expect("indexed shards are present")
                .len += 1;
            if let Some(members) = &mut self.members {
                members.entry(at).or_default().push(id.clone());
            }
        }
        (slot, added)
    }

    /// Removes entity `id` of `shard`; its shard stays (see [`remove_shard`](Self::remove_shard)).
    pub fn remove(&mut self, shard: &ShardId, id: &EntityId) -> Option<S> {
        if !matches!(self.find(shard, id), Found::Here(_)) {
            return None;
        }
        let slot = self.entities.remove(id).expect("found above");
        if let Some(s) = self.shards[slot.shard() as usize].as_mut() {
            s.len -= 1;
        }
        Some(slot)
    }

    /// The entities of `shard` (as of now). The first call builds the index of every shard's
    /// members with one scan; later calls, until [`forget_members`](Self::forget_members),
    /// use it.
    pub fn members(&mut self, shard: &ShardId) -> Vec<EntityId> {
        let Some(&at) = self.index.get(shard) else {
            return Vec::new();
        };
        let entities = &self.entities;
        let members = self.members.get_or_insert_with(|| {
            let mut by_shard: HashMap<u32, Vec<EntityId>> = HashMap::new();
            for (id, slot) in entities.iter() {
                by_shard.entry(slot.shard()).or_default().push(id.clone());
            }
            by_shard
        });
        let ids = members.entry(at).or_default();
        // The index may be older than some removals (and a removed entity may have come back):
        // keep each entity that lives in the shard now, once.
        ids.retain(|id| entities.get(id).is_some_and(|e| e.shard() == at));
        ids.sort_unstable();
        ids.dedup();
        ids.clone()
    }

    /// Drops the index of members (the burst of shard stops is over), so that idle entities
    /// do not pay for it.
    pub fn forget_members(&mut self) {
        self.members = None;
    }

    /// Every entity: its shard, id and slot.
    pub fn iter(&self) -> impl Iterator<Item = (&ShardId, &EntityId, &S)> {
        self.entities.iter().map(|(id, slot)| {
            let shard = &self.shards[slot.shard() as usize]
                .as_ref()
                .expect("an entity's shard is in the table")
                .id;
            (shard, id, slot)
        })
    }
}

#[cfg(test)]
mod tests;
