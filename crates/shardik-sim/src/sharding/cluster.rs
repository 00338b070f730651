//! [`ShardingWorld`]: the membership [`World`] with a sharding layer on every node, one
//! virtual clock for both, the sharding network, simulated clients and the checker.
//!
//! The world's membership events and the sharding layer's events (messages, timers, client
//! bursts) are taken in time order; on a tie membership goes first. After every step each
//! node's layer is brought up to date with its membership core: a new incarnation gets a fresh
//! layer, a node that died (crash, or shutdown after being downed or leaving) loses its
//! entities and shards at that instant, and the view the node core gives when its state changed is fed to the kinds.
//!
//! This file holds the world itself: its parts, the actions tests and scenarios take, and the
//! loop that runs it. Beside it, in `cluster/`: keeping the layers in step with membership
//! (`layers.rs`), carrying out what a layer asks for (`dispatch.rs`), store calls
//! (`store_calls.rs`) and the checks that need the whole world (`checks.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::membership::{MemberStatus, MembershipConfig, UniqueAddress};
use shardik_core::sharding::{EntityId, Envelope, ShardId, shard_id_for};

use super::checker::ShardingChecker;
use super::config::ShardingConfig;
use super::delivery_checker::DeliveryChecker;
use super::durability::DurabilityChecker;
use super::entities::RememberedStore;
use super::messages::{Output, Sequencing, SimMsg, Wire};
use super::net::{Net, NetStats, Packet};
use super::node::ShardNode;
use super::producer::SimProducer;
use super::reliable::OFFER_BASE;
use super::store::{SimStore, StoreStats};
use super::traffic::{Ledger, TrafficConfig, entity_name};
use crate::world::{NodeId, TimelineEntry, World, WorldConfig};

mod checks;
mod dispatch;
mod layers;
mod producers;
mod store_calls;

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
    /// The slot's reliable producer, while an incarnation of its node runs (with reliable
    /// delivery, on producer slots).
    producer: Option<SimProducer>,
    /// Whether the slot's producer ever started (a later start is a restart).
    producer_ran: bool,
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
    /// Reliable delivery's invariants (empty without reliable delivery).
    delivery: DeliveryChecker,
    /// The producers' applications' choices (apart, so that the other traffic is the same
    /// with or without them).
    reliable_rng: ChaCha8Rng,
    /// The next offer's id.
    next_offer: u64,
    /// Numbers producer incarnations over the run.
    producer_incarnations: u64,
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
            delivery: DeliveryChecker::default(),
            reliable_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5_4a2d_0003),
            next_offer: OFFER_BASE,
            producer_incarnations: 0,
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
        self.tell_with(via, kind, entity, None)
    }

    /// [`tell`](Self::tell), with a reliable producer's delivery header when `delivery` is
    /// given (the ledger counts each send as a message of its own).
    fn tell_with(
        &mut self,
        via: NodeId,
        kind: usize,
        entity: &str,
        delivery: Option<Arc<Sequencing>>,
    ) -> Option<u64> {
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
            msg: SimMsg {
                id,
                sender,
                seq,
                delivery,
            },
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
        self.offer_burst();
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
        if self.slots[p.to_id].layer.is_none() {
            return;
        }
        self.net.delivered();
        if let Wire::Reply(reply) = p.wire {
            self.producer_reply(p.to_id, &p.to, reply);
            return;
        }
        let Some(layer) = self.slots[p.to_id].layer.as_mut() else {
            return;
        };
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
        self.producer_timer(id);
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
        let producer = self.slots[id]
            .producer
            .as_ref()
            .and_then(SimProducer::poll_timeout);
        let mut next = match (layer.poll_timeout(), producer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
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
        v.extend(self.delivery.violations().iter().cloned());
        v
    }

    /// The reliable-delivery checker, with the run's counts (empty without reliable
    /// delivery).
    pub fn delivery(&self) -> &DeliveryChecker {
        &self.delivery
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
