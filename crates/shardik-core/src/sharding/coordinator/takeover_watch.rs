//! What the lease takeover (see [`takeover`](super::takeover)) remembers: the silent regions
//! it watches, the shards it took from them, and the store's answer type ([`LeasesRead`]).
//!
//! Kept apart from `takeover.rs` because the coordinator holds this state in a field while
//! `takeover.rs` adds methods to the coordinator: with the state here, below both, neither
//! needs the other's file.

use std::collections::{BTreeMap, BTreeSet};

use crate::Instant;
use crate::lease::{LeaseTiming, StoreLease};
use crate::membership::UniqueAddress;
use crate::sharding::shard_id::ShardId;

/// The store's answer to a [`CoordinatorEffect::ReadLeases`](super::CoordinatorEffect::ReadLeases): each shard with its lease's row
/// (`None`: never taken), or what went wrong.
pub type LeasesRead = Result<Vec<(ShardId, Option<StoreLease>)>, String>;

/// The coordinator's watch over silent regions, and the shards it took from them.
#[derive(Debug)]
pub(super) struct Takeover {
    pub(super) timing: LeaseTiming,
    pub(super) watches: BTreeMap<UniqueAddress, Watch>,
    /// Shards taken from each region and not yet answered with `ShardStopped`.
    pub(super) revoked: BTreeMap<UniqueAddress, BTreeSet<ShardId>>,
    /// Shards taken away whose next home every registered region must be told.
    pub(super) announce: BTreeSet<ShardId>,
    pub(super) next_id: u64,
}

#[derive(Debug)]
pub(super) struct Watch {
    pub(super) next_read: Instant,
    pub(super) reading: Option<Reading>,
}

#[derive(Debug)]
pub(super) struct Reading {
    pub(super) id: u64,
    pub(super) deadline: Instant,
}

impl Takeover {
    pub(super) fn new(timing: LeaseTiming) -> Self {
        Takeover {
            timing,
            watches: BTreeMap::new(),
            revoked: BTreeMap::new(),
            announce: BTreeSet::new(),
            next_id: 0,
        }
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.watches
            .values()
            .map(|w| w.reading.as_ref().map_or(w.next_read, |r| r.deadline))
            .min()
    }

    /// Shards taken from `region` that it has not answered yet.
    pub(super) fn revoked_from(&self, region: &UniqueAddress) -> Option<&BTreeSet<ShardId>> {
        self.revoked.get(region)
    }
}
