//! Leader actions: moving members up, out and away once the state has converged.

use super::Membership;
use super::io::Effect;
use crate::address::UniqueAddress;
use crate::membership::gossip::Gossip;
use crate::membership::member::{Member, MemberStatus, NOT_YET_UP};
use crate::time::Instant;

impl Membership {
    pub(super) fn leader_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if !self.is_member() {
            return;
        }
        let is_leader = self.leader().as_ref() == Some(&self.self_node);
        if is_leader {
            if self.is_converged() {
                self.unconverged_leader_ticks = 0;
                self.leader_actions_on_convergence(now, out);
            } else {
                self.unconverged_leader_ticks += 1;
                if let Some(after) = self.cfg.allow_weakly_up_members {
                    let waited = self.cfg.leader_actions_interval * self.unconverged_leader_ticks;
                    if waited >= after {
                        // Nobody is moved up while the cluster prepares for a full shutdown.
                        if !self.preparing_for_shutdown {
                            self.move_joining_to_weakly_up(now, out);
                        }
                    }
                }
            }
            let cutoff = now
                .as_millis()
                .saturating_sub(self.cfg.prune_gossip_tombstones_after.as_millis() as u64);
            if cutoff > 0 && self.gossip.tombstones.values().any(|t| *t < cutoff) {
                let mut g = Gossip::clone(&self.gossip);
                g.prune_tombstones(cutoff);
                self.update_gossip(now, g, out);
            }
        }
        self.full_shutdown_tick(now, out);
        self.downing_tick(now, is_leader, out);
    }

    fn enough_members(&self) -> bool {
        let g = &self.gossip;
        if g.members.len() < self.cfg.min_nr_of_members {
            return false;
        }
        self.cfg
            .role_min_nr_of_members
            .iter()
            .all(|(role, min)| g.members.values().filter(|m| m.has_role(role)).count() >= *min)
    }

    /// Whether this node joined another node's cluster, is not Up yet, and every other member
    /// of that cluster is Down: it would now remove them and make itself Up, leading a cluster
    /// of one. That happens when all the members it knew failed while it was joining and new
    /// incarnations of them asked it to join (their old incarnations are downed for that):
    /// those incarnations may well form or join a cluster elsewhere, which this one would
    /// then never merge with (simulator seed 2059 of the durable sweep). A member that left
    /// gracefully (Exiting) does not count: its cluster handed over, as the reference's does.
    fn orphaned_joiner(&self) -> bool {
        use MemberStatus::*;
        if !self.joined_through_other || !matches!(self.self_status(), Some(Joining | WeaklyUp)) {
            return false;
        }
        let mut others = self
            .gossip
            .members
            .values()
            .filter(|m| m.addr != self.self_node)
            .peekable();
        others.peek().is_some() && others.all(|m| m.status == Down)
    }

    fn leader_actions_on_convergence(&mut self, now: Instant, out: &mut Vec<Effect>) {
        use MemberStatus::*;
        if self.orphaned_joiner() {
            self.enter(super::Phase::Stopped);
            out.push(Effect::Shutdown(super::ShutdownReason::Orphaned));
            return;
        }
        let g = &self.gossip;
        // While the cluster prepares for a full shutdown nobody is moved Up: a new member would
        // get shards (or the coordinator) just as every node is about to stop.
        let enough = self.enough_members() && !self.preparing_for_shutdown;
        let mut next_up = g
            .members
            .values()
            .filter(|m| m.up_number != NOT_YET_UP)
            .map(|m| m.up_number)
            .max()
            .unwrap_or(0)
            + 1;
        let mut changed: Vec<Member> = Vec::new();
        let mut newly_exiting = false;
        // Convergence lets unreachable Joining members be (`Gossip::convergence`): they stay
        // Joining until they are reachable again, or are downed.
        let unreachable = g.unreachable_members();
        for m in g.members.values() {
            match m.status {
                Joining | WeaklyUp if enough && !unreachable.contains(&m.addr) => {
                    let mut up = m.with_status(Up);
                    up.up_number = next_up;
                    next_up += 1;
                    changed.push(up);
                }
                Leaving => {
                    changed.push(m.with_status(Exiting));
                    newly_exiting = true;
                }
                // Every member has seen the preparation (this is convergence).
                PreparingForShutdown => changed.push(m.with_status(ReadyForShutdown)),
                _ => {}
            }
        }
        let removed: Vec<UniqueAddress> = g
            .members
            .values()
            .filter(|m| {
                let unreachable_and_gone =
                    matches!(m.status, Down | Exiting) && !g.is_reachable(&m.addr);
                let confirmed = m.status == Exiting && self.exiting_confirmed.contains(&m.addr);
                unreachable_and_gone || confirmed
            })
            .map(|m| m.addr.clone())
            .collect();
        if changed.is_empty() && removed.is_empty() {
            return;
        }
        let mut g = Gossip::clone(g);
        for n in &removed {
            g.remove(n, now.as_millis());
            self.exiting_confirmed.remove(n);
        }
        for m in changed {
            if g.has_member(&m.addr) {
                g.update_member(m);
            }
        }
        self.update_gossip(now, g, out);
        if newly_exiting {
            // Hand-over speed-up: the oldest nodes host singletons and should learn at once.
            let mut oldest: Vec<&Member> = self
                .gossip
                .members
                .values()
                .filter(|m| m.addr != self.self_node)
                .collect();
            oldest.sort_by(|a, b| a.age_cmp(b));
            let targets: Vec<UniqueAddress> =
                oldest.iter().take(2).map(|m| m.addr.clone()).collect();
            for t in targets {
                self.send_envelope_to(&t, out);
            }
        }
    }

    fn move_joining_to_weakly_up(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if !self.enough_members() {
            return;
        }
        let g = &self.gossip;
        let promote: Vec<Member> = g
            .members
            .values()
            .filter(|m| m.status == MemberStatus::Joining && g.is_reachable(&m.addr))
            .map(|m| m.with_status(MemberStatus::WeaklyUp))
            .collect();
        if promote.is_empty() {
            return;
        }
        let mut g = Gossip::clone(g);
        for m in promote {
            g.update_member(m);
        }
        self.update_gossip(now, g, out);
    }
}
