//! Downing: marking members Down, by command or by the split-brain resolver.

use super::{Effect, Membership};
use crate::membership::address::UniqueAddress;
use crate::membership::events::ClusterEvent;
use crate::membership::gossip::Gossip;
use crate::membership::member::MemberStatus;
use crate::membership::sbr::{SbrAction, SbrChange, SbrView};
use crate::time::Instant;

impl Membership {
    pub(super) fn downing(&mut self, now: Instant, node: &UniqueAddress, out: &mut Vec<Effect>) {
        let Some(m) = self.gossip.member(node) else {
            return;
        };
        if m.status == MemberStatus::Down {
            return;
        }
        let mut g = Gossip::clone(&self.gossip);
        g.mark_down(node);
        self.update_gossip(now, g, out);
        if node == &self.self_node {
            self.gossip_to_random(5, out);
        } else {
            // Tell the downed node directly, so that it stops itself if it can still hear us.
            let to = node.clone();
            self.send_envelope_to(&to, out);
        }
        self.after_state_change(now, out);
    }

    /// What the split-brain resolver sees from this node.
    fn sbr_view(&self) -> SbrView {
        let g = &self.gossip;
        SbrView::from_state(
            self.self_node.clone(),
            g.members.values().cloned().collect(),
            &g.reachability,
            g.seen.clone(),
        )
    }

    /// Split-brain resolver tick: decides on the leader, and "down all when unstable" everywhere.
    pub(super) fn downing_tick(&mut self, now: Instant, is_leader: bool, out: &mut Vec<Effect>) {
        if self.sbr.is_none() {
            return;
        }
        let status = self.self_status();
        let responsible = is_leader
            && status.is_some_and(|s| {
                s.counts_as_up() || matches!(s, MemberStatus::WeaklyUp | MemberStatus::Leaving)
            });
        let view = self.sbr_view();
        let Some(sbr) = self.sbr.as_mut() else { return };
        let action = sbr.tick(now, responsible, &view);
        self.carry_out_sbr(now, action, out);
    }

    /// The leader tick came `late` after it was due: the resolver may have to distrust
    /// what it would decide next (see [`SplitBrainResolver::note_stall`]).
    ///
    /// [`SplitBrainResolver::note_stall`]: crate::membership::sbr::SplitBrainResolver::note_stall
    pub(super) fn note_stall(&mut self, late: std::time::Duration) {
        if let Some(sbr) = self.sbr.as_mut() {
            sbr.note_stall(late);
        }
    }

    /// The answer to the resolver's lease request `attempt`.
    pub(super) fn sbr_lease_answer(
        &mut self,
        now: Instant,
        attempt: u64,
        granted: bool,
        out: &mut Vec<Effect>,
    ) {
        let Some(sbr) = self.sbr.as_mut() else {
            // No resolver, so nothing asked: a grant would be somebody's mistake; give it back.
            if granted {
                out.push(Effect::Sbr(SbrAction::ReleaseLease));
            }
            return;
        };
        let action = sbr.lease_answer(now, attempt, granted);
        self.carry_out_sbr(now, action, out);
    }

    /// Downs what the resolver decided (and reports it), or passes its lease calls on.
    fn carry_out_sbr(&mut self, now: Instant, action: Option<SbrAction>, out: &mut Vec<Effect>) {
        let Some(action) = action else { return };
        if let SbrAction::Down { nodes, .. } = &action {
            let nodes = nodes.clone();
            out.push(Effect::Sbr(action));
            for n in nodes {
                if self.is_stopped() {
                    break;
                }
                self.downing(now, &n, out);
            }
        } else {
            out.push(Effect::Sbr(action));
        }
    }

    /// Tells the split-brain resolver about the membership and reachability changes among
    /// the events of one state change.
    pub(super) fn note_sbr_changes(&mut self, now: Instant, evs: &[ClusterEvent]) {
        if self.sbr.is_none() {
            return;
        }
        let changes: Vec<SbrChange> = evs
            .iter()
            .filter_map(|e| match e {
                ClusterEvent::MemberUp(_) => Some(SbrChange::MemberUp),
                ClusterEvent::MemberExited(_) => Some(SbrChange::MemberExited),
                ClusterEvent::UnreachableMember(_) => Some(SbrChange::Unreachable),
                ClusterEvent::ReachableMember(_) => Some(SbrChange::Reachable),
                ClusterEvent::MemberDowned(_) => Some(SbrChange::MemberDowned),
                ClusterEvent::MemberRemoved { .. } => Some(SbrChange::MemberRemoved),
                _ => None,
            })
            .collect();
        if !changes.is_empty() {
            let view = self.sbr_view();
            if let Some(sbr) = self.sbr.as_mut() {
                for c in changes {
                    sbr.note_change(now, c, &view);
                }
            }
        }
    }
}
