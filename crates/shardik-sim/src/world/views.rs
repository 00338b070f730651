//! What scenarios and tests ask of the world as a whole: the members a node sees, whether the
//! nodes agree, whether all are Up, whether all see one status.

use std::collections::BTreeSet;

use shardik_core::membership::{Address, Member, MemberStatus, UniqueAddress};

use super::{SimNode, World};
use crate::node_id::NodeId;

impl World {
    /// The members node `id` knows, with statuses.
    pub fn members_seen_by(&self, id: NodeId) -> Vec<Member> {
        self.nodes[id]
            .core
            .gossip()
            .members
            .values()
            .cloned()
            .collect()
    }

    /// Whether every running member node holds the same members (and statuses), has converged,
    /// and agrees on the leader.
    pub fn agreed(&self) -> bool {
        let alive: Vec<&SimNode> = self
            .nodes
            .iter()
            .filter(|n| n.alive && n.core.membership().is_member())
            .collect();
        let Some(first) = alive.first() else {
            return false;
        };
        let view = |n: &SimNode| -> Vec<(UniqueAddress, MemberStatus)> {
            n.core
                .gossip()
                .members
                .values()
                .map(|m| (m.addr.clone(), m.status))
                .collect()
        };
        let v0 = view(first);
        let l0 = first.core.membership().leader();
        alive.iter().all(|n| {
            n.core.membership().is_converged()
                && view(n) == v0
                && n.core.membership().leader() == l0
        })
    }

    /// Whether every node in `ids` is alive, converged, and sees exactly `ids` as members, all Up.
    pub fn all_up(&self, ids: &[NodeId]) -> bool {
        let want: BTreeSet<Address> = ids.iter().map(|i| Self::address_of(*i)).collect();
        ids.iter().all(|&i| {
            let n = &self.nodes[i];
            n.alive
                && n.core.membership().is_member()
                && n.core.gossip().members.len() == want.len()
                && n.core
                    .gossip()
                    .members
                    .values()
                    .all(|m| m.status == MemberStatus::Up && want.contains(&m.addr.address))
        })
    }

    /// Whether every running member node sees node `subject`'s current incarnation with `status`.
    pub fn all_see_status(&self, subject: NodeId, status: MemberStatus) -> bool {
        let target = self.nodes[subject].core.self_node().clone();
        self.nodes
            .iter()
            .filter(|n| n.alive && n.core.membership().is_member())
            .all(|n| {
                n.core
                    .gossip()
                    .member(&target)
                    .is_some_and(|m| m.status == status)
            })
    }
}
