//! Routing and buffering: where a message goes (delivered here, forwarded to its shard's home,
//! or buffered while that home is unknown), asking for homes, and delivering what was buffered
//! once a shard's home is known.

use super::envelope::{Buffered, Envelope};
use super::hosted::Hosted;
use super::{DropReason, HandOffMode, Region, RegionEffect};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// Whether [`route`](Self::route) would deliver a message for `shard` here at once (the
    /// shard runs here and the region has not stopped), with nothing else to do. A runtime may
    /// deliver such a message itself and skip `route`.
    ///
    /// Never with shard leases: each delivery first checks the lease's deadline.
    pub fn delivers_at_once(&self, shard: &ShardId) -> bool {
        !self.stopped && self.leases.is_none() && self.hosted.is_running(shard)
    }

    /// Whether `shard`'s entities may run here at `now`: the shard is hosted and takes
    /// deliveries (running, or waiting for its predecessor's last messages) and, with shard
    /// leases, its lease is held. Entities that start without a message (remembered ones, a
    /// restart after a failure) start only then; unlike
    /// [`delivers_at_once`](Self::delivers_at_once) this holds under leases too.
    pub fn runs_entities(&self, now: Instant, shard: &ShardId) -> bool {
        !self.stopped
            && self.is_hosting(shard)
            && (self.leases.is_none() || self.lease_token(now, shard).is_some())
    }

    /// Where [`route`](Self::route) would forward a message for `shard` from a local sender
    /// at once with nothing else to do: the shard's home is known and is another node, the
    /// shard is not hosted here and nothing waits for it in a buffer. A runtime may send such
    /// a message there itself and skip `route` (the hot path of a proxy). Messages from other
    /// nodes are not covered: `route` holds those rather than bounce them back.
    ///
    /// Never with shard leases, as [`delivers_at_once`](Self::delivers_at_once).
    pub fn forwards_at_once(&self, shard: &ShardId) -> Option<&UniqueAddress> {
        if self.stopped
            || self.leases.is_some()
            || self.hosted.contains_key(shard)
            || self.buffers.contains_key(shard)
        {
            return None;
        }
        self.homes.get(shard).filter(|home| **home != self.me)
    }

    /// Routes one message. `from` is the node it came from (`None`: a local sender).
    pub fn route(
        &mut self,
        now: Instant,
        from: Option<&UniqueAddress>,
        env: Envelope<M>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.stopped {
            out.push(RegionEffect::Dropped {
                env,
                reason: DropReason::RegionStopped,
            });
            return;
        }
        // The common case first, answered from a hash set: the shard runs here.
        if self.delivers_at_once(&env.shard) {
            out.push(RegionEffect::Deliver(env));
            return;
        }
        let Some(env) = self.admit(from, env, out) else {
            return;
        };
        if !self.lease_still_held(now, &env.shard, out) {
            // Lost just now: the shard waits for its lease again, and so does this message.
            return self.route(now, from, env, out);
        }
        match self.hosted.get_mut(&env.shard) {
            Some(Hosted::Running) => out.push(RegionEffect::Deliver(env)),
            Some(Hosted::AwaitingPredecessor {
                predecessor, held, ..
            }) => {
                if from == Some(&*predecessor) {
                    out.push(RegionEffect::Deliver(env));
                } else {
                    held.push_back(Buffered {
                        from: from.cloned(),
                        own: from.is_none(),
                        env,
                    });
                }
            }
            Some(Hosted::AwaitingLease { .. }) => {
                if self.lease_unavailable.contains(&env.shard) {
                    out.push(RegionEffect::Dropped {
                        env,
                        reason: DropReason::LeaseUnavailable,
                    });
                } else {
                    self.buffer(now, from.cloned(), env, out);
                }
            }
            Some(Hosted::HandingOff { .. }) => match self.settings.handoff_mode {
                HandOffMode::Forward => {
                    let own = from.is_none();
                    self.buffer_as(now, None, own, env, out)
                }
                HandOffMode::Drop => out.push(RegionEffect::Dropped {
                    env,
                    reason: DropReason::HandOff,
                }),
            },
            // Stopping for good: nothing will run it here, and nothing is handed on.
            Some(Hosted::Stopping { .. }) => out.push(RegionEffect::Dropped {
                env,
                reason: DropReason::RegionStopped,
            }),
            // A message another region sent here believing this is the shard's home: the
            // coordinator has (or had) just chosen us, and our cached home is older than the
            // sender's. Bouncing it back along our stale entry could put it behind the sender's
            // later messages; hold it and ask instead (HostShard or ShardHome settles it, in
            // arrival order).
            None => match self.homes.get(&env.shard) {
                Some(home)
                    if from.is_none()
                        && *home != self.me
                        && !self.buffers.contains_key(&env.shard) =>
                {
                    let home = home.clone();
                    self.tell_routing_here(&env.shard, &home, out);
                    out.push(RegionEffect::Forward { to: home, env })
                }
                _ => self.buffer(now, from.cloned(), env, out),
            },
        }
    }

    fn buffer(
        &mut self,
        now: Instant,
        from: Option<UniqueAddress>,
        env: Envelope<M>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let own = from.is_none();
        self.buffer_as(now, from, own, env, out);
    }

    /// Buffers `env` as coming from `from`, `own` when a sender on this node sent it.
    fn buffer_as(
        &mut self,
        _now: Instant,
        from: Option<UniqueAddress>,
        own: bool,
        env: Envelope<M>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.stopping_in_place {
            // No home will be asked for or waited for: the region stops once its own shards
            // have, and a buffer would only hold that up.
            out.push(RegionEffect::Dropped {
                env,
                reason: DropReason::RegionStopped,
            });
            return;
        }
        if self.buffered >= self.settings.buffer_size {
            out.push(RegionEffect::Dropped {
                env,
                reason: DropReason::BufferFull,
            });
            return;
        }
        let shard = env.shard.clone();
        let buffer = self.buffers.entry(shard.clone()).or_default();
        let first = buffer.is_empty();
        buffer.push_back(Buffered { from, env, own });
        self.buffered += 1;
        // A shard hosted here (handing off, or waiting for its lease) has no home to ask for.
        if first && !self.hosted.contains_key(&shard) {
            self.request_home(shard, out);
        }
    }

    /// Asks for the home of `shard` although no message waits for it, and keeps asking every
    /// retry interval until one is known (a proxy never hosts, so it does not ask).
    pub fn want_home(&mut self, shard: ShardId, out: &mut Vec<RegionEffect<M>>) {
        if self.proxy || self.stopped || self.homes.contains_key(&shard) {
            return;
        }
        if self.wanted.insert(shard.clone()) {
            self.request_home(shard, out);
        }
    }

    pub(super) fn request_home(&self, shard: ShardId, out: &mut Vec<RegionEffect<M>>) {
        if let Some(c) = &self.registration.coordinator {
            out.push(RegionEffect::Send {
                to: c.clone(),
                msg: Protocol::GetShardHome { shard },
            });
        }
    }

    pub(super) fn shard_home(
        &mut self,
        now: Instant,
        shard: ShardId,
        region: UniqueAddress,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        self.wanted.remove(&shard);
        if region == self.me {
            if !self.proxy && !self.hosted.contains_key(&shard) {
                // The coordinator says it lives here: host it (its HostShard may follow).
                if self.needs_lease(now, &shard) {
                    self.await_lease(now, shard, None, out);
                    return;
                }
                self.hosted.insert(shard.clone(), Hosted::Running);
                out.push(RegionEffect::ShardStarted(shard.clone()));
            }
            self.handover_pending.remove(&shard);
            self.flush_local(&shard, out);
            let _ = view;
            return;
        }
        if self.hosted.contains_key(&shard) {
            // We run it and the coordinator names another home: a stale answer (it moved here
            // after the answer was sent). Keep hosting; the coordinator's table is authoritative
            // and will hand it off explicitly if it must move.
            return;
        }
        if self.homes.insert(shard.clone(), region.clone()).as_ref() != Some(&region) {
            self.forget_told(&shard);
        }
        if let Some(buffer) = self.buffers.remove(&shard) {
            self.buffered -= buffer.len();
            self.tell_routing_here(&shard, &region, out);
            // Other nodes' messages for a shard marked here (its lease changed hands behind
            // this region's back, or it was taken from it) are not passed on: their senders
            // may already route to the next home directly (a takeover or a stand-in announces
            // it), and forwarded they could arrive after those senders' later messages (the
            // store-cut sweep's seed 4907). Each is dropped and reported, its sender told to
            // ask again; this node's own go on, in order. (Dropping every other node's message
            // that reached a region while it did not host the shard, not only marked ones,
            // dropped increments in a graceful rolling update: `rolling_update.rs`.)
            let buffer = if self.order_broken.contains_key(&shard) {
                self.keep_own_and_redirect(&shard, buffer, out)
            } else {
                buffer
            };
            for b in buffer {
                out.push(RegionEffect::Forward {
                    to: region.clone(),
                    env: b.env,
                });
            }
        }
        if self.handover_pending.remove(&shard) {
            out.push(RegionEffect::Send {
                to: region,
                msg: Protocol::HandOverDone { shard },
            });
        }
        let _ = now;
        self.check_shutdown(out);
    }

    /// Delivers (or holds) what was buffered for a shard that now runs here.
    fn flush_local(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        self.flush_local_after(shard, None, out);
    }

    /// Like [`flush_local`](Self::flush_local), but the predecessor's messages (its forwarded
    /// batch, which may have overtaken the `HostShard`) go first: everything else that was
    /// buffered is newer than anything the predecessor forwards for the same sender.
    pub(super) fn flush_local_after(
        &mut self,
        shard: &ShardId,
        predecessor: Option<&UniqueAddress>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if matches!(self.hosted.get(shard), Some(Hosted::AwaitingLease { .. })) {
            return; // delivered once the lease is held
        }
        let Some(buffer) = self.buffers.remove(shard) else {
            return;
        };
        self.buffered -= buffer.len();
        let (first, rest): (Vec<Buffered<M>>, Vec<Buffered<M>>) = buffer
            .into_iter()
            .partition(|b| predecessor.is_some() && b.from.as_ref() == predecessor);
        out.extend(first.into_iter().map(|b| RegionEffect::Deliver(b.env)));
        match self.hosted.get_mut(shard) {
            Some(Hosted::AwaitingPredecessor { held, .. }) => held.extend(rest),
            _ => out.extend(rest.into_iter().map(|b| RegionEffect::Deliver(b.env))),
        }
    }
}
