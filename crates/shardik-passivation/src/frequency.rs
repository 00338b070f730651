//! Frequency list (LFU / LFUDA): a doubly linked list of frequency buckets in ascending priority,
//! each bucket holding its ids in update order.

use std::collections::HashMap;
use std::hash::Hash;

use crate::arena::{Arena, List, NIL};

#[derive(Debug)]
struct Entry<Id> {
    id: Id,
    bucket: u32,
    accesses: u64,
}

#[derive(Debug)]
struct Bucket {
    priority: u64,
    nodes: List,
}

/// Least-frequently-used ordering, with optional dynamic aging (LFUDA).
#[derive(Debug)]
pub struct FrequencyList<Id> {
    map: HashMap<Id, u32>,
    nodes: Arena<Entry<Id>>,
    buckets: Arena<Bucket>,
    bucket_list: List,
    dynamic_aging: bool,
    age: u64,
}

impl<Id: Hash + Eq + Clone> FrequencyList<Id> {
    /// An empty list; `dynamic_aging` enables LFUDA.
    pub fn new(dynamic_aging: bool) -> Self {
        FrequencyList {
            map: HashMap::new(),
            nodes: Arena::default(),
            buckets: Arena::default(),
            bucket_list: List::default(),
            dynamic_aging,
            age: 0,
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

    /// Current dynamic age (priority of the last evicted id; always 0 without dynamic aging).
    pub fn age(&self) -> u64 {
        self.age
    }

    /// Priority of `id` (its bucket), if tracked.
    pub fn priority_of(&self, id: &Id) -> Option<u64> {
        self.map
            .get(id)
            .map(|&idx| self.buckets.get(self.nodes.get(idx).bucket).priority)
    }

    /// Find (or create before the first bucket of higher priority) the bucket with `priority`,
    /// scanning forward from `start`.
    fn bucket_for(&mut self, priority: u64, start: u32) -> u32 {
        let mut b = start;
        while b != NIL && self.buckets.get(b).priority < priority {
            b = self.buckets.next(b);
        }
        if b != NIL && self.buckets.get(b).priority == priority {
            return b;
        }
        let nb = self.buckets.alloc(Bucket {
            priority,
            nodes: List::default(),
        });
        self.buckets.insert_before(&mut self.bucket_list, nb, b);
        nb
    }

    fn detach(&mut self, idx: u32) {
        let b = self.nodes.get(idx).bucket;
        let mut nodes = self.buckets.get(b).nodes;
        self.nodes.unlink(&mut nodes, idx);
        self.buckets.get_mut(b).nodes = nodes;
        if nodes.len == 0 {
            self.buckets.unlink(&mut self.bucket_list, b);
            self.buckets.release(b);
        }
    }

    fn attach(&mut self, idx: u32, b: u32) {
        let mut nodes = self.buckets.get(b).nodes;
        self.nodes.push_back(&mut nodes, idx);
        self.buckets.get_mut(b).nodes = nodes;
        self.nodes.get_mut(idx).bucket = b;
    }

    /// Record an access: a new id gets priority `1 + age`; a hit gets `accesses + age`.
    pub fn update(&mut self, id: &Id) {
        if let Some(&idx) = self.map.get(id) {
            let accesses = {
                let e = self.nodes.get_mut(idx);
                e.accesses += 1;
                e.accesses
            };
            let priority = accesses + self.age;
            let current = self.nodes.get(idx).bucket;
            let start = self.buckets.next(current);
            let b = self.bucket_for(priority, start);
            self.detach(idx);
            self.attach(idx, b);
        } else {
            let priority = 1 + self.age;
            let head = self.bucket_list.head;
            let b = self.bucket_for(priority, head);
            let idx = self.nodes.alloc(Entry {
                id: id.clone(),
                bucket: NIL,
                accesses: 1,
            });
            self.attach(idx, b);
            self.map.insert(id.clone(), idx);
        }
    }

    /// Remove `id`; returns whether it was present.
    pub fn remove(&mut self, id: &Id) -> bool {
        match self.map.remove(id) {
            Some(idx) => {
                self.detach(idx);
                self.nodes.release(idx);
                true
            }
            None => false,
        }
    }

    /// The least frequent id (least recently updated within the lowest bucket).
    pub fn least_frequent(&self) -> Option<&Id> {
        let b = self.bucket_list.head;
        (b != NIL)
            .then(|| self.nodes.get(self.buckets.get(b).nodes.head))
            .map(|e| &e.id)
    }

    /// Remove up to `n` least frequent ids (updating the dynamic age).
    pub fn remove_least_frequent(&mut self, n: usize, out: &mut Vec<Id>) {
        for _ in 0..n {
            let b = self.bucket_list.head;
            if b == NIL {
                break;
            }
            let bucket = self.buckets.get(b);
            let idx = bucket.nodes.head;
            if self.dynamic_aging {
                self.age = bucket.priority;
            }
            self.detach(idx);
            self.nodes.release(idx);
            let (id, _) = self
                .map
                .remove_entry(&self.nodes.get(idx).id)
                .expect("frequency list map and buckets agree");
            out.push(id);
        }
    }

    /// `(priority, ids least to most recent)` per bucket, lowest priority first.
    pub fn buckets(&self) -> Vec<(u64, Vec<Id>)> {
        let mut result = Vec::new();
        let mut b = self.bucket_list.head;
        while b != NIL {
            let bucket = self.buckets.get(b);
            let mut ids = Vec::new();
            let mut n = bucket.nodes.head;
            while n != NIL {
                ids.push(self.nodes.get(n).id.clone());
                n = self.nodes.next(n);
            }
            result.push((bucket.priority, ids));
            b = self.buckets.next(b);
        }
        result
    }
}

/// Bytes of one slab node for ids of type `Id`.
pub(crate) fn node_bytes<Id>() -> usize {
    crate::arena::node_size::<Entry<Id>>()
}
