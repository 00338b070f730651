//! A hash map keyed by shard id for the lookups routing makes on every message.
//!
//! A runtime routes with the very `Arc`s it pre-rendered for its shards, so keys are compared
//! by pointer first and their bytes only when the pointers differ; they are hashed by their
//! bytes alone (`str`'s own hash adds a terminator byte, a cost on every message). The hash
//! seed is random per process, so the map is only ever probed and changed, never iterated in
//! a way that could change an outcome: a simulation replays the same whatever the seed.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::{Equivalent, HashMap};

use crate::sharding::shard_id::ShardId;

#[derive(Debug, Clone)]
struct Key(ShardId);

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0.as_bytes());
    }
}

/// A borrowed shard id to probe the map with, without touching its reference count.
struct Probe<'a>(&'a ShardId);

impl Hash for Probe<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0.as_bytes());
    }
}

impl Equivalent<Key> for Probe<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        Arc::ptr_eq(self.0, &key.0) || *self.0 == key.0
    }
}

/// Values by shard id (see the module text).
#[derive(Debug, Clone)]
pub(super) struct ShardMap<V> {
    inner: HashMap<Key, V, RandomState>,
}

impl<V> Default for ShardMap<V> {
    fn default() -> Self {
        ShardMap {
            inner: HashMap::default(),
        }
    }
}

impl<V> ShardMap<V> {
    pub fn get(&self, shard: &ShardId) -> Option<&V> {
        // An empty map (a region that hosts nothing, say) answers without hashing.
        if self.inner.is_empty() {
            return None;
        }
        self.inner.get(&Probe(shard))
    }

    pub fn contains_key(&self, shard: &ShardId) -> bool {
        self.get(shard).is_some()
    }

    pub fn insert(&mut self, shard: ShardId, value: V) -> Option<V> {
        self.inner.insert(Key(shard), value)
    }

    pub fn remove(&mut self, shard: &ShardId) -> Option<V> {
        self.inner.remove(&Probe(shard))
    }

    /// Keeps the entries `keep` accepts. What it decides must not depend on the order it is
    /// called in (that order follows the random seed).
    pub fn retain(&mut self, mut keep: impl FnMut(&ShardId, &mut V) -> bool) {
        self.inner.retain(|k, v| keep(&k.0, v));
    }

    pub fn clear(&mut self) {
        self.inner.clear();
    }

    /// Every entry, in an order that follows the random seed: a caller whose output depends
    /// on it sorts what it collects.
    pub fn iter(&self) -> impl Iterator<Item = (&ShardId, &V)> {
        self.inner.iter().map(|(k, v)| (&k.0, v))
    }

    pub fn len(&self) -> usize {
        self.inner.len()
    }
}
