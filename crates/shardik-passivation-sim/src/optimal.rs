//! Clairvoyant Bélády replacement, the upper bound every policy is compared with.

use std::collections::{BTreeMap, HashMap};

use crate::id::SimId;

/// Clairvoyant strategy for one shard: passivate the entity whose next access is furthest away.
pub(crate) struct Optimal {
    per_region_limit: usize,
    per_shard_limit: usize,
    /// next access position -> id
    by_next: BTreeMap<u64, SimId>,
    /// id -> its key in `by_next`
    key_of: HashMap<SimId, u64>,
    never: u64,
}

impl Optimal {
    pub(crate) fn new(per_region_limit: usize) -> Self {
        Optimal {
            per_region_limit,
            per_shard_limit: per_region_limit,
            by_next: BTreeMap::new(),
            key_of: HashMap::new(),
            never: u64::MAX,
        }
    }

    pub(crate) fn touched(&mut self, id: SimId, next: Option<u64>, out: &mut Vec<SimId>) {
        if let Some(old) = self.key_of.remove(&id) {
            self.by_next.remove(&old);
        }
        let key = match next {
            Some(n) => n,
            None => {
                self.never -= 1;
                self.never
            }
        };
        self.by_next.insert(key, id);
        self.key_of.insert(id, key);
        self.passivate_excess(out);
    }

    pub(crate) fn shards_updated(&mut self, active_shards: usize, out: &mut Vec<SimId>) {
        self.per_shard_limit = self.per_region_limit / active_shards.max(1);
        self.passivate_excess(out);
    }

    pub(crate) fn passivate_excess(&mut self, out: &mut Vec<SimId>) {
        while self.by_next.len() > self.per_shard_limit {
            let (_, id) = self.by_next.pop_last().expect("non-empty");
            self.key_of.remove(&id);
            out.push(id);
        }
    }
}
