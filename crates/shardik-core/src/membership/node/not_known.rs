//! Incarnations a member does not know: the member tells a stranger that gossips with it so,
//! and a node still Joining that is told so joins again through that member.
//!
//! Why: a node is a member (Joining) as soon as one member welcomed it. If that member crashes
//! before its gossip about the joiner reached anyone, the others drop the joiner's gossip as
//! coming from an unknown node (the reference does the same) and nothing would ever tell the
//! joiner: it stays Joining for good. The joiner cannot tell "nobody knew me" from "I was
//! removed" on its own, so the cluster answers: a member holding a tombstone for the sender
//! answers `Quarantined` (`handle_message`; the sender stops), one that does not know it at all
//! answers `NotKnown` (here). Joining again is safe because a tombstone always wins: the
//! member that takes the `Join` refuses a tombstoned incarnation, and one that has not heard
//! of the removal yet adds it only until its state meets the tombstone in a merge.
//!
//! The joiner merges the member's `Welcome` into its own state instead of replacing it, so
//! nothing it knew disappears (other joiners the dead member welcomed come along and become
//! known too) and no status moves backwards.

use std::sync::Arc;

use super::io::{DropReason, Effect};
use super::{Membership, Rejoin};
use crate::address::UniqueAddress;
use crate::membership::gossip::Gossip;
use crate::membership::member::MemberStatus;
use crate::membership::messages::Message;
use crate::time::Instant;

impl Membership {
    /// Tells `stranger` (neither a member here nor tombstoned) that this node does not know
    /// it, if this node would welcome its `Join`: otherwise the answer would send it nowhere.
    pub(super) fn tell_not_known(&mut self, stranger: &UniqueAddress, out: &mut Vec<Effect>) {
        if !self.can_welcome() {
            return;
        }
        let msg = Message::NotKnown {
            from: self.self_node.clone(),
            to: stranger.clone(),
        };
        self.send(stranger.address.clone(), msg, out);
    }

    /// A node says it does not know this incarnation. A member still Joining or WeaklyUp sends
    /// it a `Join` (and merges its `Welcome`), at most once per `retry-unsuccessful-join-after`
    /// and not before that long after becoming a member: right after a welcome, the other
    /// members may simply not have heard of it yet.
    pub(super) fn receive_not_known(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        to: &UniqueAddress,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        let joining = matches!(
            self.self_status(),
            Some(MemberStatus::Joining | MemberStatus::WeaklyUp)
        );
        // A member we know as not yet Up (or on its way out) proves nothing about the
        // cluster: it may be as lost as we are. A node we do not know at all may be a newer
        // incarnation of one we knew, which is worth asking.
        let vouches = self
            .gossip
            .member(from)
            .is_none_or(|m| m.status.leader_eligible());
        if *to != self.self_node || !self.is_member() || !joining || !vouches {
            return self.drop_input(DropReason::Unexpected, msg, out);
        }
        let wait = self.cfg.retry_unsuccessful_join_after;
        let since = self
            .rejoin
            .as_ref()
            .map_or(self.member_since, |r| r.sent_at);
        if now < since + wait {
            return self.drop_input(DropReason::Unexpected, msg, out);
        }
        self.rejoin = Some(Rejoin {
            sent_at: now,
            target: Some(from.clone()),
        });
        self.stats.rejoins += 1;
        let join = self.join_message();
        self.send(from.address.clone(), join, out);
    }

    /// The `Welcome` of the member this node joined again through: merged like gossip (never
    /// replacing what this node knows), then talked back, so that the member learns what
    /// this node knew too.
    pub(super) fn receive_rejoin_welcome(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        gossip: &Arc<Gossip>,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        let expected = self
            .rejoin
            .as_ref()
            .is_some_and(|r| r.target.as_ref() == Some(from));
        if !expected {
            return self.drop_input(DropReason::Unexpected, msg, out);
        }
        if !gossip.has_member(&self.self_node) {
            return self.drop_input(DropReason::NotInGossip, msg, out);
        }
        if let Some(r) = self.rejoin.as_mut() {
            r.target = None;
        }
        self.receive_gossip(now, from, Arc::clone(gossip), out);
    }
}
