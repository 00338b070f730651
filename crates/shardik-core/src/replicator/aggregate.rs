//! A read or a write in flight: whom it asked, who answered, and when it gives up.

use std::collections::BTreeSet;
use std::sync::Arc;

use rand::Rng;
use rand::seq::SliceRandom;

use crate::Instant;
use crate::address::UniqueAddress;

use super::consistency::Level;
use super::messages::Stored;
use super::peers::Peer;

/// What the operation is.
#[derive(Debug)]
pub(super) enum Kind {
    Update,
    Delete,
    /// A read, with the merge of what the replicas answered so far.
    Get {
        answers: Vec<Stored>,
    },
}

/// An operation waiting for answers.
#[derive(Debug)]
pub(super) struct Operation {
    pub(super) key: Arc<str>,
    pub(super) kind: Kind,
    /// Replicas required, this one included.
    pub(super) required: usize,
    /// Peers that answered (acknowledged a write, or sent their state for a read).
    pub(super) answered: BTreeSet<UniqueAddress>,
    /// Peers asked first.
    pub(super) primaries: Vec<UniqueAddress>,
    /// Peers asked if the primaries are slow (once `secondary_at` is past and cleared).
    pub(super) secondaries: Vec<UniqueAddress>,
    pub(super) deadline: Instant,
    /// When the secondaries are asked (and slow primaries sent the whole state).
    pub(super) secondary_at: Option<Instant>,
}

/// The most secondaries asked when primaries are slow (the reference's number).
const MAX_SECONDARIES: usize = 10;

impl Operation {
    /// Replicas reached so far, this one included.
    pub(super) fn reached(&self) -> usize {
        1 + self.answered.len()
    }

    pub(super) fn is_done(&self) -> bool {
        self.reached() >= self.required
    }

    /// Counts `peer`'s answer: only a peer this operation asked counts, and only once, so a
    /// member that was never asked (or answers twice) cannot make up a quorum. `true` if it
    /// counted.
    pub(super) fn count_answer(&mut self, peer: &UniqueAddress) -> bool {
        let asked = self.primaries.contains(peer)
            || (self.secondary_at.is_none() && self.secondaries.contains(peer));
        asked && self.answered.insert(peer.clone())
    }
}

/// Whom an operation at `level` asks: how many replicas it needs (this one included), the
/// peers asked first (as many as it needs beyond this one, reachable ones first, shuffled) and
/// the rest to ask if those are slow; `None` if the level asks for more replicas than exist.
pub(super) fn targets(
    peers: &[Peer],
    level: Level,
    rng: &mut impl Rng,
) -> Option<(usize, Vec<UniqueAddress>, Vec<UniqueAddress>)> {
    let strict = level == Level::All;
    let mut reachable = Vec::new();
    let mut unreachable = Vec::new();
    for peer in peers.iter().filter(|p| p.counts_for_quorum(strict)) {
        if peer.reachable {
            reachable.push(peer.node.clone());
        } else {
            unreachable.push(peer.node.clone());
        }
    }
    reachable.shuffle(rng);
    unreachable.shuffle(rng);
    let mut ordered = reachable;
    ordered.extend(unreachable);
    let required = level.required(ordered.len() + 1)?;
    let secondaries = ordered.split_off((required - 1).min(ordered.len()));
    let secondaries = secondaries.into_iter().take(MAX_SECONDARIES).collect();
    Some((required, ordered, secondaries))
}
