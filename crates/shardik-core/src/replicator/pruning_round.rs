//! One round of pruning on one replica (see [`super::pruning`] for the protocol): drop
//! markers past their time, find replicas named in data that are no members, mark keys for
//! pruning when this node leads, and prune the keys this node owns once every member has
//! seen their markers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::address::UniqueAddress;

use super::data::ReplicaId;
use super::pruning::PruningState;
use super::store::Store;

/// What one replica knows when it runs a round.
pub(super) struct Round<'a> {
    pub(super) me: &'a UniqueAddress,
    /// Whether this node is the leader (only the leader marks keys).
    pub(super) leads: bool,
    /// Every member a marker must have been seen by (this node included).
    pub(super) members: &'a BTreeSet<UniqueAddress>,
    /// Removed replicas whose removal is old enough to prune.
    pub(super) ready: &'a BTreeSet<ReplicaId>,
    /// Now, in milliseconds since the Unix epoch.
    pub(super) wall_ms: u64,
    pub(super) marker_ttl: Duration,
}

/// What a round found and did.
#[derive(Default)]
pub(super) struct RoundOutcome {
    /// Keys whose data or markers changed.
    pub(super) changed: Vec<Arc<str>>,
    /// Every replica some key's data or markers name.
    pub(super) named: BTreeSet<ReplicaId>,
}

/// Runs a round over every key.
pub(super) fn run(store: &mut Store, round: &Round) -> RoundOutcome {
    let mut outcome = RoundOutcome::default();
    let me_replica = ReplicaId(round.me.uid);
    let obsolete_at_ms = round
        .wall_ms
        .saturating_add(u64::try_from(round.marker_ttl.as_millis()).unwrap_or(u64::MAX));
    store.change_values(|key, envelope| {
        let mut changed = false;
        let before = envelope.pruning.len();
        envelope.pruning.retain(|_, state| match state {
            PruningState::Performed { obsolete_at_ms } => *obsolete_at_ms > round.wall_ms,
            PruningState::Initialized { .. } => true,
        });
        changed |= envelope.pruning.len() != before;

        let mut named = BTreeSet::new();
        envelope.data.replicas_named(&mut named);
        if round.leads {
            for &removed in round.ready.intersection(&named) {
                if removed != me_replica && !envelope.pruning.contains_key(&removed) {
                    let state = PruningState::Initialized {
                        owner: round.me.clone(),
                        seen: BTreeSet::from([round.me.clone()]),
                    };
                    envelope.pruning.insert(removed, state);
                    changed = true;
                }
            }
        }
        for (&removed, state) in envelope.pruning.iter_mut() {
            let PruningState::Initialized { owner, seen } = state else {
                continue;
            };
            if owner == round.me && round.members.is_subset(seen) {
                envelope.data.prune(removed, me_replica);
                *state = PruningState::Performed { obsolete_at_ms };
                changed = true;
            }
        }
        outcome.named.extend(named);
        outcome.named.extend(envelope.pruning.keys().copied());
        if changed {
            outcome.changed.push(key.clone());
        }
        changed
    });
    outcome
}
