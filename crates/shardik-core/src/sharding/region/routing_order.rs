//! Which nodes' messages a shard may take after its lease changed hands behind this region's
//! back: per-sender order across a takeover.
//!
//! When the coordinator takes a shard from a silent node (`coordinator/takeover.rs`), no
//! hand-off drains what other regions sent there: messages may still be on their way to the
//! old home, sent before their senders learnt the new one, while their senders' later messages
//! already run at the new home. The old home must never deliver such a message, nor pass it on
//! to the new home. The same holds whenever this region takes a shard's lease back after
//! another node held it in between (`region/leases.rs`).
//!
//! So such a region *marks* the shard, with a number of its own (the mark's nonce). From then
//! on it takes that shard's messages from another node only after that node has said, quoting
//! the nonce, that it routes them here ([`Protocol::RoutingHere`]). A node learns the nonce
//! only from this region's [`Protocol::NotHere`], the answer to a message this region dropped
//! (reported as `lease-lapsed`): it forgets this region as the shard's home, asks the
//! coordinator again, and when it is told this region once more, says so with the nonce
//! before its next message. Everything it sent before that `RoutingHere` (one connection keeps
//! its order) was sent before it heard of the mark, so it is dropped; everything after, it
//! sent knowing this region is the home again. A `RoutingHere` sent before the mark quotes an
//! older nonce (or none) and admits nothing.
//!
//! Under shard leases a region tells every home it forwards a shard's messages to that it
//! routes there, once per home it learns, quoting the nonce it last heard from that home for
//! that shard, if any.

use std::collections::VecDeque;

use super::envelope::{Buffered, Envelope};
use super::hosted::Hosted;
use super::order_mark::Mark;
use super::{DropReason, Region, RegionEffect};
use crate::membership::UniqueAddress;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;

/// This node's own senders' messages from `queue`, in order; what other nodes sent is dropped,
/// each reported (`lease-lapsed`): after the shard's lease changed hands behind this region's
/// back it may be older than what those senders' later messages met elsewhere.
pub(super) fn keep_own<M>(
    queue: VecDeque<Buffered<M>>,
    out: &mut Vec<RegionEffect<M>>,
) -> VecDeque<Buffered<M>> {
    let mut own = VecDeque::with_capacity(queue.len());
    for b in queue {
        if b.own {
            own.push_back(b);
        } else {
            out.push(RegionEffect::Dropped {
                env: b.env,
                reason: DropReason::LeaseLapsed,
            });
        }
    }
    own
}

impl<M> Region<M> {
    /// What waited here for `shard` while this region did not run it for its senders (see
    /// `Region::shard_home`): this node's own messages, in order. Each other node's is dropped
    /// (reported) and its sender told, once, that this region is not the shard's home
    /// (`NotHere`, quoting the shard's mark if any), so that it asks the coordinator rather
    /// than sending here again.
    pub(super) fn keep_own_and_redirect(
        &mut self,
        shard: &ShardId,
        queue: VecDeque<Buffered<M>>,
        out: &mut Vec<RegionEffect<M>>,
    ) -> VecDeque<Buffered<M>> {
        let senders: std::collections::BTreeSet<UniqueAddress> = queue
            .iter()
            .filter(|b| !b.own)
            .filter_map(|b| b.from.clone())
            .collect();
        let own = keep_own(queue, out);
        let nonce = self.order_broken.get(shard).map_or(0, |mark| mark.nonce);
        for to in senders {
            out.push(RegionEffect::Send {
                to,
                msg: Protocol::NotHere {
                    shard: shard.clone(),
                    nonce,
                },
            });
        }
        own
    }

    /// Before forwarding a message for `shard` to `home`: under leases, tell `home` this
    /// region routes there, unless it was told since it became the cached home.
    pub(super) fn tell_routing_here(
        &mut self,
        shard: &ShardId,
        home: &UniqueAddress,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.leases.is_none() || self.told.get(shard) == Some(home) {
            return;
        }
        self.told.insert(shard.clone(), home.clone());
        let nonce = match self.nonces.get(shard) {
            Some((from, nonce)) if from == home => *nonce,
            _ => 0,
        };
        out.push(RegionEffect::Send {
            to: home.clone(),
            msg: Protocol::RoutingHere {
                shard: shard.clone(),
                nonce,
            },
        });
    }

    /// `shard`'s cached home changed or was forgotten: the next home is told anew.
    pub(super) fn forget_told(&mut self, shard: &ShardId) {
        self.told.remove(shard);
    }

    /// `shard` was taken from this region, or its lease held by another node in between:
    /// messages from other nodes are taken only after their `RoutingHere` quoting this mark.
    pub(super) fn mark_order_broken(&mut self, shard: &ShardId) {
        if self.leases.is_none() {
            return;
        }
        self.marks_made += 1;
        self.order_broken.insert(
            shard.clone(),
            Mark {
                nonce: self.marks_made,
                routing: Default::default(),
            },
        );
    }

    /// This region was not run for longer than its leases could last (`gap`): a pause, a
    /// frozen process. Meanwhile its node may have been removed, or its shards taken, and
    /// another node may have held their leases and delivered newer messages from the same
    /// senders. Every hosted shard is marked (and what other nodes sent that waits here is
    /// dropped): only messages sent after their senders heard of the mark are taken. A node
    /// that was removed learns it soon after; until then it delivers nothing stale.
    pub fn woke_after(&mut self, gap: std::time::Duration, out: &mut Vec<RegionEffect<M>>) {
        let Some(timing) = self.settings.lease else {
            return;
        };
        if gap <= timing.ttl.saturating_sub(timing.operation_timeout) {
            return;
        }
        let hosted: Vec<ShardId> = self.hosted.keys().cloned().collect();
        for shard in hosted {
            self.mark_order_broken(&shard);
            // What waited for a predecessor's marker is as old as what waited in the buffer.
            if let Some(Hosted::AwaitingPredecessor { held, .. }) = self.hosted.get_mut(&shard) {
                *held = keep_own(std::mem::take(held), out);
            }
            let Some(buffer) = self.buffers.remove(&shard) else {
                continue;
            };
            self.buffered -= buffer.len();
            let own = keep_own(buffer, out);
            if !own.is_empty() {
                self.buffered += own.len();
                self.buffers.insert(shard, own);
            }
        }
    }

    /// `from` routes `shard`'s messages here from now on, having heard of mark `nonce`.
    pub(super) fn routing_here(&mut self, from: &UniqueAddress, shard: &ShardId, nonce: u64) {
        if let Some(mark) = self.order_broken.get_mut(shard)
            && mark.nonce == nonce
        {
            mark.routing.insert(from.clone());
        }
    }

    /// `from` dropped this region's message for `shard` (its mark `nonce`): forget it as the
    /// home, and quote the nonce when routing there again.
    ///
    /// Only an answer from the home this region routes the shard to counts: another is stale
    /// (or invented), and remembering it would let any member grow the table without bound.
    pub(super) fn not_here(&mut self, from: &UniqueAddress, shard: &ShardId, nonce: u64) {
        if self.homes.get(shard) != Some(from) {
            return;
        }
        self.homes.remove(shard);
        self.told.remove(shard);
        self.nonces.insert(shard.clone(), (from.clone(), nonce));
    }

    /// A message for a marked shard from a node that has not routed here since it heard of
    /// the mark: it may have been sent before, so it is dropped (`None`) and the sender told.
    pub(super) fn admit(
        &mut self,
        from: Option<&UniqueAddress>,
        env: Envelope<M>,
        out: &mut Vec<RegionEffect<M>>,
    ) -> Option<Envelope<M>> {
        let Some(sender) = from else {
            return Some(env);
        };
        match self.order_broken.get(&env.shard) {
            Some(mark) if !mark.routing.contains(sender) => {
                let shard = env.shard.clone();
                let nonce = mark.nonce;
                out.push(RegionEffect::Dropped {
                    env,
                    reason: DropReason::LeaseLapsed,
                });
                out.push(RegionEffect::Send {
                    to: sender.clone(),
                    msg: Protocol::NotHere { shard, nonce },
                });
                None
            }
            _ => Some(env),
        }
    }
}

#[cfg(test)]
mod tests;
