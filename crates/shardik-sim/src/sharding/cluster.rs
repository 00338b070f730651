//! [`ShardingWorld`]: the membership [`World`] with a sharding layer on every node, one
//! virtual clock for both, the sharding network, simulated clients and the checker.
//!
//! The world's membership events and the sharding layer's events (messages, timers, client
//! bursts) are taken in time order; on a tie membership goes first. After every step each
//! node's layer is brought up to date with its membership core: a new incarnation gets a fresh
//! layer, a node that died (crash, or shutdown after being downed or leaving) loses its
//! entities and shards at that instant, and the view the node core gives when its state changed is fed to the kinds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::lease::{StoreLease, owner_name};
use shardik_core::membership::{MemberStatus, MembershipConfig, UniqueAddress};
use shardik_core::sharding::{
    CoordinatorEvent, EntityId, Envelope, LeaseAnswer, LeaseCall, LeaseKey, ShardId, shard_id_for,
};
use shardik_persistence::{LeaseAcquired, WriteRefused};

use super::checker::ShardingChecker;
use super::config::ShardingConfig;
use super::durability::DurabilityChecker;
use shardik_persistence::Store;

use super::durable::{SnapshotTask, at_once};
use super::entities::RememberedStore;
use super::messages::{Output, SimMsg, Wire};
use super::net::{Net, NetStats, Packet};
use super::node::ShardNode;
use super::store::{Caller, SimStore, StoreOp, StoreStats};
use super::traffic::{Ledger, TrafficConfig, entity_name};
use crate::world::{NodeId, TimelineEntry, World, WorldConfig};

/// How long [`ShardingWorld::form_cluster`] waits for the members to agree.
const FORMATION_LIMIT: Duration = Duration::from_secs(120);

/// A region started or stopped hosting a shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEvent {
    /// When.
    pub at: Instant,
    /// Which node slot.
    pub node: NodeId,
    /// Entity kind.
    pub kind: usize,
    /// The shard.
    pub shard: ShardId,
    /// Started (`true`) or stopped.
    pub started: bool,
}

/// A node slot's sharding layer.
#[derive(Default)]
struct Slot {
    /// The incarnation the layer belongs (or belonged) to.
    uid: Option<UniqueAddress>,
    /// The layer, while that incarnation runs.
    layer: Option<ShardNode>,
    /// The instant of the layer's last timer run and how many ran at it in a row.
    timer_runs: (Instant, u32),
}

/// Timer runs of one node at one instant beyond which the run is a livelock: a deadline in
/// the past that handling it does not clear (the runtime would spin on it; virtual time would
/// never move). Legitimate runs at one instant number a handful.
const TIMER_RUNS_AT_ONE_INSTANT: u32 = 10_000;

/// A membership world whose nodes also run sharding.
pub struct ShardingWorld {
    world: World,
    cfg: ShardingConfig,
    /// Latency draws of sharding messages (separate from the world's, so traffic does not
    /// change the membership timeline).
    rng: ChaCha8Rng,
    /// Client choices.
    traffic_rng: ChaCha8Rng,
    slots: Vec<Slot>,
    by_node: BTreeMap<UniqueAddress, NodeId>,
    net: Net,
    timers: BTreeSet<(Instant, NodeId)>,
    timer_of: Vec<Option<Instant>>,
    checker: ShardingChecker,
    /// Remembered entities, shared by every node.
    remembered: RememberedStore,
    /// Every entity that ever started, when entities are remembered (they never passivate
    /// then, so each must be remembered and run again): kept apart from the store, so that
    /// an entity the store wrongly forgot is still missed.
    ever_started: BTreeSet<(usize, ShardId, EntityId)>,
    /// Numbers entity incarnations over the run.
    incarnations: Arc<AtomicU64>,
    /// The store durable entities persist to (when the configuration has them).
    store: Option<SimStore>,
    durability: DurabilityChecker,
    ledger: Ledger,
    traffic: Option<(TrafficConfig, Instant)>,
    timeline: Vec<TimelineEntry>,
    host_events: Vec<HostEvent>,
    scratch: Vec<Output>,
    /// Shards coordinators took from silent members on the store's word (each checked).
    shards_taken_over: usize,
}

impl ShardingWorld {
    /// An empty world; every node added later runs the sharding layer `cfg` describes.
    pub fn new(world: WorldConfig, cfg: ShardingConfig) -> Self {
        let seed = world.seed;
        // Leases live in the same store as the journals (where fences are checked); with
        // leases alone its calls take the default time and nothing crashes at the store.
        let store = match (&cfg.durable, cfg.leases()) {
            (Some(spec), _) => Some(SimStore::new(spec.clone(), seed)),
            (None, Some(_)) => Some(SimStore::new(super::durable::DurableSpec::new(), seed)),
            (None, None) => None,
        };
        ShardingWorld {
            world: {
                let mut w = World::new(world);
                w.defer_exit_confirmation();
                w
            },
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5_4a2d_0001),
            traffic_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5_4a2d_0002),
            slots: Vec::new(),
            by_node: BTreeMap::new(),
            net: Net::default(),
            timers: BTreeSet::new(),
            timer_of: Vec::new(),
            checker: ShardingChecker::new(),
            remembered: RememberedStore::default(),
            ever_started: BTreeSet::new(),
            incarnations: Arc::new(AtomicU64::new(1)),
            store,
            durability: DurabilityChecker::default(),
            ledger: Ledger::default(),
            traffic: None,
            timeline: Vec::new(),
            host_events: Vec::new(),
            scratch: Vec::new(),
            shards_taken_over: 0,
        }
    }

    // ----- the membership world -----

    /// The membership world underneath.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The membership world, for actions this type does not wrap. The sharding layer catches
    /// up with what was done (new nodes, crashes, restarts) at the next step.
    pub fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }

    /// The sharding settings.
    pub fn config(&self) -> &ShardingConfig {
        &self.cfg
    }

    /// Current virtual time.
    pub fn now(&self) -> Instant {
        self.world.now()
    }

    /// Adds a node with the world's membership settings (not yet joined).
    pub fn add_node(&mut self) -> NodeId {
        let cfg = self.world.config().membership.clone();
        self.add_node_with(cfg)
    }

    /// Adds a node with its own membership settings (roles decide which kinds it hosts).
    pub fn add_node_with(&mut self, cfg: MembershipConfig) -> NodeId {
        let id = self.world.add_node_with(cfg);
        self.sync();
        id
    }

    /// Tells node `id` to join through `seeds`.
    pub fn join(&mut self, id: NodeId, seeds: &[NodeId]) {
        self.world.join(id, seeds);
        self.sync();
    }

    /// Adds a node per configuration, all joining through the first three at once, and runs
    /// until all are Up and agree. Returns their ids and when they agreed.
    pub fn form_cluster_with(
        &mut self,
        configs: Vec<MembershipConfig>,
    ) -> (Vec<NodeId>, Option<Instant>) {
        let ids: Vec<NodeId> = configs.into_iter().map(|c| self.add_node_with(c)).collect();
        let seeds: Vec<NodeId> = ids.iter().copied().take(3).collect();
        for &id in &ids {
            self.join(id, &seeds);
        }
        let all = ids.clone();
        let at = self.run_until_pred(FORMATION_LIMIT, |s| {
            s.world.all_up(&all) && s.world.agreed()
        });
        (ids, at)
    }

    /// [`form_cluster_with`](Self::form_cluster_with) `n` nodes of the world's settings.
    pub fn form_cluster(&mut self, n: usize) -> (Vec<NodeId>, Option<Instant>) {
        let cfg = self.world.config().membership.clone();
        self.form_cluster_with(vec![cfg; n])
    }

    /// Kills node `id` without warning: its entities, shards, buffers and messages in flight
    /// to or from it are gone.
    pub fn crash(&mut self, id: NodeId) {
        self.world.crash(id);
        self.sync();
    }

    /// Restarts slot `id` as a new incarnation (not yet joined) with a fresh sharding layer.
    pub fn restart(&mut self, id: NodeId) {
        self.world.restart(id);
        self.sync();
    }

    /// Freezes node `id` for `d`: its membership and sharding inputs wait, in order.
    pub fn pause(&mut self, id: NodeId, d: Duration) {
        self.world.pause(id, d);
        self.reschedule(id);
    }

    /// Cuts node `id` off from the store for `d`, but not from its peers: its lease calls and
    /// lease reads go unanswered, its journal writes wait for the cut to end. Without a store
    /// it does nothing.
    pub fn cut_from_store(&mut self, id: NodeId, d: Duration) {
        let now = self.now();
        if let Some(store) = self.store.as_mut() {
            store.cut(id, now + d);
        }
        self.note(Some(id), format!("cut off from the store for {d:?}"));
    }

    /// Splits the network (sharding traffic included) into `groups`.
    pub fn partition(&mut self, groups: &[&[NodeId]]) {
        self.world.partition(groups);
    }

    /// Heals every partition.
    pub fn heal(&mut self) {
        self.world.heal();
    }

    /// Leaves gracefully, as the runtime's node does when its process is told to stop
    /// ([`World::leave`]): the node asks the membership to leave; each kind's region sees its
    /// node Leaving and hands its shards off; the node confirms Exiting once every region has
    /// stopped (or the shutdown timeout stopped them). A node that is not a member yet stops
    /// at once.
    pub fn leave(&mut self, id: NodeId) {
        if self.node(id).is_none() {
            return;
        }
        self.note(Some(id), "graceful leave".to_string());
        self.world.leave(id);
        self.sync();
    }

    // ----- clients -----

    /// A client on node `via` sends to `entity` of `kind` through the node's region. Returns
    /// the message id, or `None` when the node is dead or paused.
    pub fn tell(&mut self, via: NodeId, kind: usize, entity: &str) -> Option<u64> {
        if self.world.paused_until(via).is_some() {
            return None;
        }
        let now = self.now();
        let layer = self.slots.get_mut(via)?.layer.as_mut()?;
        let sender = layer.me().clone();
        let entity: EntityId = entity.into();
        let (id, seq) = self.ledger.send(now, kind, via, &sender, &entity);
        let shard = shard_id_for(&entity, self.cfg.sharding.number_of_shards)
            .expect("number of shards above 0");
        let env = Envelope {
            entity,
            shard,
            msg: SimMsg { id, sender, seq },
        };
        let mut out = std::mem::take(&mut self.scratch);
        layer.tell(now, kind, env, &mut out);
        self.dispatch(via, &mut out);
        self.scratch = out;
        Some(id)
    }

    /// Sends one message to each of the first `entities` entities of `kind` through `via`.
    pub fn tell_all(&mut self, via: NodeId, kind: usize, entities: usize) -> Vec<u64> {
        (0..entities)
            .filter_map(|i| self.tell(via, kind, &entity_name(i)))
            .collect()
    }

    /// Runs until every message of `ids` was delivered, for at most `max`. Returns whether
    /// they all were.
    pub fn run_until_delivered(&mut self, ids: &[u64], max: Duration) -> bool {
        self.run_until_pred(max, |s| ids.iter().all(|id| s.ledger.is_delivered(*id)))
            .is_some()
    }

    /// Starts (or with `None` stops) the traffic generator; the first burst is now.
    pub fn set_traffic(&mut self, traffic: Option<TrafficConfig>) {
        let now = self.now();
        self.traffic = traffic.map(|t| (t, now));
    }

    /// Nodes a client of `kind` may send through now: running, not paused, Up, and with a
    /// region that is neither stopped nor shutting down.
    pub fn senders(&self, kind: usize) -> Vec<NodeId> {
        (0..self.slots.len())
            .filter(|&id| {
                let Some(layer) = self.slots[id].layer.as_ref() else {
                    return false;
                };
                self.world.paused_until(id).is_none()
                    && self
                        .world
                        .core(id)
                        .self_status()
                        .is_some_and(MemberStatus::counts_as_up)
                    && !layer.is_leaving()
                    && !layer.region(kind).is_stopped()
                    && !layer.region(kind).is_shutting_down()
            })
            .collect()
    }

    fn traffic_burst(&mut self) {
        let Some((cfg, next)) = self.traffic.clone() else {
            return;
        };
        self.traffic = Some((cfg.clone(), next + cfg.interval));
        for _ in 0..cfg.per_tick {
            let kind = cfg.kinds[self.traffic_rng.random_range(0..cfg.kinds.len())];
            let mut senders = self.senders(kind);
            if let Some(only) = &cfg.senders {
                senders.retain(|s| only.contains(s));
            }
            if senders.is_empty() || cfg.entities == 0 {
                continue;
            }
            let via = senders[self.traffic_rng.random_range(0..senders.len())];
            let entity = entity_name(self.traffic_rng.random_range(0..cfg.entities));
            self.tell(via, kind, &entity);
        }
    }

    // ----- running -----

    fn next_own_event_at(&self) -> Option<Instant> {
        [
            self.net.next_at(),
            self.timers.first().map(|(t, _)| *t),
            self.traffic.as_ref().map(|(_, t)| *t),
            self.store.as_ref().and_then(SimStore::next_at),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When the next thing happens, membership or sharding.
    pub fn next_event_at(&self) -> Option<Instant> {
        match (self.world.next_event_at(), self.next_own_event_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Processes everything due at the next event time. Returns false when nothing is left.
    pub fn step(&mut self) -> bool {
        self.sync();
        let membership_first = match (self.world.next_event_at(), self.next_own_event_at()) {
            (None, None) => return false,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a <= b,
        };
        if membership_first {
            self.world.step();
        } else {
            let at = self.next_own_event_at().expect("checked above");
            // Nothing of the world's is due before `at`: this only moves its clock.
            self.world.run_until(at);
            self.own_events();
        }
        self.sync();
        self.check_coordinators();
        true
    }

    /// Runs until virtual time `until` (events at exactly `until` included).
    pub fn run_until(&mut self, until: Instant) {
        while self.next_event_at().is_some_and(|t| t <= until) {
            self.step();
        }
        self.world.run_until(until);
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now() + d;
        self.run_until(until);
    }

    /// Runs until `pred` holds (checked after every step) or `max` virtual time passed.
    /// Returns the instant it first held.
    pub fn run_until_pred(
        &mut self,
        max: Duration,
        mut pred: impl FnMut(&ShardingWorld) -> bool,
    ) -> Option<Instant> {
        let deadline = self.now() + max;
        loop {
            if pred(self) {
                return Some(self.now());
            }
            match self.next_event_at() {
                Some(t) if t <= deadline => {
                    self.step();
                }
                _ => {
                    self.world.run_until(deadline);
                    return pred(self).then_some(self.now());
                }
            }
        }
    }

    /// Sharding messages, store calls, node timers and client bursts due now, in that order.
    fn own_events(&mut self) {
        let now = self.now();
        while let Some(p) = self.net.pop_due(now) {
            self.arrive(p);
        }
        while let Some(op) = self.store.as_mut().and_then(|s| s.pop_due(now)) {
            self.store_op(op);
        }
        while let Some(&(t, id)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            self.timer_of[id] = None;
            self.node_timer(id);
        }
        if self.traffic.as_ref().is_some_and(|(_, t)| *t <= now) {
            self.traffic_burst();
        }
    }

    fn is_current(&self, id: NodeId, node: &UniqueAddress) -> bool {
        self.slots[id]
            .layer
            .as_ref()
            .is_some_and(|l| l.me() == node)
    }

    fn arrive(&mut self, p: Packet) {
        let linked = self.world.can_reach(p.from_id, p.to_id);
        if !linked || !self.is_current(p.to_id, &p.to) || !self.is_current(p.from_id, &p.from) {
            self.lose(&p);
            return;
        }
        if self.world.paused_until(p.to_id).is_some() || self.net.has_held(p.to_id) {
            let to = p.to_id;
            self.net.hold(p);
            self.reschedule(to);
            return;
        }
        self.handle_packet(p);
    }

    fn lose(&mut self, p: &Packet) {
        self.net.lost(p);
        if let Wire::User(env) = &p.wire {
            self.ledger.lost(env.msg.id);
        }
    }

    fn handle_packet(&mut self, p: Packet) {
        let now = self.now();
        let Some(layer) = self.slots[p.to_id].layer.as_mut() else {
            return;
        };
        self.net.delivered();
        let mut out = std::mem::take(&mut self.scratch);
        layer.receive(now, &p.from, p.kind, p.wire, &mut out);
        self.dispatch(p.to_id, &mut out);
        self.scratch = out;
    }

    fn node_timer(&mut self, id: NodeId) {
        if self.world.paused_until(id).is_some() {
            self.reschedule(id);
            return;
        }
        // What waited out a pause is handled first, in arrival order.
        for p in self.net.take_held(id) {
            if self.is_current(p.to_id, &p.to) && self.is_current(p.from_id, &p.from) {
                self.handle_packet(p);
            } else {
                self.lose(&p);
            }
        }
        let now = self.now();
        let slot = &mut self.slots[id];
        let Some(layer) = slot.layer.as_mut() else {
            return;
        };
        slot.timer_runs = match slot.timer_runs {
            (at, runs) if at == now => (at, runs + 1),
            _ => (now, 1),
        };
        assert!(
            slot.timer_runs.1 < TIMER_RUNS_AT_ONE_INSTANT,
            "node {id}'s timer ran {TIMER_RUNS_AT_ONE_INSTANT} times at {now:?}: a deadline \
             in the past that handling it does not clear (next: {:?})",
            layer.poll_timeout()
        );
        let mut out = std::mem::take(&mut self.scratch);
        layer.timer(now, &mut out);
        self.dispatch(id, &mut out);
        self.scratch = out;
    }

    fn unschedule(&mut self, id: NodeId) {
        if let Some(t) = self.timer_of[id].take() {
            self.timers.remove(&(t, id));
        }
    }

    fn reschedule(&mut self, id: NodeId) {
        self.unschedule(id);
        let Some(layer) = self.slots[id].layer.as_ref() else {
            return;
        };
        let now = self.now();
        let mut next = layer.poll_timeout();
        if self.net.has_held(id) {
            next = Some(now);
        }
        let Some(mut t) = next else {
            return;
        };
        t = t.max(now);
        if let Some(p) = self.world.paused_until(id) {
            t = t.max(p);
        }
        self.timers.insert((t, id));
        self.timer_of[id] = Some(t);
    }

    /// Brings every slot's layer in line with its membership core.
    /// Brings every slot's layer in line with its membership core, and confirms the exit of
    /// Exiting nodes whose regions have all stopped (their exit tasks are done).
    fn sync(&mut self) {
        loop {
            self.sync_layers();
            let done: Vec<NodeId> = self
                .world
                .awaiting_exit()
                .filter(|&id| {
                    self.slots
                        .get(id)
                        .and_then(|s| s.layer.as_ref())
                        .is_none_or(ShardNode::all_regions_stopped)
                })
                .collect();
            if done.is_empty() {
                return;
            }
            for id in done {
                self.note(Some(id), "exit tasks done: confirming Exiting".to_string());
                self.world.confirm_exit(id);
            }
        }
    }

    fn sync_layers(&mut self) {
        let now = self.now();
        for id in 0..self.world.len() {
            if id == self.slots.len() {
                self.slots.push(Slot::default());
                self.timer_of.push(None);
            }
            let uid = self.world.core(id).self_node().clone();
            let alive = self.world.is_alive(id);
            if self.slots[id].uid.as_ref() != Some(&uid) {
                if self.slots[id].layer.is_some() {
                    self.kill(id, "replaced by a new incarnation");
                }
                let roles = self.world.core(id).config().roles.clone();
                self.by_node.insert(uid.clone(), id);
                let slot = &mut self.slots[id];
                slot.uid = Some(uid.clone());
                let store = self.store.as_ref().map(|s| s.store.clone());
                let (remembered, incarnations) =
                    (self.remembered.clone(), Arc::clone(&self.incarnations));
                slot.layer = alive.then(|| {
                    ShardNode::new(uid, &roles, &self.cfg, store, remembered, incarnations, now)
                });
                self.reschedule(id);
            } else if !alive && self.slots[id].layer.is_some() {
                let why = match self.world.shutdown_reason(id) {
                    Some(r) => format!("shut down ({r:?})"),
                    None => "crashed".to_string(),
                };
                self.kill(id, &why);
                continue;
            }
            let Some(layer) = self.slots[id].layer.as_mut() else {
                continue;
            };
            // The same view the runtime's kinds act on, taken when the state changed.
            let Some(view) = self.world.take_view(id) else {
                continue;
            };
            let mut out = std::mem::take(&mut self.scratch);
            layer.membership_changed(now, &view.members, &view.unreachable, &mut out);
            self.dispatch(id, &mut out);
            self.scratch = out;
        }
    }

    fn kill(&mut self, id: NodeId, why: &str) {
        let Some(mut layer) = self.slots[id].layer.take() else {
            return;
        };
        self.note(Some(id), format!("sharding layer gone: {why}"));
        let mut out = std::mem::take(&mut self.scratch);
        layer.kill(&mut out);
        self.dispatch_as(id, layer.me().clone(), &mut out);
        self.scratch = out;
        for p in self.net.take_held(id) {
            self.lose(&p);
        }
        self.unschedule(id);
    }

    /// Routes, checks and records what node `id`'s layer did, then reschedules it.
    fn dispatch(&mut self, id: NodeId, out: &mut Vec<Output>) {
        let Some(me) = self.slots[id].layer.as_ref().map(|l| l.me().clone()) else {
            out.clear();
            return;
        };
        self.dispatch_as(id, me, out);
        self.reschedule(id);
    }

    fn dispatch_as(&mut self, id: NodeId, me: UniqueAddress, out: &mut Vec<Output>) {
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
                    if let Some(store) = &self.store {
                        let store = &store.store;
                        self.durability
                            .acked(now, store, &pid, msg.id, first_seq, last_seq);
                    }
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

    /// A store call arrives (see [`super::store`]).
    fn store_op(&mut self, op: StoreOp) {
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
            | StoreOp::Lease { from, .. }
            | StoreOp::ReadLeases { from, .. } => Some(from.id),
            _ => None,
        };
        if let Some(until) = caller.and_then(|id| st.cut_until(id, now)) {
            match op {
                StoreOp::Append { .. } | StoreOp::Snapshot { .. } => st.schedule(until, op),
                _ => {}
            }
            return;
        }
        match op {
            StoreOp::Append { from, token, write } => {
                let current = self.slots[from.id]
                    .layer
                    .as_ref()
                    .is_some_and(|l| *l.me() == from.node);
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
            StoreOp::Answer { to, token, result } => {
                if self.slots[to.id]
                    .layer
                    .as_ref()
                    .is_none_or(|l| *l.me() != to.node)
                {
                    return;
                }
                if let Some(until) = self.world.paused_until(to.id) {
                    st.schedule(until, StoreOp::Answer { to, token, result });
                    return;
                }
                let layer = self.slots[to.id].layer.as_mut().expect("current");
                let mut out = std::mem::take(&mut self.scratch);
                layer.write_done(now, token, result, &mut out);
                self.dispatch(to.id, &mut out);
                self.scratch = out;
            }
            StoreOp::Snapshot { from, task, step } => {
                let current = self.slots[from.id]
                    .layer
                    .as_ref()
                    .is_some_and(|l| *l.me() == from.node);
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
            StoreOp::Lease {
                from,
                kind,
                request,
            } => {
                let current = self.slots[from.id]
                    .layer
                    .as_ref()
                    .is_some_and(|l| *l.me() == from.node);
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
                    LeaseCall::Acquire => match at_once(st.store.acquire_lease(&name, &owner, ttl))
                    {
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
            StoreOp::ReadLeases {
                from,
                kind,
                id,
                shards,
            } => {
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
            StoreOp::LeasesRead {
                to,
                kind,
                id,
                answer,
            } => match answer_due(&self.slots, &self.world, &to) {
                Due::Never => {}
                Due::After(until) => {
                    let op = StoreOp::LeasesRead {
                        to,
                        kind,
                        id,
                        answer,
                    };
                    st.schedule(until, op);
                }
                Due::Now => self.in_layer(to.id, |layer, out| {
                    layer.leases_read(now, kind, id, answer, out)
                }),
            },
            StoreOp::LeaseAnswer {
                to,
                kind,
                key,
                id,
                answer,
            } => match answer_due(&self.slots, &self.world, &to) {
                Due::Never => {}
                Due::After(until) => {
                    let op = StoreOp::LeaseAnswer {
                        to,
                        kind,
                        key,
                        id,
                        answer,
                    };
                    st.schedule(until, op);
                }
                Due::Now => self.in_layer(to.id, |layer, out| {
                    layer.lease_answered(now, kind, key, id, answer, out)
                }),
            },
            StoreOp::Crash { node } => {
                if self.slots[node.id]
                    .layer
                    .as_ref()
                    .is_some_and(|l| *l.me() == node.node)
                {
                    st.restart_later(now, node.id);
                    self.note(Some(node.id), "crash point: a write in flight".into());
                    self.crash(node.id);
                }
            }
            StoreOp::Restart { id } => {
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
    }

    /// With leases, a copy of `shard` on a node whose lease on it has passed its deadline can
    /// no longer act (a paused node checks its lease before delivering anything, and its
    /// writes carry an older fence): such copies stop counting as live before a new holder
    /// starts the shard. Copies whose node still holds the lease keep counting.
    fn fence_stale_copies(&mut self, kind: usize, shard: &ShardId) {
        if self.cfg.leases().is_none() {
            return;
        }
        let now = self.now();
        let Some(hosts) = self.checker.hosts_of(kind, shard) else {
            return;
        };
        let stale: Vec<UniqueAddress> = hosts
            .iter()
            .filter(|node| {
                self.by_node
                    .get(*node)
                    .and_then(|&id| self.slots[id].layer.as_ref())
                    .filter(|l| l.me() == *node)
                    .and_then(|l| l.region(kind).lease_deadline(shard))
                    .is_some_and(|deadline| deadline <= now)
            })
            .cloned()
            .collect();
        for node in stale {
            self.checker.fenced(kind, &node, shard);
        }
    }

    /// Runs `f` on node `id`'s sharding layer (which must be there) and carries out what it
    /// asks for.
    fn in_layer(&mut self, id: NodeId, f: impl FnOnce(&mut ShardNode, &mut Vec<Output>)) {
        let layer = self.slots[id].layer.as_mut().expect("current");
        let mut out = std::mem::take(&mut self.scratch);
        f(layer, &mut out);
        self.dispatch(id, &mut out);
        self.scratch = out;
    }

    /// A coordinator took `shards` from `region`'s node because the store said their leases
    /// had lapsed: that node's own lease keeper must not count on any of them any more.
    fn check_taken(
        &mut self,
        kind: usize,
        coordinator: &UniqueAddress,
        region: &UniqueAddress,
        shards: &[ShardId],
    ) {
        let now = self.now();
        self.shards_taken_over += shards.len();
        let Some(layer) = self
            .by_node
            .get(region)
            .and_then(|&id| self.slots[id].layer.as_ref())
            .filter(|l| l.me() == region)
        else {
            return; // that incarnation is gone: it serves nothing
        };
        let held: Vec<(ShardId, Instant)> = shards
            .iter()
            .filter_map(|s| {
                let deadline = layer.region(kind).lease_deadline(s)?;
                (deadline > now).then(|| (s.clone(), deadline))
            })
            .collect();
        for (shard, deadline) in held {
            self.checker
                .taken_while_held(now, kind, coordinator, region, &shard, deadline);
        }
    }

    /// Checks (d) of the [checker](super::checker): coordinators nobody has disowned.
    fn check_coordinators(&mut self) {
        let now = self.now();
        for kind in 0..self.cfg.kinds.len() {
            // A paused node runs nothing, its coordinator included: the one standing in for it
            // (under leases) is the only one at work, and the paused one stops its own before
            // doing anything once it runs again, its lease having lapsed meanwhile.
            let running: Vec<(NodeId, UniqueAddress)> = self
                .slots
                .iter()
                .enumerate()
                .filter(|(id, _)| self.world.paused_until(*id).is_none())
                .filter_map(|(id, s)| {
                    let l = s.layer.as_ref()?;
                    l.coordinator(kind).map(|_| (id, l.me().clone()))
                })
                .collect();
            if running.len() < 2 {
                self.checker.coordinators(now, kind, BTreeSet::new());
                continue;
            }
            let legitimate = running
                .into_iter()
                .filter(|(_, node)| self.undisputed(node))
                .map(|(_, node)| node)
                .collect();
            self.checker.coordinators(now, kind, legitimate);
        }
    }

    /// Whether no node has removed `node` and no live node sees it Down.
    fn undisputed(&self, node: &UniqueAddress) -> bool {
        if self.world.stats().removed_members.contains(node) {
            return false;
        }
        self.world.alive_nodes().into_iter().all(|i| {
            self.world
                .core(i)
                .gossip()
                .member(node)
                .is_none_or(|m| m.status != MemberStatus::Down)
        })
    }

    fn note(&mut self, node: Option<NodeId>, what: String) {
        if self.cfg.record_events {
            self.timeline.push(TimelineEntry {
                at: self.now(),
                node,
                what,
            });
        }
    }

    // ----- what tests look at -----

    /// The sharding checker.
    pub fn checker(&self) -> &ShardingChecker {
        &self.checker
    }

    /// Remembered entities that are not running at their shard's home: after a quiet period
    /// with every shard at home, each entity that ever started must be remembered by the
    /// store and running again (after a crash, a hand-off or a full restart). Entities are
    /// never passivated when remembered, so none may be missing.
    pub fn remembered_not_running(&self, kind: usize) -> Vec<String> {
        if !self.cfg.remembers() {
            return Vec::new();
        }
        let hosts = self.hosts(kind);
        let mut missing = Vec::new();
        let mut live_at: BTreeMap<ShardId, BTreeSet<EntityId>> = BTreeMap::new();
        for (k, shard, entity) in &self.ever_started {
            if *k != kind {
                continue;
            }
            if !self.remembered.entities(kind, shard).contains(entity) {
                missing.push(format!(
                    "entity {entity} of shard {shard} was forgotten by the store"
                ));
            }
            let Some(home) = hosts.get(shard).and_then(|h| h.first()) else {
                missing.push(format!("shard {shard} has remembered entities but no home"));
                continue;
            };
            let live = live_at.entry(shard.clone()).or_insert_with(|| {
                self.slots[*home]
                    .layer
                    .as_ref()
                    .and_then(|l| l.entities(kind).remove(shard))
                    .unwrap_or_default()
            });
            if !live.contains(entity) {
                missing.push(format!(
                    "remembered entity {entity} of shard {shard} is not running on node {home}"
                ));
            }
        }
        missing
    }

    /// Every violation found so far, membership's, sharding's and durable entities'.
    pub fn violations(&self) -> Vec<String> {
        let mut v = self.world.checker().violations().to_vec();
        v.extend(self.checker.violations().iter().cloned());
        v.extend(self.durability.violations().iter().cloned());
        v
    }

    /// The durable-entity checker (empty when entities are not durable).
    pub fn durability(&self) -> &DurabilityChecker {
        &self.durability
    }

    /// What the store model saw (`None` when entities are not durable).
    pub fn store_stats(&self) -> Option<&StoreStats> {
        self.store.as_ref().map(|s| &s.stats)
    }

    /// Checks the whole store once more (see [`DurabilityChecker::check_store`]); meant for
    /// the end of a run, when nothing is in flight.
    pub fn check_store(&mut self) {
        let now = self.now();
        if let Some(st) = &self.store {
            let snapshots = st.spec.retention.is_some();
            self.durability.check_store(now, &st.store, snapshots);
        }
    }

    /// Every client message and its fate.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Sharding network totals.
    pub fn net_stats(&self) -> &NetStats {
        self.net.stats()
    }

    /// Shards coordinators took from silent members because the store said their leases had
    /// lapsed, over the run.
    pub fn shards_taken_over(&self) -> usize {
        self.shards_taken_over
    }

    /// Sharding events (shards, coordinators, layers), in order.
    pub fn timeline(&self) -> &[TimelineEntry] {
        &self.timeline
    }

    /// Every start and stop of a shard in a region, in order (kept even without
    /// `record_events`).
    pub fn host_events(&self) -> &[HostEvent] {
        &self.host_events
    }

    /// Node `id`'s sharding layer, while its incarnation runs.
    pub fn node(&self, id: NodeId) -> Option<&ShardNode> {
        self.slots.get(id).and_then(|s| s.layer.as_ref())
    }

    /// Which running nodes host each shard of `kind` right now (by their regions).
    pub fn hosts(&self, kind: usize) -> BTreeMap<ShardId, Vec<NodeId>> {
        let mut out: BTreeMap<ShardId, Vec<NodeId>> = BTreeMap::new();
        for (id, s) in self.slots.iter().enumerate() {
            if let Some(l) = &s.layer {
                for shard in l.region(kind).hosted_shards() {
                    out.entry(shard.clone()).or_default().push(id);
                }
            }
        }
        out
    }

    /// How many shards of `kind` each running node hosts.
    pub fn shard_counts(&self, kind: usize) -> BTreeMap<NodeId, usize> {
        let mut out = BTreeMap::new();
        for (id, s) in self.slots.iter().enumerate() {
            if let Some(l) = &s.layer {
                out.insert(id, l.region(kind).hosted_shards().count());
            }
        }
        out
    }

    /// Running nodes that run `kind`'s coordinator now.
    pub fn coordinator_nodes(&self, kind: usize) -> Vec<NodeId> {
        (0..self.slots.len())
            .filter(|&id| self.node(id).is_some_and(|l| l.coordinator(kind).is_some()))
            .collect()
    }
}

/// When the store's answer to `to` can be handed over.
enum Due {
    /// Never: that incarnation is gone.
    Never,
    /// Once its node's pause ends.
    After(Instant),
    /// Now.
    Now,
}

/// When the store's answer to `to` can be handed over: never to an incarnation that is gone,
/// after the pause to a paused node, now otherwise.
fn answer_due(slots: &[Slot], world: &World, to: &Caller) -> Due {
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
