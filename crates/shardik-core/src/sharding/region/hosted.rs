//! The shards a region hosts and the state of each ([`Hosted`]), with a hashed index of the
//! ones that simply run.
//!
//! Routing looks a shard up for every message. Almost always the shard is running and nothing
//! else about it matters, so that question is answered from a hash set; the ordered map stays
//! the record of every hosted shard and its state, so that iteration (timers, registration,
//! shutdown) is in shard order and simulations replay exactly.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::envelope::Buffered;
use super::shard_map::ShardMap;
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::shard_id::ShardId;

/// A hosted shard's state.
#[derive(Debug)]
pub(super) enum Hosted<M> {
    Running,
    /// Hosted here, but waiting for the shard's lease (`use-lease`): messages wait in the
    /// region's buffer; `predecessor` is the one the coordinator named, waited for once the
    /// lease is held.
    AwaitingLease {
        predecessor: Option<UniqueAddress>,
        /// The token of the tenure this region lost while hosting the shard, until the lease
        /// is held again. A grant more than one above it means another node held the shard in
        /// between, and what waited here meanwhile is older than what that node handled.
        lapsed: Option<u64>,
        /// Whether it ran here before it waited (parked by a lapse or the self-fence), rather
        /// than being placed here and waiting for its first lease.
        ran_here: bool,
    },
    /// Hosting, but messages from anyone but the predecessor wait for its hand-over marker
    /// (each with its sender, as in the buffer: a region that wakes from a long pause drops
    /// what other nodes sent).
    AwaitingPredecessor {
        predecessor: UniqueAddress,
        held: VecDeque<Buffered<M>>,
        until: Instant,
    },
    HandingOff {
        coordinator: UniqueAddress,
        entities_stopped: bool,
        awaiting_drains: BTreeSet<UniqueAddress>,
        force_at: Instant,
    },
    /// Stopping where it is, without a hand-off: the cluster prepares for a full shutdown and
    /// this region is shutting down (see
    /// [`Region::stop_for_full_shutdown`](super::Region::stop_for_full_shutdown)). Its entities
    /// were told to stop; at `force_at` the rest are forced.
    Stopping {
        force_at: Instant,
    },
}

/// Hosted shards by id, plus the set of those in [`Hosted::Running`].
///
/// The set is only ever probed, never iterated, so its per-process random hash seed cannot
/// change any outcome; it makes the lookup constant time and keeps crafted shard ids (from a
/// custom extractor) from degrading it.
#[derive(Debug)]
pub(super) struct HostedShards<M> {
    states: BTreeMap<ShardId, Hosted<M>>,
    running: ShardMap<()>,
}

impl<M> Default for HostedShards<M> {
    fn default() -> Self {
        HostedShards {
            states: BTreeMap::new(),
            running: ShardMap::default(),
        }
    }
}

impl<M> HostedShards<M> {
    /// Whether `shard` is hosted and running (not waiting for a predecessor, not handing off).
    pub fn is_running(&self, shard: &ShardId) -> bool {
        let running = self.running.contains_key(shard);
        debug_assert_eq!(
            running,
            matches!(self.states.get(shard), Some(Hosted::Running)),
            "running index out of step for shard {shard}"
        );
        running
    }

    /// Whether any hosted shard is in a state other than running (waiting or handing off).
    pub fn any_in_transition(&self) -> bool {
        self.states.len() > self.running.len()
    }

    pub fn get(&self, shard: &ShardId) -> Option<&Hosted<M>> {
        self.states.get(shard)
    }

    /// The state of `shard`, to change its fields. Changing the variant must go through
    /// [`replace`](Self::replace), which keeps the index in step (checked in debug builds).
    pub fn get_mut(&mut self, shard: &ShardId) -> Option<&mut Hosted<M>> {
        self.states.get_mut(shard)
    }

    /// Every hosted shard's state, in shard order, to change fields (not variants).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&ShardId, &mut Hosted<M>)> {
        self.states.iter_mut()
    }

    pub fn values(&self) -> impl Iterator<Item = &Hosted<M>> {
        self.states.values()
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &ShardId> {
        self.states.keys()
    }

    pub fn contains_key(&self, shard: &ShardId) -> bool {
        self.states.contains_key(shard)
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Hosts `shard` in `state` (replacing any earlier state).
    pub fn insert(&mut self, shard: ShardId, state: Hosted<M>) {
        // A shard starts here when it is not hosted, or when the lease it waited for is held:
        // never again while it runs, hands off or stops.
        debug_assert!(
            match self.states.get(&shard) {
                None => true,
                Some(old @ Hosted::AwaitingLease { .. }) => may_become(old, &state),
                Some(_) => false,
            },
            "shard {shard} started as {} while {}",
            name(&state),
            self.states.get(&shard).map_or("not hosted", name)
        );
        self.index(&shard, &state);
        self.states.insert(shard, state);
    }

    /// Puts `shard` (hosted) into `state` and returns its previous state.
    pub fn replace(&mut self, shard: &ShardId, state: Hosted<M>) -> Option<Hosted<M>> {
        let old = self.states.get(shard)?;
        debug_assert!(
            may_become(old, &state),
            "shard {shard} went from {} to {}",
            name(old),
            name(&state)
        );
        self.index(shard, &state);
        self.states.insert(shard.clone(), state)
    }

    pub fn remove(&mut self, shard: &ShardId) -> Option<Hosted<M>> {
        self.running.remove(shard);
        self.states.remove(shard)
    }

    /// Removes every shard, in shard order.
    pub fn take_all(&mut self) -> BTreeMap<ShardId, Hosted<M>> {
        self.running.clear();
        std::mem::take(&mut self.states)
    }

    fn index(&mut self, shard: &ShardId, state: &Hosted<M>) {
        if matches!(state, Hosted::Running) {
            self.running.insert(shard.clone(), ());
        } else {
            self.running.remove(shard);
        }
    }
}

/// Whether a hosted shard may go from `from` to `to` while it stays hosted: it runs (at once,
/// or once its predecessor has handed over) after waiting for its lease; it may be parked to
/// wait for its lease again, handed off or stopped in place while it runs; and once it hands
/// off or stops in place it only leaves.
fn may_become<M>(from: &Hosted<M>, to: &Hosted<M>) -> bool {
    use Hosted::*;
    match from {
        AwaitingLease { .. } => {
            matches!(to, Running | AwaitingPredecessor { .. } | HandingOff { .. })
        }
        AwaitingPredecessor { .. } => matches!(
            to,
            Running | AwaitingLease { .. } | HandingOff { .. } | Stopping { .. }
        ),
        Running => matches!(
            to,
            AwaitingLease { .. } | HandingOff { .. } | Stopping { .. }
        ),
        HandingOff { .. } | Stopping { .. } => false,
    }
}

/// The name of a hosted shard's state, for messages.
fn name<M>(state: &Hosted<M>) -> &'static str {
    match state {
        Hosted::Running => "running",
        Hosted::AwaitingLease { .. } => "awaiting its lease",
        Hosted::AwaitingPredecessor { .. } => "awaiting its predecessor",
        Hosted::HandingOff { .. } => "handing off",
        Hosted::Stopping { .. } => "stopping in place",
    }
}
