//! Invariant checks run during every simulation.
//!
//! Per event: as seen by any one node incarnation, a member's status only moves forward along
//! the allowed transitions (possibly skipping states that observer never saw), and a removed
//! member never comes back. Per state (optional, costs
//! O(members) per step): every node's gossip state keeps its invariants (no Removed member in
//! the member table, the seen set and reachability only mention members, clock entries only
//! for members or tombstoned nodes), and no incarnation that a node ever held a tombstone for
//! is ever again a member in that node's state: Removed -> Joining is impossible even through
//! a tombstone learned without ever seeing the member (so no event tells of the removal) and
//! then lost in a merge.

use std::collections::{BTreeMap, BTreeSet};

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
    /// (observer slot, observer incarnation) → every incarnation its state ever tombstoned.
    tombstoned: BTreeMap<(NodeId, u32), BTreeSet<UniqueAddress>>,
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
            | ClusterEvent::MemberDowned(m)
            | ClusterEvent::MemberPreparingForShutdown(m)
            | ClusterEvent::MemberReadyForShutdown(m) => (m, m.status),
            ClusterEvent::MemberRemoved { member, .. } => (member, MemberStatus::Removed),
            _ => return,
        };
        let seen = self.last_status.entry((id, incarnation)).or_default();
        if let Some(prev) = seen.get(&member.addr) {
            if *prev == MemberStatus::Removed {
                self.violations.push(format!(
                    "{now} node-{id:05}: {} came back after its removal: Removed -> {status}",
                    member.addr
                ));
            } else if !moves_forward(*prev, status) {
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
        let g = core.gossip();
        if let Err(e) = g.check_invariants() {
            self.violations.push(format!("{now} node-{id:05}: {e}"));
        }
        let incarnation = self.incarnation.get(&id).copied().unwrap_or(0);
        let ever = self.tombstoned.entry((id, incarnation)).or_default();
        ever.extend(g.tombstones.keys().cloned());
        let back: Vec<UniqueAddress> = ever.iter().filter(|n| g.has_member(n)).cloned().collect();
        for n in back {
            // Reported once: it is forgotten, so the next steps do not repeat it.
            ever.remove(&n);
            self.violations.push(format!(
                "{now} node-{id:05}: {n} is a member again after this node tombstoned it"
            ));
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
    use std::sync::Arc;

    use shardik_core::membership::{Address, Gossip, Member, MembershipConfig};

    use super::*;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new(format!("node-{i}"), 2552), u64::from(i))
    }

    /// A core of node 0 holding `members` (all Up) and a tombstone for each of `removed`.
    fn core_with(members: &[u16], removed: &[u16]) -> Membership {
        let mut g = Gossip::default();
        for &i in members {
            let mut m = Member::joining(node(i), Default::default(), "0");
            m.status = MemberStatus::Up;
            Arc::make_mut(&mut g.members).insert(node(i), m);
        }
        for &i in removed {
            g.tombstones.insert(node(i), 1);
        }
        let mut core = Membership::new(MembershipConfig::default(), node(0), 1, Instant::ZERO);
        core.start_as_member(Instant::ZERO, Arc::new(g));
        core
    }

    #[test]
    fn a_tombstoned_incarnation_may_never_be_a_member_again_for_that_observer() {
        let mut c = Checker::new(true);
        // Node 0 learns of node 2's removal without ever having had it as a member.
        c.check_node(Instant::ZERO, 0, &core_with(&[0, 1], &[2]));
        // A state that lost the tombstone and has node 2 again is caught, once.
        c.check_node(Instant::ZERO, 0, &core_with(&[0, 1, 2], &[]));
        c.check_node(Instant::ZERO, 0, &core_with(&[0, 1, 2], &[]));
        assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
        assert!(c.violations()[0].contains("member again"));
        // A restarted observer starts with a clean history.
        c.forget_observer(0);
        c.check_node(Instant::ZERO, 0, &core_with(&[0, 1, 2], &[]));
        assert_eq!(c.violations().len(), 1);
    }

    #[test]
    fn a_removed_member_seen_again_is_reported() {
        let mut c = Checker::new(false);
        let m = Member::joining(node(3), Default::default(), "0");
        let mut gone = m.clone();
        gone.status = MemberStatus::Removed;
        c.on_event(Instant::ZERO, 0, 0, &ClusterEvent::MemberJoined(m.clone()));
        c.on_event(
            Instant::ZERO,
            0,
            0,
            &ClusterEvent::MemberRemoved {
                member: gone,
                previous: MemberStatus::Joining,
            },
        );
        assert!(c.violations().is_empty());
        c.on_event(Instant::ZERO, 0, 0, &ClusterEvent::MemberJoined(m));
        assert_eq!(c.violations().len(), 1);
        assert!(c.violations()[0].contains("Removed -> Joining"));
    }

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
