//! Store calls reaching the store and its answers reaching their nodes, one method per kind of
//! call ([`StoreOp`]): journal writes, snapshot steps, lease calls and reads, the crash points
//! they may hit, and the restart of a node a crash point took down.

use std::time::Duration;

use shardik_core::Instant;
use shardik_core::lease::{StoreLease, owner_name};
use shardik_core::sharding::coordinator::LeasesRead;
use shardik_core::sharding::{LeaseAnswer, LeaseCall, LeaseKey, LeaseRequest, ShardId};
use shardik_persistence::{AtomicWrite, LeaseAcquired, Store, WriteRefused, WriteResult};

use super::{ShardingWorld, Slot};
use crate::sharding::durable::{SnapshotTask, at_once};
use crate::sharding::store::{Caller, SimStore, StoreOp};
use crate::world::{NodeId, World};

impl ShardingWorld {
    /// A store call arrives (see [`crate::sharding::store`]).
    pub(super) fn store_op(&mut self, op: StoreOp) {
        let now = self.now();
        let Some(st) = self.store.as_mut() else {
            return;
        };
        // A call from a node cut off from the store does not reach it: lease calls and reads
        // are lost (their callers count them failed after the operation timeout), journal
        // writes and snapshot steps arrive once the cut ends.
        let caller = match &op {
            StoreOp::Append { from, .. }
            | StoreOp::Snapshot { from, .. }
            | StoreOp::ProducerCall { from, .. }
            | StoreOp::Lease { from, .. }
            | StoreOp::ReadLeases { from, .. } => Some(from.id),
            _ => None,
        };
        if let Some(until) = caller.and_then(|id| st.cut_until(id, now)) {
            match op {
                // A producer's queue is written like a journal: its calls wait too.
                StoreOp::Append { .. }
                | StoreOp::Snapshot { .. }
                | StoreOp::ProducerCall { .. } => st.schedule(until, op),
                _ => {}
            }
            return;
        }
        match op {
            StoreOp::Append { from, token, write } => self.write_arrives(from, token, write),
            StoreOp::Answer { to, token, result } => self.write_answered(to, token, result),
            StoreOp::Snapshot { from, task, step } => self.snapshot_step_arrives(from, task, step),
            StoreOp::Lease {
                from,
                kind,
                request,
            } => self.lease_call_arrives(from, kind, request),
            StoreOp::ReadLeases {
                from,
                kind,
                id,
                shards,
            } => self.lease_read_arrives(from, kind, id, shards),
            StoreOp::LeasesRead {
                to,
                kind,
                id,
                answer,
            } => self.leases_read_answered(to, kind, id, answer),
            StoreOp::LeaseAnswer {
                to,
                kind,
                key,
                id,
                answer,
            } => self.lease_answered(to, kind, key, id, answer),
            StoreOp::ProducerCall {
                from,
                incarnation,
                token,
                call,
            } => self.producer_call_arrives(from, incarnation, token, call),
            StoreOp::ProducerAnswer {
                to,
                incarnation,
                token,
                answer,
            } => self.producer_call_answered(to, incarnation, token, answer),
            StoreOp::Crash { node } => self.crash_with_write_in_flight(node),
            StoreOp::Restart { id } => self.restart_after_crash_point(id),
        }
    }

    /// The store, which every store call needs ([`store_op`](Self::store_op) checked it is
    /// there); borrowed alone, so that the rest of the world stays at hand beside it.
    pub(super) fn store_of(store: &mut Option<SimStore>) -> &mut SimStore {
        store.as_mut().expect("store calls run only with a store")
    }

    /// A journal write reaches the store: it commits (or is refused) even when its node has
    /// crashed since, if it had left; the answer goes back unless a crash point takes the node
    /// down between the commit and the reply.
    fn write_arrives(&mut self, from: Caller, token: u64, write: AtomicWrite) {
        let now = self.now();
        let current = self.is_current(from.id, &from.node);
        let st = Self::store_of(&mut self.store);
        if !current && !st.had_left() {
            st.stats.lost_in_crash += 1;
            return;
        }
        let result = match at_once(st.store.append(vec![write.clone()])) {
            Ok(mut r) if r.len() == 1 => r.pop().expect("one"),
            other => panic!("the memory store failed a write: {other:?}"),
        };
        if result.is_ok() {
            st.stats.committed += 1;
            if !current {
                st.stats.committed_after_crash += 1;
            }
            self.durability.committed(now, &write);
            self.delivery.committed(now, &write);
        } else {
            st.stats.refused += 1;
            if matches!(result, Err(WriteRefused::Fenced { .. })) {
                st.stats.fenced_writes += 1;
            }
        }
        if !current {
            return;
        }
        if st.crash_point(st.spec.crash_points.before_reply) {
            st.stats.crashes_before_reply += 1;
            st.restart_later(now, from.id);
            self.note(
                Some(from.id),
                "crash point: committed, before the reply".into(),
            );
            self.crash(from.id);
        } else {
            st.answer(now, from, token, result);
        }
    }

    /// The store's answer to a journal write reaches its entity (after the pause, if its node
    /// is paused; never, if that incarnation is gone).
    fn write_answered(&mut self, to: Caller, token: u64, result: WriteResult) {
        let now = self.now();
        if !self.is_current(to.id, &to.node) {
            return;
        }
        if let Some(until) = self.world.paused_until(to.id) {
            let st = Self::store_of(&mut self.store);
            st.schedule(until, StoreOp::Answer { to, token, result });
            return;
        }
        self.in_layer(to.id, |layer, out| {
            layer.write_done(now, token, result, out)
        });
    }

    /// Step `step` of a snapshot reaches the store: it runs even when its node has crashed
    /// since, if it had left, but only the steps of a live node go on to the next one.
    fn snapshot_step_arrives(&mut self, from: Caller, task: SnapshotTask, step: u8) {
        let now = self.now();
        let current = self.is_current(from.id, &from.node);
        let st = Self::store_of(&mut self.store);
        let last = if task.plan.delete_events_to.is_some() {
            2
        } else {
            1
        };
        if !current && !st.had_left() {
            st.stats.snapshot_steps_cut += usize::from(last - step + 1);
            return;
        }
        let (pid, plan) = (&task.pid, &task.plan);
        let done = match step {
            0 => {
                let snapshot = shardik_persistence::Snapshot {
                    seq: plan.seq,
                    payload: task.payload.clone(),
                };
                st.stats.snapshots_saved += 1;
                at_once(st.store.save_snapshot(pid, snapshot))
            }
            1 => at_once(
                st.store
                    .delete_snapshots_below(pid, plan.delete_snapshots_below),
            ),
            _ => at_once(
                st.store
                    .delete_events_to(pid, plan.delete_events_to.unwrap_or(0)),
            ),
        };
        if let Err(e) = done {
            panic!("the memory store failed a snapshot step: {e}");
        }
        if step == last {
            return;
        }
        if !current {
            st.stats.snapshot_steps_cut += usize::from(last - step);
        } else if st.crash_point(st.spec.crash_points.during_snapshot) {
            st.stats.crashes_during_snapshot += 1;
            st.stats.snapshot_steps_cut += usize::from(last - step);
            st.restart_later(now, from.id);
            self.note(
                Some(from.id),
                format!("crash point: after snapshot step {step}"),
            );
            self.crash(from.id);
        } else {
            st.snapshot_step(now, from, task, step + 1);
        }
    }

    /// A lease call (acquire, renew, release) reaches the store, at the store's clock set to
    /// now; the answer goes back to a caller that still runs (a release has none).
    fn lease_call_arrives(&mut self, from: Caller, kind: usize, request: LeaseRequest<LeaseKey>) {
        let now = self.now();
        let current = self.is_current(from.id, &from.node);
        let st = Self::store_of(&mut self.store);
        if !current && !st.had_left() {
            return;
        }
        st.set_clock(now);
        let Some(layer) = self.slots[from.id].layer.as_ref() else {
            return;
        };
        let name = layer.lease_name(kind, &request.key);
        let owner = owner_name(&from.node);
        let ttl = self.cfg.leases().expect("lease calls only with leases").ttl;
        let answer = match request.call {
            LeaseCall::Acquire => match at_once(st.store.acquire_lease(&name, &owner, ttl)) {
                Ok(LeaseAcquired::Granted(g)) => {
                    st.stats.leases_granted += 1;
                    LeaseAnswer::Granted { token: g.token }
                }
                Ok(LeaseAcquired::HeldByOther { .. }) => {
                    st.stats.leases_held_by_other += 1;
                    LeaseAnswer::HeldByOther
                }
                Err(e) => panic!("the memory store failed a lease call: {e}"),
            },
            LeaseCall::Renew { token } => {
                match at_once(st.store.renew_lease(&name, &owner, token, ttl)) {
                    Ok(true) => LeaseAnswer::Renewed,
                    Ok(false) => {
                        st.stats.renewals_refused += 1;
                        LeaseAnswer::Refused
                    }
                    Err(e) => panic!("the memory store failed a lease call: {e}"),
                }
            }
            LeaseCall::Release { token } => {
                if let Err(e) = at_once(st.store.release_lease(&name, &owner, token)) {
                    panic!("the memory store failed a lease release: {e}");
                }
                return;
            }
        };
        if current {
            let (key, id) = (request.key, request.id);
            st.answer_lease(now, from, kind, key, id, answer);
        }
    }

    /// A read of shard leases reaches the store (lost when its caller no longer runs). With
    /// `reads_say_every_lease_lapsed` the store lies, as a store whose clock runs ahead would.
    fn lease_read_arrives(&mut self, from: Caller, kind: usize, id: u64, shards: Vec<ShardId>) {
        let now = self.now();
        let st = Self::store_of(&mut self.store);
        st.set_clock(now);
        let Some(layer) = self.slots[from.id]
            .layer
            .as_ref()
            .filter(|l| *l.me() == from.node)
        else {
            return;
        };
        let rows = shards
            .into_iter()
            .map(|shard| {
                let name = layer.lease_name(kind, &LeaseKey::Shard(shard.clone()));
                let row = match at_once(st.store.read_lease(&name)) {
                    Ok(row) => row,
                    Err(e) => panic!("the memory store failed a lease read: {e}"),
                };
                let lie = st.spec.reads_say_every_lease_lapsed;
                let row = row.map(|info| StoreLease {
                    owner: info.owner,
                    token: info.token,
                    time_left: if lie { Duration::ZERO } else { info.time_left },
                });
                (shard, row)
            })
            .collect();
        st.answer_read(now, from, kind, id, Ok(rows));
    }

    /// The store's answer to a read of shard leases reaches its node.
    fn leases_read_answered(&mut self, to: Caller, kind: usize, id: u64, answer: LeasesRead) {
        let now = self.now();
        match answer_due(&self.slots, &self.world, &to) {
            Due::Never => {}
            Due::After(until) => {
                let op = StoreOp::LeasesRead {
                    to,
                    kind,
                    id,
                    answer,
                };
                Self::store_of(&mut self.store).schedule(until, op);
            }
            Due::Now => self.in_layer(to.id, |layer, out| {
                layer.leases_read(now, kind, id, answer, out)
            }),
        }
    }

    /// The store's answer to a lease call reaches its node.
    fn lease_answered(
        &mut self,
        to: Caller,
        kind: usize,
        key: LeaseKey,
        id: u64,
        answer: LeaseAnswer,
    ) {
        let now = self.now();
        match answer_due(&self.slots, &self.world, &to) {
            Due::Never => {}
            Due::After(until) => {
                let op = StoreOp::LeaseAnswer {
                    to,
                    kind,
                    key,
                    id,
                    answer,
                };
                Self::store_of(&mut self.store).schedule(until, op);
            }
            Due::Now => self.in_layer(to.id, |layer, out| {
                layer.lease_answered(now, kind, key, id, answer, out)
            }),
        }
    }

    /// The crash point "write in flight" takes its node down (if that incarnation still runs);
    /// it starts again after the configured time.
    fn crash_with_write_in_flight(&mut self, node: Caller) {
        let now = self.now();
        if self.is_current(node.id, &node.node) {
            Self::store_of(&mut self.store).restart_later(now, node.id);
            self.note(Some(node.id), "crash point: a write in flight".into());
            self.crash(node.id);
        }
    }

    /// A node a crash point took down starts again and joins the members still running.
    pub(super) fn restart_after_crash_point(&mut self, id: NodeId) {
        if self.world.is_alive(id) {
            return;
        }
        self.restart(id);
        let seeds: Vec<NodeId> = self
            .world
            .alive_nodes()
            .into_iter()
            .filter(|&j| j != id && self.world.core(j).is_member())
            .take(3)
            .collect();
        if seeds.is_empty() {
            // Every member is gone: it forms a cluster of its own, as the first of the
            // configured seeds would, and the others that restart join it (otherwise
            // nodes restarted earlier would wait for members that no longer exist).
            self.join(id, &[id]);
        } else {
            self.join(id, &seeds);
        }
    }
}

/// When the store's answer to `to` can be handed over.
pub(super) enum Due {
    /// Never: that incarnation is gone.
    Never,
    /// Once its node's pause ends.
    After(Instant),
    /// Now.
    Now,
}

/// When the store's answer to `to` can be handed over: never to an incarnation that is gone,
/// after the pause to a paused node, now otherwise.
pub(super) fn answer_due(slots: &[Slot], world: &World, to: &Caller) -> Due {
    if slots[to.id]
        .layer
        .as_ref()
        .is_none_or(|l| *l.me() != to.node)
    {
        return Due::Never;
    }
    match world.paused_until(to.id) {
        Some(until) => Due::After(until),
        None => Due::Now,
    }
}
