//! Downing: marking members Down, by command or by the split-brain resolver, whose
//! lease-majority lease requests go through the lease's holder (`sbr_lease.rs`).

use super::Membership;
use super::io::Effect;
use crate::address::UniqueAddress;
use crate::lease::LeaseAnswer;
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
        let mut view = SbrView::from_state(
            self.self_node.clone(),
            g.members.values().cloned().collect(),
            &g.reachability,
            g.seen.clone(),
        );
        view.gone = self
            .refused
            .iter()
            .filter(|n| view.unreachable.contains(*n))
            .cloned()
            .collect();
        view
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

    /// The store answered the lease call `id` (`sbr_lease.rs`); an acquisition's outcome
    /// goes on to the resolver.
    pub(super) fn sbr_lease_answered(
        &mut self,
        now: Instant,
        id: u64,
        answer: LeaseAnswer,
        out: &mut Vec<Effect>,
    ) {
        // Without lease-majority nothing was asked: nothing to hear.
        let Some(lease) = self.sbr_lease.as_mut() else {
            return;
        };
        let outcome = lease.answered(now, id, answer, out);
        self.sbr_lease_outcome(now, outcome, out);
    }

    /// Runs the lease's timers (renewals, deadlines, an acquisition not answered in time).
    pub(super) fn sbr_lease_timeout(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let Some(lease) = self.sbr_lease.as_mut() else {
            return;
        };
        if lease.poll_timeout().is_some_and(|t| t <= now) {
            let outcome = lease.handle_timeout(now, out);
            self.sbr_lease_outcome(now, outcome, out);
        }
    }

    /// Tells the resolver whether its lease request `attempt` was granted.
    fn sbr_lease_outcome(
        &mut self,
        now: Instant,
        outcome: Option<(u64, bool)>,
        out: &mut Vec<Effect>,
    ) {
        let Some((attempt, granted)) = outcome else {
            return;
        };
        let Some(sbr) = self.sbr.as_mut() else { return };
        let action = sbr.lease_answer(now, attempt, granted);
        self.carry_out_sbr(now, action, out);
    }

    /// Downs what the resolver decided (and reports it), or hands its lease requests to the
    /// lease's holder, which answers at once while it holds the lease.
    fn carry_out_sbr(&mut self, now: Instant, action: Option<SbrAction>, out: &mut Vec<Effect>) {
        let Some(action) = action else { return };
        match action {
            SbrAction::Down { ref nodes, .. } => {
                let nodes = nodes.clone();
                out.push(Effect::Sbr(action));
                for n in nodes {
                    if self.is_stopped() {
                        break;
                    }
                    self.downing(now, &n, out);
                }
            }
            SbrAction::AcquireLease { attempt } => {
                let at_once = match self.sbr_lease.as_mut() {
                    Some(lease) => lease.acquire(now, attempt, out),
                    // Only lease-majority asks, and it always has a holder.
                    None => Some(false),
                };
                if let Some(granted) = at_once {
                    self.sbr_lease_outcome(now, Some((attempt, granted)), out);
                }
            }
            SbrAction::ReleaseLease => {
                if let Some(lease) = self.sbr_lease.as_mut() {
                    lease.release(out);
                }
            }
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
