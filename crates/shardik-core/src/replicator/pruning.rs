//! Pruning the state of replicas that left the cluster, by the reference's protocol.
//!
//! A removed node's replica id stays in the data it changed (a counter's entry, a set's
//! dots). Pruning folds its contribution into one surviving replica, the *owner*, and strips
//! it everywhere else, in three steps:
//!
//! 1. The leader, once the removal is older than `max-pruning-dissemination` (counted only
//!    while every node is reachable), marks each key holding the removed replica's data
//!    `Initialized { owner: itself }`. Each replica that merges the marker adds itself to the
//!    marker's `seen`.
//! 2. When every member has seen the marker, the owner prunes: the removed replica's
//!    contribution becomes its own, and the marker becomes `Performed`.
//! 3. From then on every merge into the key strips the removed replica's data from what comes
//!    in, so an old copy cannot bring it back (it would be counted twice). The marker is
//!    dropped `pruning-marker-time-to-live` after it was performed.
//!
//! Waiting for every member to see the marker makes the owner unique: two leaders (one
//! after the other, across a leadership change) may both mark a key, but markers of two
//! owners merge to the lower owner's, and only an owner whose marker every member holds
//! prunes.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;

use super::data::ReplicaId;

/// Where pruning of one removed replica stands in one key.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PruningState {
    /// The owner waits for every member to have seen this.
    Initialized {
        /// The replica that will fold the removed one's contribution into its own.
        owner: UniqueAddress,
        /// The members that have seen the marker.
        seen: BTreeSet<UniqueAddress>,
    },
    /// The owner pruned; every merge strips the removed replica's data.
    Performed {
        /// When the marker may be dropped, in milliseconds since the Unix epoch.
        obsolete_at_ms: u64,
    },
}

impl PruningState {
    /// Merges two states of one removed replica's pruning: performed beats initialized; of
    /// two initialized, the lower owner's wins (with one owner, the seen sets join); of two
    /// performed, the later expiry.
    pub(super) fn merge(&mut self, other: &PruningState) {
        match (&mut *self, other) {
            (
                PruningState::Performed { obsolete_at_ms: a },
                PruningState::Performed { obsolete_at_ms: b },
            ) => {
                *a = (*a).max(*b);
            }
            (PruningState::Performed { .. }, PruningState::Initialized { .. }) => {}
            (PruningState::Initialized { .. }, PruningState::Performed { .. }) => {
                *self = other.clone();
            }
            (
                PruningState::Initialized { owner, seen },
                PruningState::Initialized {
                    owner: their_owner,
                    seen: their_seen,
                },
            ) => {
                if their_owner < owner {
                    *self = other.clone();
                } else if their_owner == owner {
                    seen.extend(their_seen.iter().cloned());
                }
            }
        }
    }
}

/// The pruning markers of one key: per removed replica, where its pruning stands.
pub type PruningMarkers = BTreeMap<ReplicaId, PruningState>;

/// Merges `theirs` into `ours`.
pub(super) fn merge_markers(ours: &mut PruningMarkers, theirs: &PruningMarkers) {
    for (replica, state) in theirs {
        match ours.get_mut(replica) {
            Some(mine) => mine.merge(state),
            None => {
                ours.insert(*replica, state.clone());
            }
        }
    }
}

/// The replicas whose pruning was performed: every merge strips their data.
pub(super) fn performed(markers: &PruningMarkers) -> impl Iterator<Item = ReplicaId> + '_ {
    markers
        .iter()
        .filter(|(_, s)| matches!(s, PruningState::Performed { .. }))
        .map(|(r, _)| *r)
}

/// Adds `me` to the seen set of every marker still waiting; `true` if one changed.
pub(super) fn mark_seen(markers: &mut PruningMarkers, me: &UniqueAddress) -> bool {
    let mut changed = false;
    for state in markers.values_mut() {
        if let PruningState::Initialized { seen, .. } = state {
            changed |= seen.insert(me.clone());
        }
    }
    changed
}
