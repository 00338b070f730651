//! Recency list: a hash map from id to node plus a doubly linked list ordered from least to most
//! recently touched, each node stamped with the time of its last touch.

use std::collections::HashMap;
use std::hash::Hash;

use crate::arena::{Arena, List, NIL};

#[derive(Debug)]
struct Entry<Id> {
    id: Id,
    stamp: u64,
}

/// Ordered set of ids from least to most recently updated; every operation is O(1) per id touched.
#[derive(Debug)]
pub struct RecencyList<Id> {
    map: HashMap<Id, u32>,
    arena: Arena<Entry<Id>>,
    list: List,
}

impl<Id: Hash + Eq + Clone> Default for RecencyList<Id> {
    fn default() -> Self {
        Self::new()
    }
}

impl<Id: Hash + Eq + Clone> RecencyList<Id> {
    /// An empty list.
    pub fn new() -> Self {
        RecencyList {
            map: HashMap::new(),
            arena: Arena::default(),
            list: List::default(),
        }
    }

    /// Number of ids tracked.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether `id` is tracked.
    pub fn contains(&self, id: &Id) -> bool {
        self.map.contains_key(id)
    }

    /// Mark `id` as the most recent (inserting it if absent), stamped with `now`.
    pub fn update(&mut self, id: &Id, now: u64) {
        if let Some(&idx) = self.map.get(id) {
            self.arena.get_mut(idx).stamp = now;
            self.arena.move_to_back(&mut self.list, idx);
        } else {
            let idx = self.arena.alloc(Entry {
                id: id.clone(),
                stamp: now,
            });
            self.arena.push_back(&mut self.list, idx);
            self.map.insert(id.clone(), idx);
        }
    }

    /// Remove `id`; returns whether it was present.
    pub fn remove(&mut self, id: &Id) -> bool {
        match self.map.remove(id) {
            Some(idx) => {
                self.arena.unlink(&mut self.list, idx);
                self.arena.release(idx);
                true
            }
            None => false,
        }
    }

    /// The least recently updated id.
    pub fn least_recent(&self) -> Option<&Id> {
        (self.list.head != NIL).then(|| &self.arena.get(self.list.head).id)
    }

    /// The most recently updated id.
    pub fn most_recent(&self) -> Option<&Id> {
        (self.list.tail != NIL).then(|| &self.arena.get(self.list.tail).id)
    }

    fn remove_node(&mut self, idx: u32) -> Id {
        self.arena.unlink(&mut self.list, idx);
        self.arena.release(idx);
        let (id, _) = self
            .map
            .remove_entry(&self.arena.get(idx).id)
            .expect("recency list map and list agree");
        id
    }

    /// Remove up to `n` least recent ids, appending them to `out`.
    pub fn remove_least_recent(&mut self, n: usize, out: &mut Vec<Id>) {
        for _ in 0..n {
            let head = self.list.head;
            if head == NIL {
                break;
            }
            out.push(self.remove_node(head));
        }
    }

    /// Remove up to `n` most recent ids after skipping the `skip` most recent ones.
    pub fn remove_most_recent(&mut self, n: usize, skip: usize, out: &mut Vec<Id>) {
        let mut cursor = self.list.tail;
        for _ in 0..skip {
            if cursor == NIL {
                return;
            }
            cursor = self.arena.prev(cursor);
        }
        for _ in 0..n {
            if cursor == NIL {
                break;
            }
            let prev = self.arena.prev(cursor);
            out.push(self.remove_node(cursor));
            cursor = prev;
        }
    }

    /// Remove the ids last updated strictly before `now - timeout` (least recent first).
    pub fn remove_least_recent_outside(&mut self, now: u64, timeout: u64, out: &mut Vec<Id>) {
        let min = now.saturating_sub(timeout);
        while self.list.head != NIL && self.arena.get(self.list.head).stamp < min {
            let head = self.list.head;
            out.push(self.remove_node(head));
        }
    }

    /// Ids from least to most recent (for tests and diagnostics).
    pub fn iter(&self) -> impl Iterator<Item = &Id> + '_ {
        let mut cursor = self.list.head;
        std::iter::from_fn(move || {
            if cursor == NIL {
                None
            } else {
                let id = &self.arena.get(cursor).id;
                cursor = self.arena.next(cursor);
                Some(id)
            }
        })
    }
}

/// Bytes of one slab node for ids of type `Id`.
pub(crate) fn node_bytes<Id>() -> usize {
    crate::arena::node_size::<Entry<Id>>()
}
