//! Segmented recency list (SLRU / S4LRU): `L` recency lists (levels); new ids enter level 0, a hit
//! promotes an id one level up, and overflowing levels demote their least recent ids one level down.

use std::collections::HashMap;
use std::hash::Hash;

use crate::arena::{Arena, List, NIL};

#[derive(Debug)]
struct Entry<Id> {
    id: Id,
    level: u8,
}

/// Segmented recency list with per-level limits.
#[derive(Debug)]
pub struct SegmentedRecencyList<Id> {
    map: HashMap<Id, u32>,
    arena: Arena<Entry<Id>>,
    levels: Vec<List>,
    limits: Vec<usize>,
    total_limit: usize,
}

impl<Id: Hash + Eq + Clone> SegmentedRecencyList<Id> {
    /// A list with one level per entry of `limits` (level 0 first). At most 255 levels.
    pub fn new(limits: Vec<usize>) -> Self {
        assert!(!limits.is_empty() && limits.len() <= 255, "1..=255 levels");
        let total_limit = limits.iter().sum();
        SegmentedRecencyList {
            map: HashMap::new(),
            arena: Arena::default(),
            levels: vec![List::default(); limits.len()],
            limits,
            total_limit,
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

    /// Number of ids in `level`.
    pub fn len_of(&self, level: usize) -> usize {
        self.levels[level].len
    }

    /// Whether `id` is tracked.
    pub fn contains(&self, id: &Id) -> bool {
        self.map.contains_key(id)
    }

    /// Replace the per-level limits (same number of levels).
    pub fn update_limits(&mut self, limits: Vec<usize>) {
        assert_eq!(limits.len(), self.levels.len());
        self.total_limit = limits.iter().sum();
        self.limits = limits;
    }

    /// Insert `id` at the tail of level 0, or promote it one level (the top level just moves to its tail).
    pub fn update(&mut self, id: &Id) {
        if let Some(&idx) = self.map.get(id) {
            let level = self.arena.get(idx).level as usize;
            let highest = self.levels.len() - 1;
            if level == highest {
                self.arena.move_to_back(&mut self.levels[level], idx);
            } else {
                self.arena.unlink(&mut self.levels[level], idx);
                self.arena.get_mut(idx).level = (level + 1) as u8;
                self.arena.push_back(&mut self.levels[level + 1], idx);
                self.adjust(level + 1);
            }
        } else {
            let idx = self.arena.alloc(Entry {
                id: id.clone(),
                level: 0,
            });
            self.arena.push_back(&mut self.levels[0], idx);
            self.map.insert(id.clone(), idx);
        }
    }

    /// Demote the overflow of `level` (its least recent ids) to the tail of the level below.
    fn adjust(&mut self, level: usize) {
        let excess = self.levels[level].len.saturating_sub(self.limits[level]);
        for _ in 0..excess {
            let idx = self.levels[level].head;
            self.arena.unlink(&mut self.levels[level], idx);
            self.arena.get_mut(idx).level = (level - 1) as u8;
            self.arena.push_back(&mut self.levels[level - 1], idx);
        }
    }

    /// Remove `id`; returns whether it was present.
    pub fn remove(&mut self, id: &Id) -> bool {
        match self.map.remove(id) {
            Some(idx) => {
                let level = self.arena.get(idx).level as usize;
                self.arena.unlink(&mut self.levels[level], idx);
                self.arena.release(idx);
                true
            }
            None => false,
        }
    }

    /// The replacement victim: least recent id of level 0.
    pub fn least_recent(&self) -> Option<&Id> {
        let head = self.levels[0].head;
        (head != NIL).then(|| &self.arena.get(head).id)
    }

    /// If over the total limit: demote overflow from the top level down to level 1, then remove
    /// the excess from the head of level 0 (appending removed ids to `out`).
    pub fn remove_least_recent_over_limit(&mut self, out: &mut Vec<Id>) {
        if self.map.len() > self.total_limit {
            for level in (1..self.levels.len()).rev() {
                self.adjust(level);
            }
            let excess = self.map.len() - self.total_limit;
            for _ in 0..excess {
                let head = self.levels[0].head;
                if head == NIL {
                    break;
                }
                self.arena.unlink(&mut self.levels[0], head);
                self.arena.release(head);
                let (id, _) = self
                    .map
                    .remove_entry(&self.arena.get(head).id)
                    .expect("segmented list map and lists agree");
                out.push(id);
            }
        }
    }

    /// Ids of `level` from least to most recent.
    pub fn iter_level(&self, level: usize) -> impl Iterator<Item = &Id> + '_ {
        let mut cursor = self.levels[level].head;
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

/// Level limits as the reference's 2021 standalone SLRU strategy computed them (and as its
/// published SLRU/S4LRU tables were produced): every level gets `floor(p_i * limit)`, so the total
/// can fall short of the limit (e.g. S4LRU at limit 10 keeps 8).
pub fn segment_limits_floor(limit: usize, proportions: &[f64]) -> Vec<usize> {
    proportions
        .iter()
        .map(|p| (p * limit as f64) as usize)
        .collect()
}

/// Level limits for `limit` split by `proportions`: levels 1.. get `floor(p_i * limit)`, level 0
/// gets the remainder so that the total is exact.
pub fn segment_limits(limit: usize, proportions: &[f64]) -> Vec<usize> {
    let higher: Vec<usize> = proportions
        .iter()
        .skip(1)
        .map(|p| (p * limit as f64) as usize)
        .collect();
    let sum: usize = higher.iter().sum();
    let mut limits = Vec::with_capacity(proportions.len());
    limits.push(limit.saturating_sub(sum));
    limits.extend(higher);
    limits
}

/// Bytes of one slab node for ids of type `Id`.
pub(crate) fn node_bytes<Id>() -> usize {
    crate::arena::node_size::<Entry<Id>>()
}
