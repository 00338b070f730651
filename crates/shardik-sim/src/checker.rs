//! Invariant checks run during every simulation.
//!
//! Per event: as seen by any one node incarnation, a member's status only moves forward along
//! the allowed transitions (possibly skipping states that observer never saw), and a removed
//! member never comes back. Per state (optional, costs
//! O(members) per step): every node's gossip state keeps its invariants (no Removed member in
//! the member table, the seen set and reachability only mention members, clock entries only
//! for members or tombstoned nodes).

use std::collections::BTreeMap;

use shardik_core::Instant;
use shardik_core::membership::{ClusterEvent, MemberStatus, Membership, UniqueAddress};

use crate::node_id::NodeId;

/// Collects invariant violations; a run passes when there are none.
#[derive(Default)]
pub struct Checker {
    check_states: bool,
    /// (observer slot, observer incarnation) → member → last status seen.
    last_status: BTreeMap<(NodeId, u32), BTreeMap<UniqueAddress, MemberStatus>>,
    incarnation: BTreeMap<NodeId, u32>,
    violations: Vec<String>,
}

impl Checker {
    /// A checker; `check_states` turns on the per-step gossip invariant checks.
    pub fn new(check_states: bool) -> Self {
        Checker {
            check_states,
            ..Default::default()
        }
    }

    /// Violations found so far, each with the time and node.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Node `id` restarted: its next incarnation starts with a clean history.
    pub fn forget_observer(&mut self, id: NodeId) {
        *self.incarnation.entry(id).or_default() += 1;
    }

    /// Checks one published event of node `id`.
    pub fn on_event(&mut self, now: Instant, id: NodeId, incarnation: u32, ev: &ClusterEvent) {
        let (member, status) = match ev {
            ClusterEvent::MemberJoined(m)
            | ClusterEvent::MemberWeaklyUp(m)
            | ClusterEvent::MemberUp(m)
            | ClusterEvent::MemberLeft(m)
            | ClusterEvent::MemberExited(m)
            | ClusterEvent::MemberDowned(m) => (m, m.status),
            ClusterEvent::MemberRemoved { member, .. } => (member, MemberStatus::Removed),
            _ => return,
        };
        let seen = self.last_status.entry((id, incarnation)).or_default();
        if let Some(prev) = seen.get(&member.addr) {
            if *prev == MemberStatus::Removed || !moves_forward(*prev, status) {
                self.violations.push(format!(
                    "{now} node-{id:05}: {} moved backwards {prev} -> {status}",
                    member.addr
                ));
            }
        }
        seen.insert(member.addr.clone(), status);
    }

    /// Checks node `id`'s state after it handled an input.
    pub fn check_node(&mut self, now: Instant, id: NodeId, core: &Membership) {
        if !self.check_states {
            return;
        }
        if let Err(e) = core.gossip().check_invariants() {
            self.violations.push(format!("{now} node-{id:05}: {e}"));
        }
    }
}

/// Whether a member may be seen going from `from` to `to`: along any path of allowed
/// transitions, not only a single one. An observer can miss intermediate states (a node that
/// was partitioned or joined late may learn of a leave only once the member is Exiting, so it
/// sees Up then Exiting), exactly as gossip merges allow.
fn moves_forward(from: MemberStatus, to: MemberStatus) -> bool {
    let mut reached = vec![from];
    let mut i = 0;
    while i < reached.len() {
        if reached[i] == to {
            return true;
        }
        for next in MemberStatus::ALL {
            if reached[i].can_move_to(next) && !reached.contains(&next) {
                reached.push(next);
            }
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_states_still_move_forward_but_nothing_moves_back() {
        use MemberStatus::*;
        assert!(moves_forward(Up, Exiting), "Leaving missed");
        assert!(moves_forward(Joining, Exiting));
        assert!(moves_forward(WeaklyUp, Removed));
        assert!(moves_forward(Up, Up));
        assert!(!moves_forward(Exiting, Up));
        assert!(!moves_forward(Leaving, Up));
        assert!(!moves_forward(Down, Exiting));
        assert!(!moves_forward(Up, Joining));
    }
}
