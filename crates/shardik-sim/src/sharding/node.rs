//! One node's sharding layer: per entity kind a [`ShardingView`], a [`Region`], the
//! [`Coordinator`] while this node hosts it, and a model of the entities.
//!
//! The layer is wired the way the runtime wires it: messages the region or coordinator sends
//! to this node loop back locally, coordinator-bound messages go to the coordinator if one
//! runs here (and are ignored otherwise, since registrations go to several candidates), and
//! the rest go to the region. It knows nothing of the network: everything that leaves it is
//! an [`Output`] the world routes, checks and records.
//!
//! Entities are modelled by their lifetime only: one starts on its first delivery, stops
//! [`entity_stop_delay`](super::ShardingConfig::entity_stop_delay) after its shard is told to
//! stop, and is dropped at once on a forced stop, when its region stops, or when the node dies.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use shardik_core::Instant;
use shardik_core::membership::{Member, UniqueAddress};
use shardik_core::sharding::{
    Coordinator, CoordinatorEffect, CoordinatorEvent, DropReason, EntityId, Envelope,
    LeastShardAllocationStrategy, Protocol, Region, RegionEffect, ShardId, ShardingView,
};

use super::config::ShardingConfig;

/// The payload of a simulated client message: who sent it and its number in that sender's
/// stream to the entity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimMsg {
    /// Unique over the run (the ledger's key).
    pub id: u64,
    /// The node incarnation whose client sent it.
    pub sender: UniqueAddress,
    /// 1, 2, 3, … per sender, kind and entity.
    pub seq: u64,
}

/// What travels between nodes' sharding layers.
#[derive(Clone, Debug)]
pub enum Wire {
    /// A protocol message between regions and coordinators.
    Proto(Protocol),
    /// A client message on its way to its shard's home.
    User(Envelope<SimMsg>),
}

/// Something a node's layer did that the world must route, check or record.
#[derive(Clone, Debug)]
pub enum Output {
    /// Send to another node.
    Send {
        /// Entity kind.
        kind: usize,
        /// Destination.
        to: UniqueAddress,
        /// The message.
        wire: Wire,
    },
    /// A message reached its entity.
    Delivered {
        /// Entity kind.
        kind: usize,
        /// The message.
        env: Envelope<SimMsg>,
    },
    /// An entity started.
    EntityStarted {
        /// Entity kind.
        kind: usize,
        /// The entity's shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
    /// An entity stopped.
    EntityStopped {
        /// Entity kind.
        kind: usize,
        /// The entity's shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
    /// The region started hosting a shard.
    ShardStarted {
        /// Entity kind.
        kind: usize,
        /// The shard.
        shard: ShardId,
    },
    /// The region stopped hosting a shard.
    ShardStopped {
        /// Entity kind.
        kind: usize,
        /// The shard.
        shard: ShardId,
    },
    /// The region reported a message as not delivered.
    Dropped {
        /// Entity kind.
        kind: usize,
        /// The message.
        env: Envelope<SimMsg>,
        /// Why.
        reason: DropReason,
    },
    /// The coordinator started (`true`) or stopped here.
    Coordinator {
        /// Entity kind.
        kind: usize,
        /// Started or stopped.
        running: bool,
    },
    /// The coordinator reported something.
    CoordinatorEvent {
        /// Entity kind.
        kind: usize,
        /// What.
        event: CoordinatorEvent,
    },
    /// The region stopped (shutdown complete, or stopped because the node is down).
    RegionStopped {
        /// Entity kind.
        kind: usize,
    },
    /// The node died holding these client messages (buffered, or held for a predecessor).
    LostWithNode {
        /// Message ids.
        ids: Vec<u64>,
    },
}

/// One kind's pieces on one node.
struct KindState {
    view: ShardingView,
    region: Region<SimMsg>,
    coordinator: Option<Coordinator<LeastShardAllocationStrategy>>,
    /// Live entities by shard.
    entities: BTreeMap<ShardId, BTreeSet<EntityId>>,
    /// Shards whose entities are stopping, with the instant they will have stopped.
    stopping: BTreeMap<ShardId, Instant>,
}

/// One node incarnation's sharding layer.
pub struct ShardNode {
    me: UniqueAddress,
    cfg: ShardingConfig,
    kinds: Vec<KindState>,
    loopback: VecDeque<(usize, Wire)>,
    /// Client messages inside this node's regions (routed here, not yet delivered, forwarded
    /// or dropped): what a crash would take with it.
    holding: BTreeSet<u64>,
    region_out: Vec<RegionEffect<SimMsg>>,
    coordinator_out: Vec<CoordinatorEffect>,
    /// A graceful leave was asked for: regions hand off first, then membership leaves.
    leave_requested: bool,
    /// When the regions' graceful shutdown gives up (they are stopped and the node leaves).
    leave_deadline: Option<Instant>,
    /// The membership `Leave` has been issued.
    pub(crate) leave_sent: bool,
}

impl ShardNode {
    /// A layer for node `me` with `roles`, created at `now`.
    pub fn new(
        me: UniqueAddress,
        roles: &BTreeSet<String>,
        cfg: &ShardingConfig,
        now: Instant,
    ) -> Self {
        let kinds = cfg
            .kinds
            .iter()
            .map(|k| {
                let proxy = k.role.as_ref().is_some_and(|r| !roles.contains(r));
                KindState {
                    view: ShardingView::new(me.clone(), k.role.clone(), cfg.down_removal_margin),
                    region: Region::new(me.clone(), proxy, cfg.region.clone(), now),
                    coordinator: None,
                    entities: BTreeMap::new(),
                    stopping: BTreeMap::new(),
                }
            })
            .collect();
        ShardNode {
            me,
            cfg: cfg.clone(),
            kinds,
            loopback: VecDeque::new(),
            holding: BTreeSet::new(),
            region_out: Vec::new(),
            coordinator_out: Vec::new(),
            leave_requested: false,
            leave_deadline: None,
            leave_sent: false,
        }
    }

    /// This node incarnation.
    pub fn me(&self) -> &UniqueAddress {
        &self.me
    }

    /// Kind `kind`'s region.
    pub fn region(&self, kind: usize) -> &Region<SimMsg> {
        &self.kinds[kind].region
    }

    /// Kind `kind`'s view.
    pub fn view(&self, kind: usize) -> &ShardingView {
        &self.kinds[kind].view
    }

    /// Kind `kind`'s coordinator, if it runs here.
    pub fn coordinator(&self, kind: usize) -> Option<&Coordinator<LeastShardAllocationStrategy>> {
        self.kinds[kind].coordinator.as_ref()
    }

    /// Live entities of kind `kind`, by shard.
    pub fn entities(&self, kind: usize) -> &BTreeMap<ShardId, BTreeSet<EntityId>> {
        &self.kinds[kind].entities
    }

    /// Whether every region has stopped.
    pub fn all_regions_stopped(&self) -> bool {
        self.kinds.iter().all(|k| k.region.is_stopped())
    }

    /// Feeds the node's membership state (every member it knows, and the unreachable ones).
    pub fn membership_changed(
        &mut self,
        now: Instant,
        members: &[Member],
        unreachable: &BTreeSet<UniqueAddress>,
        out: &mut Vec<Output>,
    ) {
        for k in 0..self.kinds.len() {
            let changed =
                self.kinds[k]
                    .view
                    .update(now, members.iter().cloned(), unreachable.clone());
            if changed {
                self.view_changed(now, k, out);
            }
        }
        self.drain_loopback(now, out);
    }

    /// Starts or drops the coordinator as the view says, then lets both react to the view.
    fn view_changed(&mut self, now: Instant, k: usize, out: &mut Vec<Output>) {
        let st = &mut self.kinds[k];
        let hosts = st.view.self_hosts_coordinator() && !st.region.is_proxy();
        if hosts && st.coordinator.is_none() {
            st.coordinator = Some(Coordinator::new(
                self.me.clone(),
                self.cfg.coordinator.clone(),
                LeastShardAllocationStrategy::new(20, 0.1),
                now,
            ));
            out.push(Output::Coordinator {
                kind: k,
                running: true,
            });
        } else if !hosts && st.coordinator.is_some() {
            st.coordinator = None;
            out.push(Output::Coordinator {
                kind: k,
                running: false,
            });
        }
        let mut cout = std::mem::take(&mut self.coordinator_out);
        if let Some(c) = &mut st.coordinator {
            c.view_changed(now, &st.view, &mut cout);
        }
        self.coordinator_effects(k, &mut cout, out);
        self.coordinator_out = cout;
        let st = &mut self.kinds[k];
        let mut rout = std::mem::take(&mut self.region_out);
        st.region.view_changed(now, &st.view, &mut rout);
        self.region_effects(now, k, &mut rout, out);
        self.region_out = rout;
    }

    /// A local client sends `env` through kind `kind`'s region.
    pub fn tell(
        &mut self,
        now: Instant,
        kind: usize,
        env: Envelope<SimMsg>,
        out: &mut Vec<Output>,
    ) {
        self.holding.insert(env.msg.id);
        let mut rout = std::mem::take(&mut self.region_out);
        self.kinds[kind].region.route(now, None, env, &mut rout);
        self.region_effects(now, kind, &mut rout, out);
        self.region_out = rout;
        self.drain_loopback(now, out);
    }

    /// A message from node `from` arrived.
    pub fn receive(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        kind: usize,
        wire: Wire,
        out: &mut Vec<Output>,
    ) {
        self.handle(now, from, kind, wire, out);
        self.drain_loopback(now, out);
    }

    fn handle(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        k: usize,
        wire: Wire,
        out: &mut Vec<Output>,
    ) {
        let st = &mut self.kinds[k];
        match wire {
            Wire::User(env) => {
                self.holding.insert(env.msg.id);
                let mut rout = std::mem::take(&mut self.region_out);
                st.region.route(now, Some(from), env, &mut rout);
                self.region_effects(now, k, &mut rout, out);
                self.region_out = rout;
            }
            Wire::Proto(msg) if msg.is_for_coordinator() => {
                // Registrations go to every candidate; only the host of the coordinator answers.
                if let Some(c) = &mut st.coordinator {
                    let mut cout = std::mem::take(&mut self.coordinator_out);
                    c.handle(now, from, msg, &st.view, &mut cout);
                    self.coordinator_effects(k, &mut cout, out);
                    self.coordinator_out = cout;
                }
            }
            Wire::Proto(msg) => {
                let mut rout = std::mem::take(&mut self.region_out);
                st.region.handle(now, from, msg, &st.view, &mut rout);
                self.region_effects(now, k, &mut rout, out);
                self.region_out = rout;
            }
        }
    }

    fn drain_loopback(&mut self, now: Instant, out: &mut Vec<Output>) {
        while let Some((k, wire)) = self.loopback.pop_front() {
            let me = self.me.clone();
            self.handle(now, &me, k, wire, out);
        }
    }

    /// Starts a graceful leave: every region hands its shards off (stopped anyway after the
    /// shutdown timeout); the world issues the membership leave once all have stopped.
    pub fn begin_leave(&mut self, now: Instant, out: &mut Vec<Output>) {
        if self.leave_requested {
            return;
        }
        self.leave_requested = true;
        self.leave_deadline = Some(now + self.cfg.shutdown_timeout);
        for k in 0..self.kinds.len() {
            let mut rout = std::mem::take(&mut self.region_out);
            self.kinds[k].region.graceful_shutdown(&mut rout);
            self.region_effects(now, k, &mut rout, out);
            self.region_out = rout;
        }
        self.drain_loopback(now, out);
    }

    /// Whether a graceful leave was asked for.
    pub fn is_leaving(&self) -> bool {
        self.leave_requested
    }

    /// The shutdown timeout passed: stop what is still running (its buffered messages are
    /// reported dropped, its entities stop at once).
    fn give_up_hand_off(&mut self, now: Instant, out: &mut Vec<Output>) {
        for k in 0..self.kinds.len() {
            let mut rout = std::mem::take(&mut self.region_out);
            self.kinds[k].region.stop(&mut rout);
            self.region_effects(now, k, &mut rout, out);
            self.region_out = rout;
        }
    }

    /// The next instant [`timer`](Self::timer) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = self.leave_deadline.filter(|_| !self.all_regions_stopped());
        self.kinds
            .iter()
            .flat_map(|st| {
                [
                    st.region.poll_timeout(),
                    st.coordinator.as_ref().and_then(|c| c.poll_timeout()),
                    st.view.next_expiry(),
                    st.stopping.values().min().copied(),
                ]
            })
            .flatten()
            .chain(deadline)
            .min()
    }

    /// Runs what is due at `now`: margins expiring, entities finishing their stop, then the
    /// coordinator's and the region's timers.
    pub fn timer(&mut self, now: Instant, out: &mut Vec<Output>) {
        if self.leave_deadline.is_some_and(|t| t <= now) && !self.all_regions_stopped() {
            self.give_up_hand_off(now, out);
        }
        for k in 0..self.kinds.len() {
            if self.kinds[k].view.expire(now) {
                self.view_changed(now, k, out);
            }
            let due: Vec<ShardId> = self.kinds[k]
                .stopping
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(s, _)| s.clone())
                .collect();
            for shard in due {
                self.kinds[k].stopping.remove(&shard);
                self.stop_entities(k, &shard, out);
                let mut rout = std::mem::take(&mut self.region_out);
                self.kinds[k].region.entities_stopped(&shard, &mut rout);
                self.region_effects(now, k, &mut rout, out);
                self.region_out = rout;
            }
            let st = &mut self.kinds[k];
            if let Some(c) = &mut st.coordinator {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    let mut cout = std::mem::take(&mut self.coordinator_out);
                    c.handle_timeout(now, &st.view, &mut cout);
                    self.coordinator_effects(k, &mut cout, out);
                    self.coordinator_out = cout;
                }
            }
            let st = &mut self.kinds[k];
            if st.region.poll_timeout().is_some_and(|t| t <= now) {
                let mut rout = std::mem::take(&mut self.region_out);
                st.region.handle_timeout(now, &st.view, &mut rout);
                self.region_effects(now, k, &mut rout, out);
                self.region_out = rout;
            }
        }
        self.drain_loopback(now, out);
    }

    /// The node died (crashed or shut down): every entity, shard and coordinator is gone.
    pub fn kill(&mut self, out: &mut Vec<Output>) {
        for k in 0..self.kinds.len() {
            let shards: Vec<ShardId> = self.kinds[k].entities.keys().cloned().collect();
            for shard in shards {
                self.stop_entities(k, &shard, out);
            }
            let st = &mut self.kinds[k];
            st.stopping.clear();
            for shard in st.region.hosted_shards() {
                out.push(Output::ShardStopped {
                    kind: k,
                    shard: shard.clone(),
                });
            }
            if st.coordinator.take().is_some() {
                out.push(Output::Coordinator {
                    kind: k,
                    running: false,
                });
            }
        }
        self.loopback.clear();
        let ids: Vec<u64> = std::mem::take(&mut self.holding).into_iter().collect();
        if !ids.is_empty() {
            out.push(Output::LostWithNode { ids });
        }
    }

    /// Client messages inside this node's regions right now.
    pub fn holding(&self) -> &BTreeSet<u64> {
        &self.holding
    }

    fn stop_entities(&mut self, k: usize, shard: &ShardId, out: &mut Vec<Output>) {
        if let Some(entities) = self.kinds[k].entities.remove(shard) {
            for entity in entities {
                out.push(Output::EntityStopped {
                    kind: k,
                    shard: shard.clone(),
                    entity,
                });
            }
        }
    }

    fn send(&mut self, k: usize, to: UniqueAddress, wire: Wire, out: &mut Vec<Output>) {
        if to == self.me {
            self.loopback.push_back((k, wire));
        } else {
            out.push(Output::Send { kind: k, to, wire });
        }
    }

    fn coordinator_effects(
        &mut self,
        k: usize,
        effects: &mut Vec<CoordinatorEffect>,
        out: &mut Vec<Output>,
    ) {
        for e in effects.drain(..) {
            match e {
                CoordinatorEffect::Send { to, msg } => self.send(k, to, Wire::Proto(msg), out),
                CoordinatorEffect::Event(event) => {
                    out.push(Output::CoordinatorEvent { kind: k, event })
                }
            }
        }
    }

    fn region_effects(
        &mut self,
        now: Instant,
        k: usize,
        effects: &mut Vec<RegionEffect<SimMsg>>,
        out: &mut Vec<Output>,
    ) {
        for e in effects.drain(..) {
            match e {
                RegionEffect::Send { to, msg } => self.send(k, to, Wire::Proto(msg), out),
                RegionEffect::Forward { to, env } => {
                    self.holding.remove(&env.msg.id);
                    self.send(k, to, Wire::User(env), out)
                }
                RegionEffect::Deliver(env) => {
                    self.holding.remove(&env.msg.id);
                    let started = self.kinds[k]
                        .entities
                        .entry(env.shard.clone())
                        .or_default()
                        .insert(env.entity.clone());
                    if started {
                        out.push(Output::EntityStarted {
                            kind: k,
                            shard: env.shard.clone(),
                            entity: env.entity.clone(),
                        });
                    }
                    out.push(Output::Delivered { kind: k, env });
                }
                RegionEffect::ShardStarted(shard) => {
                    out.push(Output::ShardStarted { kind: k, shard })
                }
                RegionEffect::StopEntities(shard) => {
                    let at = now + self.cfg.entity_stop_delay.max(Duration::from_nanos(1));
                    self.kinds[k].stopping.insert(shard, at);
                }
                RegionEffect::ForceStopEntities(shard) => {
                    // The region already counts them as stopped: no `entities_stopped` later.
                    self.kinds[k].stopping.remove(&shard);
                    self.stop_entities(k, &shard, out);
                }
                RegionEffect::ShardStopped(shard) => {
                    out.push(Output::ShardStopped { kind: k, shard })
                }
                RegionEffect::Dropped { env, reason } => {
                    self.holding.remove(&env.msg.id);
                    out.push(Output::Dropped {
                        kind: k,
                        env,
                        reason,
                    })
                }
                RegionEffect::ShutdownComplete => {
                    let shards: Vec<ShardId> = self.kinds[k].entities.keys().cloned().collect();
                    for shard in shards {
                        self.stop_entities(k, &shard, out);
                    }
                    self.kinds[k].stopping.clear();
                    out.push(Output::RegionStopped { kind: k });
                }
            }
        }
    }
}
