//! The state that three of the core's parts keep in [`Membership`](super::Membership)'s
//! fields: the values derived from the gossip state ([`Derived`], worked by `exchange.rs`),
//! the heartbeat answers awaited after a freeze ([`FreezeCheck`], `freeze.rs`) and the
//! reports of seeds that do not let this node in ([`UnansweredSeeds`], `unanswered_seeds.rs`).
//!
//! Kept apart from those files because the core holds this state while those files add
//! methods to the core: with the state here, below both, neither needs the other's file.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::address::UniqueAddress;
use crate::time::Instant;

/// Values computed from the current gossip state, cached until the state changes: gossip
/// rounds and status messages run several times a second, and recomputing these per round
/// would cost O(members) each time (O(members²) per second across a large cluster).
#[derive(Clone, Debug, Default)]
pub(super) struct Derived {
    pub(super) generation: u64,
    pub(super) seen_digest: u64,
    /// How many members other than self that self observes as reachable (valid targets).
    pub(super) valid_targets: usize,
    /// How many of those have not seen the current version. Counts, not lists: every node
    /// would otherwise hold two more copies of the member list, which in a simulation of
    /// thousands of nodes is most of the memory.
    pub(super) unseen_targets: usize,
    pub(super) has_down_member: bool,
}

/// The heartbeat answers a member waits for after a freeze.
#[derive(Debug)]
pub(super) struct FreezeCheck {
    /// The first heartbeat sequence number sent after the freeze: older answers prove nothing.
    pub(super) first_seq: u64,
    /// The receivers that answered a heartbeat from `first_seq` on.
    pub(super) answered: BTreeSet<UniqueAddress>,
}

/// How long this node has been trying to join, and when to say so next.
#[derive(Clone, Debug)]
pub(super) struct UnansweredSeeds {
    pub(super) since: Instant,
    /// `InitJoin` rounds sent (one per second to every other seed) and `Join`s not welcomed.
    pub(super) attempts: u32,
    pub(super) next_report: Instant,
    pub(super) interval: Duration,
}

impl UnansweredSeeds {
    pub(super) fn new(now: Instant, first_after: Duration) -> Self {
        UnansweredSeeds {
            since: now,
            attempts: 0,
            next_report: now + first_after,
            interval: first_after,
        }
    }
}
