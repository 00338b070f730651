//! The coordinator's allocation table and the events that change it (digest §1.3).
//!
//! Every change goes through [`CoordinatorState::apply`], which refuses an event whose
//! precondition does not hold instead of corrupting the table; [`CoordinatorState::check`]
//! verifies the invariants (used by the property tests after every event).

use std::collections::{BTreeMap, BTreeSet};

use crate::membership::UniqueAddress;
use crate::sharding::shard_id::ShardId;

/// A change to the allocation table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateEvent {
    /// A region registered (with no shards yet).
    RegionRegistered(UniqueAddress),
    /// A proxy registered.
    ProxyRegistered(UniqueAddress),
    /// A region is gone; its shards are no longer allocated.
    RegionTerminated(UniqueAddress),
    /// A proxy is gone.
    ProxyTerminated(UniqueAddress),
    /// A shard was given a home.
    ShardHomeAllocated(ShardId, UniqueAddress),
    /// A shard no longer has a home.
    ShardHomeDeallocated(ShardId),
}

/// Why an event was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Registering a region twice.
    #[error("region {0} is already registered")]
    RegionExists(UniqueAddress),
    /// Naming a region that is not registered.
    #[error("region {0} is not registered")]
    UnknownRegion(UniqueAddress),
    /// Allocating a shard that has a home.
    #[error("shard {0} is already allocated")]
    ShardAllocated(ShardId),
    /// Deallocating a shard without a home.
    #[error("shard {0} is not allocated")]
    ShardNotAllocated(ShardId),
}

/// Which region hosts which shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoordinatorState {
    shards: BTreeMap<ShardId, UniqueAddress>,
    /// Each region's shards in allocation order (the strategies move the oldest first).
    regions: BTreeMap<UniqueAddress, Vec<ShardId>>,
    proxies: BTreeSet<UniqueAddress>,
}

impl CoordinatorState {
    /// The home of `shard`.
    pub fn home(&self, shard: &ShardId) -> Option<&UniqueAddress> {
        self.shards.get(shard)
    }

    /// Every region with its shards, in allocation order.
    pub fn regions(&self) -> &BTreeMap<UniqueAddress, Vec<ShardId>> {
        &self.regions
    }

    /// Whether `region` is registered (as a region, not a proxy).
    pub fn has_region(&self, region: &UniqueAddress) -> bool {
        self.regions.contains_key(region)
    }

    /// Registered proxies.
    pub fn proxies(&self) -> &BTreeSet<UniqueAddress> {
        &self.proxies
    }

    /// Every allocated shard with its home.
    pub fn shards(&self) -> &BTreeMap<ShardId, UniqueAddress> {
        &self.shards
    }

    /// Applies `event`, or refuses it (leaving the state unchanged) when its precondition
    /// does not hold.
    pub fn apply(&mut self, event: &StateEvent) -> Result<(), StateError> {
        match event {
            StateEvent::RegionRegistered(r) => {
                if self.regions.contains_key(r) {
                    return Err(StateError::RegionExists(r.clone()));
                }
                self.regions.insert(r.clone(), Vec::new());
            }
            StateEvent::ProxyRegistered(p) => {
                self.proxies.insert(p.clone());
            }
            StateEvent::RegionTerminated(r) => {
                let shards = self
                    .regions
                    .remove(r)
                    .ok_or_else(|| StateError::UnknownRegion(r.clone()))?;
                for s in shards {
                    let home = self.shards.remove(&s);
                    debug_assert_eq!(
                        home.as_ref(),
                        Some(r),
                        "shard {s} listed under {r} but homed elsewhere"
                    );
                }
            }
            StateEvent::ProxyTerminated(p) => {
                self.proxies.remove(p);
            }
            StateEvent::ShardHomeAllocated(s, r) => {
                if self.shards.contains_key(s) {
                    return Err(StateError::ShardAllocated(s.clone()));
                }
                let list = self
                    .regions
                    .get_mut(r)
                    .ok_or_else(|| StateError::UnknownRegion(r.clone()))?;
                // Without a home it is in no region's list: one shard, one home.
                debug_assert!(!list.contains(s), "shard {s} listed twice under {r}");
                list.push(s.clone());
                self.shards.insert(s.clone(), r.clone());
            }
            StateEvent::ShardHomeDeallocated(s) => {
                let r = self
                    .shards
                    .remove(s)
                    .ok_or_else(|| StateError::ShardNotAllocated(s.clone()))?;
                let list = self.regions.get_mut(&r);
                debug_assert!(list.is_some(), "shard {s} homed on unregistered region {r}");
                if let Some(list) = list {
                    let before = list.len();
                    list.retain(|x| x != s);
                    debug_assert_eq!(
                        before,
                        list.len() + 1,
                        "shard {s} not listed once under its home {r}"
                    );
                }
            }
        }
        Ok(())
    }

    /// Checks the invariants: the shard → region map and the region → shards lists describe
    /// the same allocation, every shard has exactly one home, and every home is registered.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for (r, list) in &self.regions {
            for s in list {
                if !seen.insert(s) {
                    return Err(format!("shard {s} listed twice"));
                }
                if self.shards.get(s) != Some(r) {
                    return Err(format!("shard {s} listed under {r} but mapped elsewhere"));
                }
            }
        }
        if seen.len() != self.shards.len() {
            return Err("a mapped shard is missing from its region's list".into());
        }
        for (s, r) in &self.shards {
            if !self.regions.contains_key(r) {
                return Err(format!("shard {s} homed on unregistered region {r}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
