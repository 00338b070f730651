//! What a node's sharding layer asks for ([`Output`]), carried out: messages onto the
//! sharding network, store calls to the store, and every event to the checkers, the ledger
//! and the timeline.

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::CoordinatorEvent;

use super::{HostEvent, ShardingWorld};
use crate::sharding::durable::SnapshotTask;
use crate::sharding::messages::Output;
use crate::sharding::net::Packet;
use crate::sharding::node::ShardNode;
use crate::sharding::store::Caller;
use crate::world::NodeId;

impl ShardingWorld {
    /// Routes, checks and records what node `id`'s layer did, then reschedules it.
    pub(super) fn dispatch(&mut self, id: NodeId, out: &mut Vec<Output>) {
        let Some(me) = self.slots[id].layer.as_ref().map(|l| l.me().clone()) else {
            out.clear();
            return;
        };
        self.dispatch_as(id, me, out);
        self.reschedule(id);
    }

    /// [`dispatch`](Self::dispatch) as incarnation `me`, without rescheduling: a layer being
    /// killed is out of its slot already, and what it reports last is still its own.
    pub(super) fn dispatch_as(&mut self, id: NodeId, me: UniqueAddress, out: &mut Vec<Output>) {
        let now = self.now();
        for o in out.drain(..) {
            match o {
                Output::Send { kind, to, wire } => {
                    let Some(&to_id) = self.by_node.get(&to) else {
                        continue;
                    };
                    let p = Packet {
                        from_id: id,
                        from: me.clone(),
                        to_id,
                        to,
                        kind,
                        wire,
                    };
                    let latency = self.world.config().latency;
                    self.net.send(now, latency, &mut self.rng, p);
                }
                Output::Delivered { kind, env } => {
                    self.fence_stale_copies(kind, &env.shard);
                    self.checker.delivered(now, kind, &me, &env);
                    self.ledger.delivered(env.msg.id, now, &me);
                }
                Output::EntityStarted {
                    kind,
                    shard,
                    entity,
                } => {
                    self.fence_stale_copies(kind, &shard);
                    self.checker.entity_started(now, kind, &me, &shard, &entity);
                    if self.cfg.remembers() {
                        self.ever_started.insert((kind, shard, entity));
                    }
                }
                Output::EntityStopped {
                    kind,
                    shard,
                    entity,
                } => self.checker.entity_stopped(kind, &me, &shard, &entity),
                Output::Handled { kind, msg, entity } => {
                    self.checker.handled(now, kind, &me, msg, &entity)
                }
                Output::Unhandled { msg, why, .. } => {
                    self.checker.unhandled(now, &me, msg, &why);
                    self.ledger.failed(msg);
                }
                Output::StrayTick {
                    entity,
                    set_by,
                    got,
                    ..
                } => self.checker.stray_tick(now, &me, &entity, set_by, got),
                Output::ShardStarted { kind, shard } => {
                    self.fence_stale_copies(kind, &shard);
                    self.checker.shard_started(now, kind, &me, &shard);
                    self.note(Some(id), format!("kind {kind}: shard {shard} started"));
                    self.host_events.push(HostEvent {
                        at: now,
                        node: id,
                        kind,
                        shard,
                        started: true,
                    });
                }
                Output::ShardStopped { kind, shard } => {
                    self.checker.shard_stopped(now, kind, &me, &shard);
                    self.note(Some(id), format!("kind {kind}: shard {shard} stopped"));
                    self.host_events.push(HostEvent {
                        at: now,
                        node: id,
                        kind,
                        shard,
                        started: false,
                    });
                }
                Output::Dropped { env, reason, .. } => {
                    self.ledger.dropped(env.msg.id, now, reason);
                }
                Output::Coordinator { kind, running } => {
                    let what = if running { "started" } else { "stopped" };
                    self.note(Some(id), format!("kind {kind}: coordinator {what}"));
                }
                Output::CoordinatorEvent { kind, event } => match event {
                    CoordinatorEvent::ConflictingClaim {
                        shard,
                        home,
                        claimant,
                    } => self
                        .checker
                        .conflicting_claim(now, kind, &me, &shard, &home, &claimant),
                    CoordinatorEvent::ShardLeasesLapsed { region, shards } => {
                        self.check_taken(kind, &me, &region, &shards);
                        let what = format!("kind {kind}: shards {shards:?} taken from {region}");
                        self.note(Some(id), what);
                    }
                    CoordinatorEvent::State(_) => {}
                    other => self.note(Some(id), format!("kind {kind}: {other:?}")),
                },
                Output::LostWithNode { ids } => {
                    for msg in ids {
                        self.ledger.record_lost_with_node(msg);
                    }
                }
                Output::RegionStopped { kind } => {
                    self.note(Some(id), format!("kind {kind}: region stopped"));
                }
                Output::Lease { kind, request } => {
                    let from = Caller {
                        id,
                        node: me.clone(),
                    };
                    if let Some(store) = self.store.as_mut() {
                        store.send_lease(now, from, kind, request);
                    }
                }
                Output::ReadLeases {
                    kind,
                    id: read,
                    shards,
                } => {
                    let from = Caller {
                        id,
                        node: me.clone(),
                    };
                    if let Some(store) = self.store.as_mut() {
                        store.send_read(now, from, kind, read, shards);
                    }
                }
                Output::LeaseNote { kind, what } => {
                    self.note(Some(id), format!("kind {kind}: {what}"));
                }
                Output::JournalWrite { token, write } => {
                    let from = Caller {
                        id,
                        node: me.clone(),
                    };
                    if let Some(store) = self.store.as_mut() {
                        store.send_write(now, from, token, write);
                    }
                }
                Output::Acked {
                    pid,
                    msg,
                    first_seq,
                    last_seq,
                } => {
                    self.ledger.acked(msg.id);
                    // A reliably delivered command that persisted nothing wrote its mark
                    // alone: no event to find (the delivery checker saw the mark).
                    if let Some(store) = &self.store
                        && first_seq <= last_seq
                    {
                        let store = &store.store;
                        let event = msg.event_id();
                        self.durability
                            .acked(now, store, &pid, event, first_seq, last_seq);
                    }
                }
                Output::Judged { msg } => {
                    self.ledger.answered(msg.id);
                    self.delivery.judged();
                }
                Output::CommandFailed { msg, why } => {
                    self.note(Some(id), format!("message {} failed: {why}", msg.id));
                    self.ledger.failed(msg.id);
                }
                Output::Recovered { pid, seq, state } => {
                    self.durability.recovered(now, &pid, seq, &state);
                }
                Output::SnapshotDue { pid, plan, payload } => {
                    let from = Caller {
                        id,
                        node: me.clone(),
                    };
                    let task = SnapshotTask { pid, plan, payload };
                    if let Some(store) = self.store.as_mut() {
                        store.snapshot_step(now, from, task, 0);
                    }
                }
            }
        }
    }

    /// Runs `f` on node `id`'s sharding layer (which must be there) and carries out what it
    /// asks for.
    pub(super) fn in_layer(
        &mut self,
        id: NodeId,
        f: impl FnOnce(&mut ShardNode, &mut Vec<Output>),
    ) {
        let layer = self.slots[id].layer.as_mut().expect("current");
        let mut out = std::mem::take(&mut self.scratch);
        f(layer, &mut out);
        self.dispatch(id, &mut out);
        self.scratch = out;
    }
}
