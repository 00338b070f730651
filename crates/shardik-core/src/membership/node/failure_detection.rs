//! Failure detection: heartbeats to the ring's receivers, the ring kept in step with the
//! members, and this node's reachability verdicts.

use std::sync::Arc;

use super::Membership;
use super::io::Effect;
use crate::address::{Address, UniqueAddress};
use crate::membership::gossip::Gossip;
use crate::membership::member::MemberStatus;
use crate::membership::messages::Message;
use crate::membership::reachability::ReachabilityStatus;
use crate::time::Instant;

impl Membership {
    /// Answers a heartbeat, so that the sender's detector hears from us.
    pub(super) fn answer_heartbeat(
        &mut self,
        from: &UniqueAddress,
        seq: u64,
        out: &mut Vec<Effect>,
    ) {
        let reply = Message::HeartbeatRsp {
            from: self.self_node.clone(),
            seq,
        };
        self.send(from.address.clone(), reply, out);
    }

    pub(super) fn heartbeat_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if !self.is_member() {
            return;
        }
        self.heartbeat_seq += 1;
        let receivers = self.heartbeat.active_receivers();
        for r in receivers {
            if self.heartbeat_started.insert(r.clone()) {
                let due = now + self.cfg.failure_detector.expected_response_after;
                self.first_heartbeat_due.insert((due, r.clone()));
            }
            self.stats.heartbeats_sent += 1;
            let msg = Message::Heartbeat {
                from: self.self_node.clone(),
                seq: self.heartbeat_seq,
            };
            self.send(r.address.clone(), msg, out);
        }
    }

    /// A connection to `address` was refused ([`Input::PeerRefused`](super::Input)): the member
    /// there (other than this node) is unreachable from here now, and stays so until it
    /// answers a heartbeat. Not a member on its way out: one that leaves closes its port once
    /// it has exited, which is no failure, and a downed one is decided already.
    pub(super) fn peer_refused(&mut self, now: Instant, address: &Address, out: &mut Vec<Effect>) {
        if !self.is_member() {
            return;
        }
        let me = self.self_node.clone();
        let Some(node) = self
            .gossip
            .members
            .values()
            .find(|m| {
                m.addr.address == *address
                    && m.addr != me
                    && !matches!(
                        m.status,
                        MemberStatus::Leaving
                            | MemberStatus::Exiting
                            | MemberStatus::Down
                            | MemberStatus::Removed
                    )
            })
            .map(|m| m.addr.clone())
        else {
            return;
        };
        self.stats.peers_refused += 1;
        self.refused.insert(node.clone());
        if self.gossip.reachability.is_reachable_from(&me, &node) {
            let mut g = Gossip::clone(&self.gossip);
            g.reachability.unreachable(&me, &node);
            self.update_gossip(now, g, out);
        }
    }

    /// The reaper: marks members our detector gave up on (or whose port refused a connection)
    /// as unreachable, and those we marked that it hears again as reachable. A node this one
    /// does not heartbeat has no detector history and counts as available, so only this
    /// node's heartbeat receivers (and refusing members) are ever marked by it.
    pub(super) fn reap_unreachable(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if !self.is_member() {
            return;
        }
        // A removed member's refusal is no longer evidence of anything: forget it, so that the
        // set stays bounded by the members.
        let members = &self.gossip.members;
        self.refused.retain(|n| members.contains_key(n));
        let me = self.self_node.clone();
        let r = &self.gossip.reachability;
        let fd = self.heartbeat.fd();
        let newly_unreachable: Vec<UniqueAddress> = self
            .gossip
            .members
            .keys()
            .filter(|n| {
                **n != me
                    && r.is_reachable_from(&me, n)
                    && (!fd.is_available(n, now) || self.refused.contains(*n))
            })
            .cloned()
            .collect();
        let again_reachable: Vec<UniqueAddress> = r
            .unreachable_from(&me)
            .into_iter()
            .filter(|n| {
                r.observers()
                    .get(&me)
                    .and_then(|rows| rows.subjects.get(n))
                    .is_some_and(|s| *s == ReachabilityStatus::Unreachable)
                    && fd.is_available(n, now)
                    && !self.refused.contains(n)
            })
            .collect();
        if newly_unreachable.is_empty() && again_reachable.is_empty() {
            return;
        }
        let mut g = Gossip::clone(&self.gossip);
        for n in &newly_unreachable {
            g.reachability.unreachable(&me, n);
        }
        for n in &again_reachable {
            g.reachability.reachable(&me, n);
        }
        self.update_gossip(now, g, out);
    }

    /// Keeps the heartbeat ring in step with the members and their reachability. Most state
    /// changes (seen sets, statuses) leave both alone, so the common path only compares.
    pub(super) fn sync_heartbeat_ring(&mut self, now: Instant) {
        let g = Arc::clone(&self.gossip);
        if !Arc::ptr_eq(&self.ring_members, &g.members) {
            // Walk old and new tables together: no copies, O(members) only when the table changed.
            let old = std::mem::replace(&mut self.ring_members, Arc::clone(&g.members));
            let mut a = old.keys().peekable();
            let mut b = g.members.keys().peekable();
            loop {
                match (a.peek(), b.peek()) {
                    (None, None) => break,
                    (Some(&x), None) => {
                        self.heartbeat.remove_member(x, now);
                        self.heartbeat_started.remove(x);
                        a.next();
                    }
                    (None, Some(&y)) => {
                        self.heartbeat.add_member(y, now);
                        b.next();
                    }
                    (Some(&x), Some(&y)) => match x.cmp(y) {
                        std::cmp::Ordering::Less => {
                            self.heartbeat.remove_member(x, now);
                            self.heartbeat_started.remove(x);
                            a.next();
                        }
                        std::cmp::Ordering::Greater => {
                            self.heartbeat.add_member(y, now);
                            b.next();
                        }
                        std::cmp::Ordering::Equal => {
                            a.next();
                            b.next();
                        }
                    },
                }
            }
        }
        let unreachable = g.unreachable_members();
        if unreachable != self.ring_unreachable {
            for n in unreachable.difference(&self.ring_unreachable) {
                if g.has_member(n) {
                    self.heartbeat.unreachable_member(n, now);
                }
            }
            for n in self.ring_unreachable.difference(&unreachable) {
                if g.has_member(n) {
                    self.heartbeat.reachable_member(n, now);
                }
            }
            self.ring_unreachable = unreachable;
        }
    }
}
