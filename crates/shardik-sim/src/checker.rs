//! Invariant checks run during every simulation.
//!
//! Per event: as seen by any one node incarnation, a member's status only moves forward along
//! the allowed transitions, and a removed member never comes back. Per state (optional, costs
//! O(members) per step): the gossip invariants of digest §4.3 hold on every node.

use std::collections::BTreeMap;

use shardik_core::Instant;
use shardik_core::membership::{ClusterEvent, MemberStatus, Membership, UniqueAddress};

use crate::world::NodeId;

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
            if *prev == MemberStatus::Removed || !prev.can_move_to(status) {
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
