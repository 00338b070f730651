//! The simulated world: nodes running the real membership core, a network with latency,
//! partitions and pauses, one seeded random generator, and a virtual clock that jumps from
//! one event to the next.
//!
//! This file holds the world, its settings and the actions scenarios take on it, and the loop
//! that runs it; beside it in `world/`: the network (`network.rs`, with what travels on it in
//! `in_flight.rs`), carrying out what a core asks for (`effects.rs`, with the one-line
//! description of an event in `event_line.rs`) and what scenarios ask of the world as a
//! whole (`views.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::membership::{
    Address, Command, Effect, Input, Member, MemberStatus, Membership, MembershipConfig,
    ShutdownReason, UniqueAddress,
};
use shardik_core::node::{ClusterView, NodeCore};

use crate::checker::Checker;
use crate::sbr_lease::{Liveness, SbrLeaseConfig, SbrLeaseModel};

pub use crate::node_id::NodeId;

mod effects;
mod event_line;
mod in_flight;
mod network;
mod views;

pub use event_line::describe;
use in_flight::{Delivery, Identification};

/// Network and world settings.
#[derive(Clone, Debug)]
pub struct WorldConfig {
    /// Master seed: every random choice in the run derives from it.
    pub seed: u64,
    /// One-way latency is drawn uniformly from this range.
    pub latency: (Duration, Duration),
    /// Probability that a message is lost (0 for clean runs).
    pub loss: f64,
    /// Membership settings for every node.
    pub membership: MembershipConfig,
    /// Record per-node events in the timeline (turn off for thousands of nodes).
    pub record_events: bool,
    /// Run the checker's per-event checks (cheap) and state checks (costly at scale).
    pub check_states: bool,
    /// The split-brain resolver's lease (used only under lease-majority).
    pub sbr_lease: SbrLeaseConfig,
    /// [`World::join`] names every seed by an alias of its own (`seed-alias-N`, as a DNS name
    /// pointing at node slot N) instead of its address, so that every join goes through the
    /// identification of aliases (see [`World::add_alias`]).
    pub seed_aliases: bool,
    /// How long a leave a node asks for itself ([`World::leave`]), and its exit tasks, may
    /// take (the runtime's leave timeout, 60 s by default).
    pub leave_timeout: Duration,
    /// Whether the machine of a crashed node refuses connections to it, as a host does when
    /// nothing listens on the port (the runtime then hands the sender `Input::PeerRefused`).
    /// Off, a crash is silent, as a machine that lost its power or its network.
    pub refuse_connections: bool,
}

impl WorldConfig {
    /// Defaults: 1–3 ms latency, no loss, reference membership settings.
    pub fn new(seed: u64) -> Self {
        WorldConfig {
            seed,
            latency: (Duration::from_millis(1), Duration::from_millis(3)),
            loss: 0.0,
            membership: MembershipConfig::default(),
            record_events: true,
            check_states: true,
            sbr_lease: SbrLeaseConfig::default(),
            seed_aliases: false,
            leave_timeout: shardik_core::node::DEFAULT_LEAVE_TIMEOUT,
            refuse_connections: true,
        }
    }
}

/// One line of the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimelineEntry {
    /// When.
    pub at: Instant,
    /// Which node saw it (`None` for world actions such as partitions).
    pub node: Option<NodeId>,
    /// What happened.
    pub what: String,
}

struct SimNode {
    core: NodeCore,
    address: Address,
    alive: bool,
    paused_until: Option<Instant>,
    group: u32,
    incarnation: u32,
    shutdown: Option<ShutdownReason>,
}

/// Totals over the run.
#[derive(Clone, Debug, Default)]
pub struct WorldStats {
    /// Messages delivered.
    pub delivered: u64,
    /// Messages lost to partitions, loss or dead receivers.
    pub lost: u64,
    /// Bytes of gossip (status, full, welcome) sent, per the size model.
    pub gossip_bytes: u64,
    /// Bytes of heartbeats sent.
    pub heartbeat_bytes: u64,
    /// Gossip messages (status or full) sent.
    pub gossip_messages: u64,
    /// Inputs the cores dropped, by reason.
    pub dropped_by_core: BTreeMap<&'static str, u64>,
    /// Every member incarnation some node saw removed.
    pub removed_members: BTreeSet<UniqueAddress>,
    /// `UnreachableMember` events published by any node.
    pub unreachable_events: u64,
}

/// The simulated cluster.
pub struct World {
    cfg: WorldConfig,
    now: Instant,
    rng: ChaCha8Rng,
    nodes: Vec<SimNode>,
    by_address: BTreeMap<Address, NodeId>,
    queue: BTreeMap<(Instant, u64), Delivery>,
    seq: u64,
    timers: BTreeSet<(Instant, NodeId)>,
    timer_of: Vec<Option<Instant>>,
    oneway_blocked: BTreeSet<(NodeId, NodeId)>,
    timeline: Vec<TimelineEntry>,
    checker: Checker,
    stats: WorldStats,
    effects: Vec<Effect>,
    tracked_up: Option<(UniqueAddress, BTreeSet<NodeId>)>,
    tracked_unreachable: Option<(UniqueAddress, BTreeSet<NodeId>)>,
    /// Whether something above the membership runs exit tasks (see
    /// [`World::defer_exit_confirmation`]).
    exit_tasks: bool,
    /// Nodes that are Exiting and whose exit tasks have not been confirmed yet.
    exiting: BTreeSet<NodeId>,
    /// The lease of lease-majority, in a store every node reaches.
    sbr_lease: SbrLeaseModel,
    /// Other names of node slots (DNS aliases): a message sent to one goes to its node.
    aliases: BTreeMap<Address, NodeId>,
    /// Handshake replies on their way back to the node that dialled an alias.
    identifications: BTreeMap<(Instant, u64), Identification>,
    /// Which (sender, its incarnation, alias, answering incarnation) was identified already:
    /// one handshake per connection.
    identified: BTreeSet<(NodeId, u32, Address, UniqueAddress)>,
}

impl World {
    /// An empty world at time zero.
    pub fn new(cfg: WorldConfig) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let sbr_lease = SbrLeaseModel::new(cfg.sbr_lease.clone(), cfg.seed);
        World {
            checker: Checker::new(cfg.check_states),
            cfg,
            now: Instant::ZERO,
            rng,
            nodes: Vec::new(),
            by_address: BTreeMap::new(),
            queue: BTreeMap::new(),
            seq: 0,
            timers: BTreeSet::new(),
            timer_of: Vec::new(),
            oneway_blocked: BTreeSet::new(),
            timeline: Vec::new(),
            stats: WorldStats::default(),
            effects: Vec::new(),
            tracked_up: None,
            tracked_unreachable: None,
            exit_tasks: false,
            exiting: BTreeSet::new(),
            sbr_lease,
            aliases: BTreeMap::new(),
            identifications: BTreeMap::new(),
            identified: BTreeSet::new(),
        }
    }

    /// Makes `alias` another name of node slot `id` (or moves it there): messages sent to it
    /// reach that node, and the sender is told who answered, as the runtime's transport does
    /// from the handshake reply ([`Input::PeerIdentified`]).
    pub fn add_alias(&mut self, alias: Address, id: NodeId) {
        self.note(None, format!("alias {alias} -> node-{id:05}"));
        self.aliases.insert(alias, id);
    }

    /// The alias [`WorldConfig::seed_aliases`] gives node slot `id`.
    pub fn seed_alias_of(id: NodeId) -> Address {
        Address::new(format!("seed-alias-{id}"), 2552)
    }

    /// Tells node `id` to join through `seeds`, given as addresses (aliases among them).
    pub fn join_via(&mut self, id: NodeId, seeds: Vec<Address>) {
        self.command(id, Command::JoinSeedNodes(seeds));
    }

    /// The address node slot `id` listens on. Zero-padded so address order is slot order.
    pub fn address_of(id: NodeId) -> Address {
        Address::new(format!("node-{id:05}"), 2552)
    }

    /// Current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Number of node slots.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Adds a node slot (not yet joined) and returns its id.
    pub fn add_node(&mut self) -> NodeId {
        self.add_node_with(self.cfg.membership.clone())
    }

    /// Adds a node slot with its own settings (roles, for example).
    pub fn add_node_with(&mut self, cfg: MembershipConfig) -> NodeId {
        let id = self.nodes.len();
        let address = Self::address_of(id);
        let uid = self.rng.random::<u64>();
        let core = NodeCore::new(
            cfg,
            UniqueAddress::new(address.clone(), uid),
            self.rng.random(),
            self.now,
            self.cfg.leave_timeout,
        );
        self.nodes.push(SimNode {
            core,
            address: address.clone(),
            alive: true,
            paused_until: None,
            group: 0,
            incarnation: 0,
            shutdown: None,
        });
        self.timer_of.push(None);
        self.by_address.insert(address, id);
        id
    }

    /// Adds `n` nodes that already form a converged cluster: all Up, all having seen one shared
    /// state. Returns their ids.
    pub fn add_converged_cluster(&mut self, n: usize) -> Vec<NodeId> {
        let ids: Vec<NodeId> = (0..n).map(|_| self.add_node()).collect();
        let mut gossip = shardik_core::membership::Gossip::default();
        for (i, &id) in ids.iter().enumerate() {
            let mut m = Member::joining(
                self.nodes[id].core.self_node().clone(),
                Default::default(),
                "0.0.0",
            );
            m.status = MemberStatus::Up;
            m.up_number = i as u32 + 1;
            std::sync::Arc::make_mut(&mut gossip.members).insert(m.addr.clone(), m);
        }
        gossip
            .version
            .increment(self.nodes[ids[0]].core.self_node());
        gossip.seen = gossip.members.keys().cloned().collect();
        let shared = std::sync::Arc::new(gossip);
        let now = self.now;
        for &id in &ids {
            self.nodes[id].core.start_as_member(now, shared.clone());
            self.reschedule(id);
        }
        ids
    }

    /// Starts counting, per node, when it first sees `node`'s current incarnation Up.
    pub fn track_up(&mut self, node: NodeId) {
        self.tracked_up = Some((self.nodes[node].core.self_node().clone(), BTreeSet::new()));
    }

    /// Starts counting, per node, when it first sees `node` as unreachable.
    pub fn track_unreachable(&mut self, node: NodeId) {
        self.tracked_unreachable =
            Some((self.nodes[node].core.self_node().clone(), BTreeSet::new()));
    }

    /// How many nodes have seen the tracked node unreachable so far.
    pub fn tracked_unreachable_count(&self) -> usize {
        self.tracked_unreachable
            .as_ref()
            .map_or(0, |(_, seen)| seen.len())
    }

    /// How many nodes have seen the tracked node Up so far.
    pub fn tracked_up_count(&self) -> usize {
        self.tracked_up.as_ref().map_or(0, |(_, seen)| seen.len())
    }

    /// Restarts slot `id` as a new incarnation (same address, new uid), not yet joined.
    pub fn restart(&mut self, id: NodeId) {
        let cfg = self.nodes[id].core.membership().config().clone();
        self.restart_with(id, cfg);
    }

    /// [`restart`](Self::restart) with other settings (a node redeployed with a changed
    /// configuration).
    pub fn restart_with(&mut self, id: NodeId, cfg: MembershipConfig) {
        self.exiting.remove(&id);
        let address = self.nodes[id].address.clone();
        let uid = self.rng.random::<u64>();
        let seed = self.rng.random();
        let n = &mut self.nodes[id];
        let me = UniqueAddress::new(address, uid);
        n.core = NodeCore::new(cfg, me, seed, self.now, self.cfg.leave_timeout);
        n.alive = true;
        n.paused_until = None;
        n.incarnation += 1;
        n.shutdown = None;
        self.checker.forget_observer(id);
        self.note(None, format!("restart node-{id:05} as uid {uid}"));
        self.reschedule(id);
    }

    /// The core of node `id`.
    pub fn core(&self, id: NodeId) -> &Membership {
        self.nodes[id].core.membership()
    }

    /// Whether node `id` runs (not crashed, not shut down).
    pub fn is_alive(&self, id: NodeId) -> bool {
        self.nodes[id].alive
    }

    /// Why node `id` shut itself down, if it did.
    pub fn shutdown_reason(&self, id: NodeId) -> Option<&ShutdownReason> {
        self.nodes[id].shutdown.as_ref()
    }

    /// Ids of running nodes.
    pub fn alive_nodes(&self) -> Vec<NodeId> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].alive)
            .collect()
    }

    /// The timeline so far.
    pub fn timeline(&self) -> &[TimelineEntry] {
        &self.timeline
    }

    /// Totals so far.
    pub fn stats(&self) -> &WorldStats {
        &self.stats
    }

    /// The checker (its violations so far).
    pub fn checker(&self) -> &Checker {
        &self.checker
    }

    /// The lease of lease-majority: its store, grants and totals.
    pub fn sbr_lease(&self) -> &SbrLeaseModel {
        &self.sbr_lease
    }

    /// The settings this world runs with.
    pub fn config(&self) -> &WorldConfig {
        &self.cfg
    }

    /// Which incarnation of slot `id` runs (0 for the first, one more per restart).
    pub fn incarnation(&self, id: NodeId) -> u32 {
        self.nodes[id].incarnation
    }

    /// Until when node `id` is frozen, if it is paused now.
    pub fn paused_until(&self, id: NodeId) -> Option<Instant> {
        self.nodes[id].paused_until.filter(|p| *p > self.now)
    }

    /// Whether a message sent now from `from` would reach `to` (same partition group and no
    /// one-way block). Layers above membership use it for their own traffic.
    pub fn can_reach(&self, from: NodeId, to: NodeId) -> bool {
        self.linked(from, to)
    }

    /// From now on a node that becomes Exiting waits for [`confirm_exit`](Self::confirm_exit)
    /// instead of confirming at once: a layer above the membership (sharding) runs its exit
    /// tasks first, as the runtime does.
    pub fn defer_exit_confirmation(&mut self) {
        self.exit_tasks = true;
    }

    /// Nodes that are Exiting and wait for their exit tasks.
    pub fn awaiting_exit(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.exiting.iter().copied()
    }

    /// Node `id`'s exit tasks are done: it confirms it is Exiting and shuts down.
    pub fn confirm_exit(&mut self, id: NodeId) {
        if self.exiting.remove(&id) && self.nodes[id].alive {
            self.note(Some(id), "exit tasks done".to_string());
            let mut out = std::mem::take(&mut self.effects);
            self.nodes[id].core.exit_tasks_done(self.now, &mut out);
            self.apply_effects(id, &mut out);
            self.effects = out;
            self.reschedule(id);
        }
    }

    /// Node `id` asks to leave the cluster itself (its process is told to stop), as the
    /// runtime's stop request does: bounded by the leave timeout; a second request, or one
    /// before the node is a member, stops it at once.
    pub fn leave(&mut self, id: NodeId) {
        if !self.nodes[id].alive {
            return;
        }
        self.note(Some(id), "leave asked for".to_string());
        let mut out = std::mem::take(&mut self.effects);
        self.nodes[id].core.leave(self.now, &mut out);
        self.apply_effects(id, &mut out);
        self.effects = out;
        self.reschedule(id);
    }

    /// The membership node `id`'s entity kinds should act on, when it changed since the last
    /// call ([`NodeCore::take_view`]).
    pub fn take_view(&mut self, id: NodeId) -> Option<ClusterView> {
        self.nodes[id].core.take_view()
    }

    /// Sends a local command to node `id` now.
    pub fn command(&mut self, id: NodeId, cmd: Command) {
        if !self.nodes[id].alive {
            return;
        }
        self.note(Some(id), format!("command {cmd:?}"));
        let now = self.now;
        let mut out = std::mem::take(&mut self.effects);
        self.nodes[id]
            .core
            .handle(now, Input::Command(cmd), &mut out);
        self.apply_effects(id, &mut out);
        self.effects = out;
        self.reschedule(id);
    }

    /// Tells node `id` to join through `seeds`.
    pub fn join(&mut self, id: NodeId, seeds: &[NodeId]) {
        let seeds = if self.cfg.seed_aliases {
            seeds
                .iter()
                .map(|&s| {
                    let alias = Self::seed_alias_of(s);
                    if self.aliases.get(&alias) != Some(&s) {
                        self.add_alias(alias.clone(), s);
                    }
                    alias
                })
                .collect()
        } else {
            seeds.iter().map(|s| Self::address_of(*s)).collect()
        };
        self.command(id, Command::JoinSeedNodes(seeds));
    }

    /// Kills node `id` without warning (its messages in flight still arrive).
    pub fn crash(&mut self, id: NodeId) {
        self.note(None, format!("crash node-{id:05}"));
        self.nodes[id].alive = false;
        self.exiting.remove(&id);
        self.unschedule(id);
    }

    /// Freezes node `id` for `d` (a long GC pause): inputs wait, timers fire late.
    pub fn pause(&mut self, id: NodeId, d: Duration) {
        self.note(None, format!("pause node-{id:05} for {}ms", d.as_millis()));
        self.nodes[id].paused_until = Some(self.now + d);
        self.reschedule(id);
    }

    fn note(&mut self, node: Option<NodeId>, what: String) {
        if self.cfg.record_events || node.is_none() {
            self.timeline.push(TimelineEntry {
                at: self.now,
                node,
                what,
            });
        }
    }

    fn unschedule(&mut self, id: NodeId) {
        if let Some(t) = self.timer_of[id].take() {
            self.timers.remove(&(t, id));
        }
    }

    fn reschedule(&mut self, id: NodeId) {
        self.unschedule(id);
        let n = &self.nodes[id];
        if !n.alive {
            return;
        }
        if let Some(mut t) = n.core.poll_timeout() {
            if let Some(p) = n.paused_until {
                t = t.max(p);
            }
            self.timers.insert((t, id));
            self.timer_of[id] = Some(t);
        }
    }

    /// When the next thing happens, if anything will.
    pub fn next_event_at(&self) -> Option<Instant> {
        let q = self.queue.first_key_value().map(|((t, _), _)| *t);
        let i = self.identifications.first_key_value().map(|((t, _), _)| *t);
        let t = self.timers.first().map(|(t, _)| *t);
        [q, i, t, self.sbr_lease.next_at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Processes everything due at the next event time. Returns false when nothing is left.
    pub fn step(&mut self) -> bool {
        let Some(at) = self.next_event_at() else {
            return false;
        };
        self.now = self.now.max(at);
        let now = self.now;
        // Handshake replies, then deliveries, in (time, seq) order, then timers in (time,
        // node) order.
        while let Some(entry) = self.identifications.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let i = entry.remove();
            self.identify(i);
        }
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let d = entry.remove();
            self.deliver(d);
        }
        self.deliver_sbr_lease_answers();
        while let Some(&(t, id)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            self.timer_of[id] = None;
            if !self.nodes[id].alive {
                continue;
            }
            let mut out = std::mem::take(&mut self.effects);
            let overdue = self.nodes[id].core.handle_timeout(now, &mut out);
            if let Some(overdue) = overdue {
                // The node core gave up waiting (it stopped, or confirmed Exiting itself).
                self.exiting.remove(&id);
                self.note(Some(id), format!("overdue: {overdue:?}"));
            }
            self.apply_effects(id, &mut out);
            self.effects = out;
            self.reschedule(id);
            if self.cfg.check_states {
                self.checker
                    .check_node(now, id, self.nodes[id].core.membership());
            }
        }
        true
    }

    /// Runs the lease calls due now and hands their answers to the nodes' cores.
    fn deliver_sbr_lease_answers(&mut self) {
        let now = self.now;
        let nodes = &self.nodes;
        let answers = self.sbr_lease.step(now, |c| {
            let n = &nodes[c.id];
            if !n.alive || n.core.self_node() != &c.node {
                Liveness::Gone
            } else {
                n.paused_until.map_or(Liveness::Alive, Liveness::Paused)
            }
        });
        for (id, input) in answers {
            self.note(Some(id), format!("lease answer: {input:?}"));
            let mut out = std::mem::take(&mut self.effects);
            self.nodes[id].core.handle(now, input, &mut out);
            self.apply_effects(id, &mut out);
            self.effects = out;
            self.reschedule(id);
            if self.cfg.check_states {
                self.checker
                    .check_node(now, id, self.nodes[id].core.membership());
            }
        }
    }

    /// Runs until virtual time `until` (events at exactly `until` included).
    pub fn run_until(&mut self, until: Instant) {
        while self.next_event_at().is_some_and(|t| t <= until) {
            self.step();
        }
        self.now = self.now.max(until);
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    /// Runs until `pred` holds (checked after every step) or `max` virtual time passed.
    /// Returns the instant it first held.
    pub fn run_until_pred(
        &mut self,
        max: Duration,
        mut pred: impl FnMut(&World) -> bool,
    ) -> Option<Instant> {
        let deadline = self.now + max;
        loop {
            if pred(self) {
                return Some(self.now);
            }
            match self.next_event_at() {
                Some(t) if t <= deadline => {
                    self.step();
                }
                _ => {
                    self.now = self.now.max(deadline);
                    return pred(self).then_some(self.now);
                }
            }
        }
    }
}
