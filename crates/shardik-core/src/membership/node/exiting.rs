//! Leaving and exiting: a member asks to leave, this node runs its exit tasks, and this
//! node stops when it is Exiting, Down or removed.

use std::sync::Arc;

use super::io::{CommandError, DropReason, Effect, ShutdownReason};
use super::{Membership, Phase};
use crate::address::UniqueAddress;
use crate::membership::gossip::Gossip;
use crate::membership::member::MemberStatus;
use crate::membership::messages::Message;
use crate::time::Instant;

impl Membership {
    /// A leaving member finished its exit tasks; the leader may remove it without waiting to
    /// detect it as unreachable.
    pub(super) fn note_exiting_confirmed(&mut self, node: &UniqueAddress) {
        if self
            .gossip
            .member(node)
            .is_some_and(|m| m.status == MemberStatus::Exiting)
        {
            self.exiting_confirmed.insert(node.clone());
        }
    }

    /// A node says this incarnation was removed: stop.
    ///
    /// It must name this very incarnation, and come from a member of this node's view that
    /// is not on its way out, or from an incarnation this node does not know at a member's
    /// address (`senders.rs`): a node answers `Quarantined` only when its state holds a
    /// tombstone for the sender's unique address (`handle_message`), and a tombstone for this
    /// incarnation exists only where the cluster it joined removed it; a tombstone always wins
    /// a merge, so that cluster never takes it back. Why a newer incarnation's word counts
    /// too: a node frozen longer than it takes to down and remove it may wake up to find every
    /// member it knows replaced by a newer incarnation at the same address; each answers
    /// `Quarantined`, and ignoring them left the node leading a cluster of its own, which
    /// restarted nodes then joined (simulator seed 2386 of the leased sweep). Why not anyone's:
    /// a stranger that learned this node's uid from a handshake could stop it.
    pub(super) fn receive_quarantined(
        &mut self,
        to: &UniqueAddress,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        if *to != self.self_node || !self.is_member() {
            return self.drop_input(DropReason::Unexpected, msg, out);
        }
        self.enter(Phase::Stopped);
        out.push(Effect::Shutdown(ShutdownReason::Removed));
    }

    pub(super) fn leaving(&mut self, now: Instant, node: &UniqueAddress, out: &mut Vec<Effect>) {
        let Some(m) = self.gossip.member(node) else {
            return;
        };
        use MemberStatus::*;
        if !matches!(
            m.status,
            Joining | WeaklyUp | Up | PreparingForShutdown | ReadyForShutdown
        ) {
            return;
        }
        let mut g = Gossip::clone(&self.gossip);
        g.update_member(m.with_status(Leaving));
        self.update_gossip(now, g, out);
        self.gossip_round(out);
    }

    pub(super) fn exiting_completed(&mut self, out: &mut Vec<Effect>) {
        if self.self_status() != Some(MemberStatus::Exiting) {
            return out.push(Effect::CommandFailed(CommandError::NotAMember));
        }
        let mut g = Gossip::clone(&self.gossip);
        g.see(&self.self_node);
        self.install_gossip(Arc::new(g));
        self.gossip_to_random(5, out);
        // The two members most likely to lead next, so that one of them removes us promptly.
        let next_leaders: Vec<UniqueAddress> = self
            .gossip
            .members
            .values()
            .filter(|m| m.addr != self.self_node && m.status.leader_eligible())
            .filter(|m| self.gossip.is_reachable(&m.addr))
            .take(2)
            .map(|m| m.addr.clone())
            .collect();
        for n in next_leaders {
            let msg = Message::ExitingConfirmed {
                node: self.self_node.clone(),
            };
            self.send(n.address.clone(), msg, out);
        }
        self.enter(Phase::Stopped);
        out.push(Effect::Shutdown(ShutdownReason::Left));
    }

    /// Reacts to our own status: Exiting starts the exit tasks, Down or removal stops the node.
    pub(super) fn after_state_change(&mut self, _now: Instant, out: &mut Vec<Effect>) {
        if !self.is_member() {
            return;
        }
        self.notice_full_shutdown(out);
        match self.self_status() {
            Some(MemberStatus::Exiting) if !self.exit_started => {
                self.exit_started = true;
                out.push(Effect::SelfExiting);
            }
            Some(MemberStatus::Down) => {
                self.enter(Phase::Stopped);
                out.push(Effect::Shutdown(ShutdownReason::Downed));
            }
            None if self.gossip.tombstones.contains_key(&self.self_node) => {
                self.enter(Phase::Stopped);
                out.push(Effect::Shutdown(ShutdownReason::Removed));
            }
            _ => {}
        }
    }
}
