//! The other replicators, as membership reports them, and which of them each task uses.

use crate::address::UniqueAddress;
use crate::membership::MemberStatus;

/// Another node's replicator, as the membership view shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The node.
    pub node: UniqueAddress,
    /// Its membership status.
    pub status: MemberStatus,
    /// Whether this node's failure detector hears it.
    pub reachable: bool,
}

impl Peer {
    /// Whether the peer counts toward a read's or a write's quorum: the reference counts Up
    /// members and those on their way out, never Joining or WeaklyUp ones; `All` (`strict`)
    /// leaves out Exiting ones too.
    pub(super) fn counts_for_quorum(&self, strict: bool) -> bool {
        match self.status {
            MemberStatus::Up
            | MemberStatus::Leaving
            | MemberStatus::PreparingForShutdown
            | MemberStatus::ReadyForShutdown => true,
            MemberStatus::Exiting => !strict,
            MemberStatus::Joining
            | MemberStatus::WeaklyUp
            | MemberStatus::Down
            | MemberStatus::Removed => false,
        }
    }

    /// Whether the peer takes part in gossip and deltas: every member past joining and not
    /// yet down.
    pub(super) fn disseminates(&self) -> bool {
        !matches!(
            self.status,
            MemberStatus::Joining | MemberStatus::Down | MemberStatus::Removed
        )
    }

    /// Whether messages from the peer are taken: any member not removed.
    pub(super) fn is_member(&self) -> bool {
        self.status != MemberStatus::Removed
    }
}
