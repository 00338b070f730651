//! Deltas of local changes waiting to go out, per peer: each peer gets, at its turn, the
//! merge of every change made since its last turn.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::address::UniqueAddress;

use super::erased::AnyDelta;

/// The deltas one peer gets in one turn: each key's changes since its last turn, merged.
pub(super) type Turn = (UniqueAddress, Vec<(Arc<str>, Box<dyn AnyDelta>)>);

/// One key's pending delta for one peer: the merged changes, or `None` once more changes
/// gathered than a delta should carry (the key is then left to gossip).
struct Pending {
    delta: Option<Box<dyn AnyDelta>>,
    changes: usize,
}

/// The deltas each peer has not been sent yet.
#[derive(Default)]
pub(super) struct DeltaOutbox {
    pending: BTreeMap<UniqueAddress, BTreeMap<Arc<str>, Pending>>,
    /// Where the next turn starts in the peer list.
    next_turn: usize,
}

impl DeltaOutbox {
    /// Records a change of `key` for each of `peers`.
    pub(super) fn record<'a>(
        &mut self,
        key: &Arc<str>,
        delta: &dyn AnyDelta,
        peers: impl Iterator<Item = &'a UniqueAddress>,
        max_changes: usize,
    ) {
        for peer in peers {
            let keys = self.pending.entry(peer.clone()).or_default();
            match keys.get_mut(key) {
                None => {
                    keys.insert(
                        key.clone(),
                        Pending {
                            delta: Some(delta.clone_delta()),
                            changes: 1,
                        },
                    );
                }
                Some(pending) => {
                    pending.changes += 1;
                    if pending.changes > max_changes {
                        pending.delta = None;
                    } else if let Some(gathered) = &mut pending.delta {
                        // Deltas of one key are of one type; a mismatch cannot happen here.
                        if gathered.merge_delta(delta).is_err() {
                            pending.delta = None;
                        }
                    }
                }
            }
        }
    }

    /// The peers whose turn it is (a slice of `peers`, round robin: a fifth of them plus one,
    /// at least two and at most ten, as the reference), each with its pending deltas.
    pub(super) fn take_turn(&mut self, peers: &[UniqueAddress]) -> Vec<Turn> {
        self.pending.retain(|peer, _| peers.contains(peer));
        if peers.is_empty() {
            return Vec::new();
        }
        let slice = (peers.len() / 5 + 1).clamp(2, 10).min(peers.len());
        let mut out = Vec::new();
        for i in 0..slice {
            let peer = &peers[(self.next_turn + i) % peers.len()];
            let Some(keys) = self.pending.remove(peer) else {
                continue;
            };
            let deltas: Vec<_> = keys
                .into_iter()
                .filter_map(|(key, p)| Some((key, p.delta?)))
                .collect();
            if !deltas.is_empty() {
                out.push((peer.clone(), deltas));
            }
        }
        self.next_turn = (self.next_turn + slice) % peers.len();
        out
    }
}
