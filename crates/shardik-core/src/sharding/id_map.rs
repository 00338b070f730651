//! A hash map keyed by shared ids (`Arc<str>`) that compares keys by pointer first.
//!
//! The entity host looks up a shard and an entity for every command, and almost always the
//! id it is given is the very `Arc` the map holds (entity refs keep their id, shard ids come
//! from one pre-rendered table). `Arc<str>`'s own equality always compares the bytes; this
//! map checks the pointer first and only compares bytes when the pointers differ (ids decoded
//! from the network).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::{Equivalent, HashMap};

/// A stored key.
#[derive(Clone, Debug)]
pub(crate) struct Key(Arc<str>);

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The text's hash, so that equal texts in different allocations meet.
        hash_text(&self.0, state)
    }
}

/// Hashes an id's bytes alone. `str`'s own `Hash` adds a terminator byte, which only matters
/// when strings are hashed one after another (tuples, sequences); a key here is one string,
/// and the extra byte cost a quarter of each lookup's hashing.
fn hash_text<H: Hasher>(text: &str, state: &mut H) {
    state.write(text.as_bytes())
}

/// A borrowed id to look a [`Key`] up with, without touching its reference count.
struct Lookup<'a>(&'a Arc<str>);

impl Hash for Lookup<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_text(self.0, state)
    }
}

impl Equivalent<Key> for Lookup<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        Arc::ptr_eq(self.0, &key.0) || **self.0 == *key.0
    }
}

/// Map from shared ids to `V`, hashed with a randomly seeded foldhash (ids come from users and
/// from the network, so collisions must not be choosable).
#[derive(Debug)]
pub(crate) struct IdMap<V> {
    inner: HashMap<Key, V, RandomState>,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            inner: HashMap::default(),
        }
    }
}

/// A lookup by text alone, for an id that arrived as bytes and has no `Arc` yet.
struct Text<'a>(&'a str);

impl Hash for Text<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_text(self.0, state)
    }
}

impl Equivalent<Key> for Text<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        *self.0 == *key.0
    }
}

impl<V> IdMap<V> {
    /// The map's own copy of the id `text`, if it holds it.
    pub fn key_of(&self, text: &str) -> Option<&Arc<str>> {
        self.inner.get_key_value(&Text(text)).map(|(k, _)| &k.0)
    }

    pub fn get(&self, id: &Arc<str>) -> Option<&V> {
        self.inner.get(&Lookup(id))
    }

    pub fn get_mut(&mut self, id: &Arc<str>) -> Option<&mut V> {
        self.inner.get_mut(&Lookup(id))
    }

    pub fn contains_key(&self, id: &Arc<str>) -> bool {
        self.inner.contains_key(&Lookup(id))
    }

    pub fn insert(&mut self, id: Arc<str>, value: V) -> Option<V> {
        self.inner.insert(Key(id), value)
    }

    /// The value of `id`, inserted with `make` first if absent.
    pub fn get_or_insert_with(&mut self, id: &Arc<str>, make: impl FnOnce() -> V) -> &mut V {
        self.inner.entry(Key(Arc::clone(id))).or_insert_with(make)
    }

    pub fn remove(&mut self, id: &Arc<str>) -> Option<V> {
        self.inner.remove(&Lookup(id))
    }

    pub fn len(&self) -> usize {
        self.inner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Arc<str>, &V)> {
        self.inner.iter().map(|(k, v)| (&k.0, v))
    }
}

impl<V> IntoIterator for IdMap<V> {
    type Item = (Arc<str>, V);
    type IntoIter =
        std::iter::Map<hashbrown::hash_map::IntoIter<Key, V>, fn((Key, V)) -> (Arc<str>, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.inner.into_iter().map(|(k, v)| (k.0, v))
    }
}

#[cfg(test)]
mod tests;
