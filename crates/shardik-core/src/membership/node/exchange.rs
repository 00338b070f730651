//! Gossip exchange: choosing targets, status versus full state, receiving and merging
//! states, and replacing the local state (publishing what changed).

use std::sync::Arc;

use rand::Rng;

use super::Membership;
use super::feature_state::Derived;
use super::io::{DropReason, Effect};
use crate::address::UniqueAddress;
use crate::membership::events::{self};
use crate::membership::gossip::Gossip;
use crate::membership::member::MemberStatus;
use crate::membership::messages::Message;
use crate::membership::vclock::{Ordering, VectorClock};
use crate::time::Instant;

impl Membership {
    /// A peer's version summary: nothing if we agree, our status if it is ahead (so that it
    /// sends its state), our full state otherwise.
    pub(super) fn receive_gossip_status(
        &mut self,
        from: &UniqueAddress,
        version: &VectorClock,
        seen_digest: u64,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        if let Some(reason) = self.gossip_sender_refusal(from) {
            return self.refuse_gossip(reason, from, msg, out);
        }
        let from = from.clone();
        match self.gossip.version.compare(version) {
            Ordering::Same if seen_digest == self.derived().seen_digest => {}
            Ordering::Before => self.send_status_to(&from, out),
            _ => self.send_envelope_to(&from, out),
        }
    }

    /// A peer's full state (already checked for age by the caller).
    pub(super) fn receive_gossip_envelope(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        to: &UniqueAddress,
        gossip: &Arc<Gossip>,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        if *to != self.self_node {
            return self.drop_input(DropReason::WrongIncarnation, msg, out);
        }
        if let Some(reason) = self.gossip_sender_refusal(from) {
            return self.refuse_gossip(reason, from, msg, out);
        }
        if !gossip.has_member(&self.self_node) {
            return self.drop_input(DropReason::NotInGossip, msg, out);
        }
        let (from, remote) = (from.clone(), Arc::clone(gossip));
        self.receive_gossip(now, &from, remote, out);
    }

    /// Drops refused gossip; a sender this member does not know at all is told so (a removed
    /// one never gets this far: `handle_message` answers it `Quarantined`).
    fn refuse_gossip(
        &mut self,
        reason: DropReason,
        from: &UniqueAddress,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        self.drop_input(reason, msg, out);
        if reason == DropReason::UnknownSender {
            self.tell_not_known(from, out);
        }
    }

    /// Why gossip from `from` must be ignored, if it must: we are not a member, or the sender
    /// is not one we know, or we ourselves observe it as unreachable (gossip from a node that
    /// others mark unreachable is still taken).
    fn gossip_sender_refusal(&self, from: &UniqueAddress) -> Option<DropReason> {
        if !self.is_member() {
            Some(DropReason::NotAMember)
        } else if !self.gossip.has_member(from) {
            Some(DropReason::UnknownSender)
        } else if !self
            .gossip
            .reachability
            .is_reachable_from(&self.self_node, from)
        {
            Some(DropReason::UnreachableSender)
        } else {
            None
        }
    }

    /// Whether to gossip three times per interval instead of once. The reference speeds up
    /// while a member is Down or fewer than half have seen the state; we keep the speed-up
    /// until every reachable member has seen it, because the leader can only act once the
    /// seen sets have merged, and that last half dominates convergence time in large clusters
    /// (see docs/differences-from-akka.md). Unreachable members do not count, so a partition
    /// does not keep it on.
    pub(super) fn needs_speedup(&mut self) -> bool {
        let d = self.derived();
        d.has_down_member || d.unseen_targets > 0
    }

    /// Replaces the gossip state without publishing anything (callers publish).
    pub(super) fn install_gossip(&mut self, g: Arc<Gossip>) -> Arc<Gossip> {
        self.gossip_generation += 1;
        std::mem::replace(&mut self.gossip, g)
    }

    /// The cached values derived from the current state, recomputed after a change.
    fn derived(&mut self) -> &Derived {
        if self.derived.generation != self.gossip_generation {
            let g = &self.gossip;
            let me = &self.self_node;
            let (mut valid_targets, mut unseen_targets) = (0, 0);
            for n in g.members.keys() {
                if n != me && g.reachability.is_reachable_from(me, n) {
                    valid_targets += 1;
                    if !g.seen_by(n) {
                        unseen_targets += 1;
                    }
                }
            }
            self.derived = Derived {
                generation: self.gossip_generation,
                seen_digest: g.seen_digest(),
                valid_targets,
                unseen_targets,
                has_down_member: g.members.values().any(|m| m.status == MemberStatus::Down),
            };
        }
        &self.derived
    }

    pub(super) fn gossip_round(&mut self, out: &mut Vec<Effect>) {
        if !self.is_member() || self.gossip.members.len() <= 1 {
            return;
        }
        let p = self
            .cfg
            .different_view_probability(self.gossip.members.len());
        let prefer_unseen = self.rng.random::<f64>() < p;
        let (valid, unseen) = {
            let d = self.derived();
            (d.valid_targets, d.unseen_targets)
        };
        let only_unseen = prefer_unseen && unseen > 0;
        let pool = if only_unseen { unseen } else { valid };
        if pool == 0 {
            return;
        }
        // Pick the k-th eligible member by walking the table (no per-node target list kept).
        let k = self.rng.random_range(0..pool);
        let g = &self.gossip;
        let me = &self.self_node;
        let target = g
            .members
            .keys()
            .filter(|n| *n != me && g.reachability.is_reachable_from(me, n))
            .filter(|n| !only_unseen || !g.seen_by(n))
            .nth(k)
            .cloned();
        if let Some(target) = target {
            self.send_gossip_to(&target, out);
        }
    }

    /// Status to a peer that has seen our version, full gossip otherwise.
    pub(super) fn send_gossip_to(&mut self, node: &UniqueAddress, out: &mut Vec<Effect>) {
        if self.gossip.seen_by(node) {
            self.send_status_to(node, out)
        } else {
            self.send_envelope_to(node, out)
        }
    }

    fn send_status_to(&mut self, node: &UniqueAddress, out: &mut Vec<Effect>) {
        self.stats.gossip_status_sent += 1;
        let msg = Message::GossipStatus {
            from: self.self_node.clone(),
            version: self.gossip.version.clone(),
            seen_digest: self.derived().seen_digest,
        };
        self.send(node.address.clone(), msg, out);
    }

    pub(super) fn send_envelope_to(&mut self, node: &UniqueAddress, out: &mut Vec<Effect>) {
        self.stats.gossip_sent += 1;
        let msg = Message::GossipEnvelope {
            from: self.self_node.clone(),
            to: node.clone(),
            gossip: Arc::clone(&self.gossip),
        };
        self.send(node.address.clone(), msg, out);
    }

    pub(super) fn gossip_to_random(&mut self, n: usize, out: &mut Vec<Effect>) {
        let mut others: Vec<UniqueAddress> = self
            .gossip
            .members
            .keys()
            .filter(|a| **a != self.self_node)
            .cloned()
            .collect();
        for i in 0..others.len().min(n) {
            let j = self.rng.random_range(i..others.len());
            others.swap(i, j);
            let to = others[i].clone();
            self.send_envelope_to(&to, out);
        }
    }

    /// Takes a peer's state: keeps ours if it is newer, takes theirs if it is newer, merges
    /// concurrent ones; then talks back if the peer has not seen the result.
    pub(super) fn receive_gossip(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        remote: Arc<Gossip>,
        out: &mut Vec<Effect>,
    ) {
        self.stats.gossip_received += 1;
        let me = self.self_node.clone();
        let local = Arc::clone(&self.gossip);
        let (mut new, talkback) = match local.version.compare(&remote.version) {
            Ordering::Same => {
                let talkback = !remote.seen_by(&me);
                if remote.seen.is_subset(&local.seen) && local.seen_by(&me) {
                    // Nothing new: keep the shared state as it is (no copy).
                    if talkback {
                        self.send_envelope_to(from, out);
                    }
                    return;
                }
                let mut g = Gossip::clone(&local);
                g.seen.extend(remote.seen.iter().cloned());
                (g, talkback)
            }
            Ordering::After => (Gossip::clone(&local), true),
            Ordering::Before => (Gossip::clone(&remote), !remote.seen_by(&me)),
            Ordering::Concurrent => {
                self.stats.merges += 1;
                (local.merge(&remote), true)
            }
        };
        if !self.exit_started || self.self_status() != Some(MemberStatus::Exiting) {
            new.see(&me);
        }
        debug_assert_eq!(
            new.check_succession(&local),
            Ok(()),
            "{me}: the state taken from {from} ({:?}) goes back on ours",
            local.version.compare(&remote.version)
        );
        self.set_gossip(now, new, out);
        if talkback {
            self.send_envelope_to(from, out);
        }
        self.after_state_change(now, out);
    }

    /// A local change: bump our clock entry, only we have seen it, publish.
    pub(super) fn update_gossip(&mut self, now: Instant, mut g: Gossip, out: &mut Vec<Effect>) {
        g.version.increment(&self.self_node);
        g.only_seen_by(&self.self_node);
        debug_assert_eq!(
            g.check_succession(&self.gossip),
            Ok(()),
            "{}: a local change goes back on the state",
            self.self_node
        );
        self.set_gossip(now, g, out);
        self.after_state_change(now, out);
    }

    /// Replaces the state and publishes what changed.
    pub(super) fn set_gossip(&mut self, now: Instant, g: Gossip, out: &mut Vec<Effect>) {
        debug_assert_eq!(g.check_invariants(), Ok(()));
        let old = self.install_gossip(Arc::new(g));
        let mut evs = Vec::new();
        events::diff(&old, &self.gossip, &self.self_node, &mut evs);
        self.note_sbr_changes(now, &evs);
        out.extend(evs.into_iter().map(Effect::Event));
        self.exiting_confirmed.retain(|n| self.gossip.has_member(n));
        self.sync_heartbeat_ring(now);
    }
}
