//! Preparing for a full cluster shutdown (the reference's `prepareForFullClusterShutdown`).
//!
//! Any member may start it ([`Command::PrepareForFullClusterShutdown`](super::Command)): it
//! marks every Up member PreparingForShutdown and gossips. Once every member has seen that,
//! the leader moves them to ReadyForShutdown (`leader.rs`). From the moment a node sees the
//! cluster prepare, it never again moves a member Up or WeaklyUp and lets no joiner in
//! (`joining.rs`); sharding, reading the same statuses, moves no shard (`sharding/view.rs`).
//! Each node then leaves as usual (PreparingForShutdown and ReadyForShutdown may move to
//! Leaving), and its shards stop where they are instead of being handed off.
//!
//! Only a member can start it: the command is local (the management API's guarded write
//! route, or the application), and there is no network message for it, so a stranger has
//! nothing to send. A member marks the others through gossip, which only members may send.

use super::Membership;
use super::io::Effect;
use crate::membership::gossip::Gossip;
use crate::membership::member::{Member, MemberStatus};
use crate::time::Instant;

impl Membership {
    /// The command: this node starts preparing, and marks every Up member.
    pub(super) fn prepare_for_full_shutdown(&mut self, now: Instant, out: &mut Vec<Effect>) {
        self.note_preparing_for_shutdown(out);
        self.mark_up_members_preparing(now, out);
    }

    /// After every change of the state: a member preparing means the cluster prepares.
    pub(super) fn notice_full_shutdown(&mut self, out: &mut Vec<Effect>) {
        if !self.preparing_for_shutdown
            && self
                .gossip
                .members
                .values()
                .any(|m| m.status.is_preparing_for_shutdown())
        {
            self.note_preparing_for_shutdown(out);
        }
    }

    /// Every leader tick, on every member that counts as up (the reference's
    /// `checkForPrepareForShutdown`): a member still Up while the cluster prepares was moved
    /// Up by a leader that had not heard of the preparation yet, in a state concurrent with
    /// it. It is marked too, or it would never become ReadyForShutdown.
    pub(super) fn full_shutdown_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if self.preparing_for_shutdown && self.self_status().is_some_and(MemberStatus::counts_as_up)
        {
            self.mark_up_members_preparing(now, out);
        }
    }

    fn note_preparing_for_shutdown(&mut self, out: &mut Vec<Effect>) {
        if !self.preparing_for_shutdown {
            self.preparing_for_shutdown = true;
            out.push(Effect::PreparingForFullShutdown);
        }
    }

    fn mark_up_members_preparing(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let up: Vec<Member> = self
            .gossip
            .members
            .values()
            .filter(|m| m.status == MemberStatus::Up)
            .map(|m| m.with_status(MemberStatus::PreparingForShutdown))
            .collect();
        if up.is_empty() {
            return;
        }
        let mut g = Gossip::clone(&self.gossip);
        for m in up {
            g.update_member(m);
        }
        self.update_gossip(now, g, out);
        self.gossip_round(out);
    }
}
