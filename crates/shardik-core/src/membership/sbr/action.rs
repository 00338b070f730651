//! What the split-brain resolver asks its caller to do: the one output of its timers
//! (`resolver.rs`) and of lease-majority's lease protocol (`lease.rs`), which both produce it.

use super::decision::Decision;
use crate::address::UniqueAddress;

/// What the resolver asks its caller to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SbrAction {
    /// Down these nodes, in this order (others first, self last, since downing self may shut
    /// this node down), because of `decision`.
    Down {
        /// The verdict acted on (for a lease-majority side that did not get the lease, the
        /// reversed one).
        decision: Decision,
        /// The nodes to down.
        nodes: Vec<UniqueAddress>,
    },
    /// Acquire the lease of lease-majority, then answer with
    /// [`SplitBrainResolver::lease_answer`](super::SplitBrainResolver::lease_answer) and this
    /// `attempt`.
    AcquireLease {
        /// Names the request, so that a late answer to an earlier one is not mistaken for it.
        attempt: u64,
    },
    /// Give the lease back.
    ReleaseLease,
}
