//! One node's sharding layer: per entity kind the core's [`KindNode`] (the very composition
//! the runtime drives: view, region, coordinator while hosted here, loopback, leaving) and a
//! model of the entities.
//!
//! This file only drives: it feeds each kind's node its inputs and turns the node's effects
//! into [`Output`]s the world routes, checks and records. It knows nothing of the network.
//!
//! Entities live by the core's entity lifecycle (the runtime's own, see [`super::entities`]):
//! one command at a time, a stop behind the queue (the stop message takes
//! [`entity_stop_delay`](super::ShardingConfig::entity_stop_delay)), passivation, remembered
//! starts, restarts after back-off, timers. They are dropped at once on a forced stop, when
//! their region stops, or when the node dies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use shardik_core::Instant;
use shardik_core::membership::{Member, UniqueAddress};
use shardik_core::sharding::coordinator::LeasesRead;
use shardik_core::sharding::{
    Coordinator, EntityId, Envelope, KindEffect, KindInput, KindNode, KindNodeSettings,
    KindStrategy, LeaseAnswer, LeaseKey, Protocol, Region, Routed, ShardId, ShardingView,
};

use shardik_persistence::{Fence, MemoryStore, WriteResult};

use super::config::ShardingConfig;
use super::durable::{DurableJournal, token_kind};
use super::entities::{
    Handled, RememberedStore, SimAsk, SimCmd, SimEntities, SimHandlers, SimOutput, new_entities,
};
use super::messages::{Output, SimMsg, Wire};
use shardik_core::sharding::entities::{EntitySettings, Job};

/// One kind's pieces on one node.
struct KindState {
    /// Whether the application on this node started the kind. When not, the kind node is
    /// never fed: the node only answers `KindNotStarted` (see [`KindSpec`](super::KindSpec)).
    started: bool,
    /// What the kind's node was built with (the node's settings applied to the kind).
    settings: KindNodeSettings,
    /// How the kind's entities live (likewise).
    entity_settings: EntitySettings,
    node: KindNode<SimMsg>,
    /// The kind's entities (the core's lifecycle)…
    life: SimEntities,
    /// …and their handlers.
    handlers: SimHandlers,
    /// Loads of remembered sets under way: when each ends, and what it read.
    loads: Vec<(Instant, ShardId, Vec<EntityId>)>,
    /// Whether the remembered shards have asked for their homes (at the first membership).
    asked_homes: bool,
}

/// One node incarnation's sharding layer.
pub struct ShardNode {
    me: UniqueAddress,
    cfg: ShardingConfig,
    kinds: Vec<KindState>,
    /// Client messages inside this node's regions (routed here, not yet delivered, forwarded
    /// or dropped): what a crash would take with it.
    holding: BTreeSet<u64>,
    /// Where remembered entities are kept (shared by every node).
    remembered: RememberedStore,
    effects: Vec<KindEffect<SimMsg>>,
    life_out: Vec<SimOutput>,
}

impl ShardNode {
    /// A layer for node `me` with `roles`, created at `now`; its entities persist to `store`
    /// when the configuration makes them durable, are remembered in `remembered`, and number
    /// their incarnations with `incarnations` (shared over the run).
    pub fn new(
        me: UniqueAddress,
        roles: &BTreeSet<String>,
        cfg: &ShardingConfig,
        store: Option<Arc<MemoryStore>>,
        remembered: RememberedStore,
        incarnations: Arc<AtomicU64>,
        now: Instant,
    ) -> Self {
        let sharding = cfg.kind_sharding();
        let kinds = cfg
            .kinds
            .iter()
            .enumerate()
            .map(|(i, k)| {
                // The node's sharding defaults applied to this kind, as the runtime applies
                // them (a kind's own role wins over the configured one).
                let role = sharding.kind_role(k.role.as_deref());
                let proxy = role.as_ref().is_some_and(|r| !roles.contains(r));
                let settings = sharding.kind_node_settings(role, proxy);
                let entity_settings = sharding.entity_settings(cfg.remembers());
                let allocation = sharding.allocation_choice();
                let started = k
                    .not_started_with_role
                    .as_ref()
                    .is_none_or(|r| !roles.contains(r));
                KindState {
                    started,
                    node: KindNode::new(me.clone(), settings.clone(), allocation, now),
                    life: new_entities(&entity_settings, Arc::clone(&incarnations), now),
                    settings,
                    entity_settings,
                    handlers: SimHandlers::new(
                        &cfg.entities,
                        cfg.entity_stop_delay,
                        // Durable entities persist each client command before answering it.
                        cfg.durable
                            .as_ref()
                            .zip(store.as_ref())
                            .map(|(spec, store)| {
                                let reliable = cfg.reliable.as_ref();
                                DurableJournal::new(Arc::clone(store), spec, reliable, &k.name, i)
                            }),
                        now,
                    ),
                    loads: Vec::new(),
                    asked_homes: false,
                }
            })
            .collect();
        ShardNode {
            me,
            cfg: cfg.clone(),
            kinds,
            holding: BTreeSet::new(),
            remembered,
            effects: Vec::new(),
            life_out: Vec::new(),
        }
    }

    /// This node incarnation.
    pub fn me(&self) -> &UniqueAddress {
        &self.me
    }

    /// What kind `kind`'s node was built with: the configuration's sharding defaults as the
    /// runtime applies them to a kind.
    pub fn kind_settings(&self, kind: usize) -> &KindNodeSettings {
        &self.kinds[kind].settings
    }

    /// How kind `kind`'s entities live (passivation, remembering, restart back-off).
    pub fn entity_settings(&self, kind: usize) -> &EntitySettings {
        &self.kinds[kind].entity_settings
    }

    /// Kind `kind`'s region.
    pub fn region(&self, kind: usize) -> &Region<SimMsg> {
        self.kinds[kind].node.region()
    }

    /// Kind `kind`'s view.
    pub fn view(&self, kind: usize) -> &ShardingView {
        self.kinds[kind].node.view()
    }

    /// Kind `kind`'s coordinator, if it runs here.
    pub fn coordinator(&self, kind: usize) -> Option<&Coordinator<KindStrategy>> {
        self.kinds[kind].node.coordinator()
    }

    /// Until when kind `kind`'s coordinator lease may be counted on here, while held.
    pub fn coordinator_lease_deadline(&self, kind: usize) -> Option<Instant> {
        self.kinds[kind].node.coordinator_lease_deadline()
    }

    /// Live entities of kind `kind`, by shard.
    pub fn entities(&self, kind: usize) -> BTreeMap<ShardId, BTreeSet<EntityId>> {
        self.kinds[kind]
            .life
            .entity_ids()
            .into_iter()
            .filter(|(_, ids)| !ids.is_empty())
            .map(|(shard, ids)| (shard, ids.into_iter().collect()))
            .collect()
    }

    /// Whether every region has stopped: the node's exit may be confirmed.
    pub fn all_regions_stopped(&self) -> bool {
        self.kinds.iter().all(|k| !k.started || k.node.is_stopped())
    }

    /// Whether any region is handing its shards off to stop (the node is leaving).
    pub fn is_leaving(&self) -> bool {
        self.kinds
            .iter()
            .any(|k| k.started && k.node.is_shutting_down())
    }

    /// Whether the application on this node started kind `kind`.
    pub fn started(&self, kind: usize) -> bool {
        self.kinds[kind].started
    }

    /// Feeds one input to kind `k` and turns its effects into outputs.
    fn input(&mut self, now: Instant, k: usize, input: KindInput<SimMsg>, out: &mut Vec<Output>) {
        let mut effects = std::mem::take(&mut self.effects);
        self.kinds[k].node.handle(now, input, &mut effects);
        self.apply(now, k, &mut effects, out);
        self.effects = effects;
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
            if !self.kinds[k].started {
                continue;
            }
            let input = KindInput::Membership {
                members: members.to_vec(),
                unreachable: unreachable.clone(),
            };
            self.input(now, k, input, out);
            // As the runtime does once its store answers: the shards with remembered entities
            // ask for a home, so that their entities run again without a message.
            if self.cfg.remembers() && !self.kinds[k].asked_homes {
                self.kinds[k].asked_homes = true;
                for shard in self.remembered.shards(k) {
                    self.input(now, k, KindInput::WantHome(shard), out);
                }
            }
        }
    }

    /// A local client sends `env` through kind `kind`'s region.
    pub fn tell(
        &mut self,
        now: Instant,
        kind: usize,
        env: Envelope<SimMsg>,
        out: &mut Vec<Output>,
    ) {
        assert!(
            self.kinds[kind].started,
            "traffic sent through kind {kind} on {}, which never started it (the runtime \
             refuses such a send: pick the senders)",
            self.me
        );
        self.holding.insert(env.msg.id);
        self.route(now, kind, None, env, out);
    }

    /// Routes `env` through kind `k`'s node as the runtime does ([`KindNode::route`]: a
    /// delivery or a forward to a known home answered at once, the rest as effects).
    fn route(
        &mut self,
        now: Instant,
        k: usize,
        from: Option<UniqueAddress>,
        env: Envelope<SimMsg>,
        out: &mut Vec<Output>,
    ) {
        let mut effects = std::mem::take(&mut self.effects);
        match self.kinds[k].node.route(now, from, env, &mut effects) {
            Routed::Deliver(env) => effects.push(KindEffect::Deliver(env)),
            Routed::Forward { to, env } => effects.push(KindEffect::Forward { to, env }),
            Routed::Effects => {}
        }
        self.apply(now, k, &mut effects, out);
        self.effects = effects;
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
        if !self.kinds[kind].started {
            self.kind_not_started(from, kind, wire, out);
            return;
        }
        match wire {
            Wire::User(env) => {
                self.holding.insert(env.msg.id);
                self.route(now, kind, Some(from.clone()), env, out);
            }
            Wire::Proto(msg) => {
                let input = KindInput::Protocol {
                    from: from.clone(),
                    msg,
                };
                self.input(now, kind, input, out);
            }
            // An answer to a reliable producer is the producer's, which the world runs beside
            // the layer: it never comes here.
            Wire::Reply(_) => {}
        }
    }

    /// What a node that never started `kind` does with a message of it: answers the
    /// coordinator's announcement (echoing its epoch) and a registration (epoch 0) with
    /// `KindNotStarted`, as the runtime's dispatcher does, and ignores the rest. No client
    /// message can come: no shard ever has its home here, so one would be a bug.
    fn kind_not_started(
        &mut self,
        from: &UniqueAddress,
        kind: usize,
        wire: Wire,
        out: &mut Vec<Output>,
    ) {
        let epoch = match wire {
            Wire::Proto(Protocol::CoordinatorStarted { epoch }) => epoch,
            Wire::Proto(Protocol::Register { .. }) => 0,
            Wire::Proto(_) | Wire::Reply(_) => return,
            Wire::User(env) => panic!(
                "message {} of kind {kind} reached {}, which never started the kind",
                env.msg.id, self.me
            ),
        };
        out.push(Output::Send {
            kind,
            to: from.clone(),
            wire: Wire::Proto(Protocol::KindNotStarted { epoch }),
        });
    }

    /// The next instant [`timer`](Self::timer) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.kinds
            .iter()
            .filter(|st| st.started)
            .flat_map(|st| {
                [
                    st.node.poll_timeout(),
                    st.life.poll_timeout(),
                    st.handlers.next_due(),
                    st.loads.iter().map(|(at, ..)| *at).min(),
                ]
            })
            .flatten()
            .min()
    }

    /// Each kind's node judges the time at `now` ([`KindNode::catch_up`]) before its entities
    /// get anything that does not pass through it, as the runtime's kind task does: a shard
    /// whose lease lapsed while this node was paused stops its entities before a handler that
    /// finished, or a store's answer held over the pause, could start one again.
    fn catch_up(&mut self, now: Instant, k: usize, out: &mut Vec<Output>) {
        if !self.kinds[k].started {
            return;
        }
        let mut effects = std::mem::take(&mut self.effects);
        self.kinds[k].node.catch_up(now, &mut effects);
        self.apply(now, k, &mut effects, out);
        self.effects = effects;
    }

    /// Runs what is due at `now`: each kind's node judges the time first, then handlers
    /// finish, the entities' own timers and restarts run, loads of remembered sets start, and
    /// the kind's timers run again if that made them due.
    pub fn timer(&mut self, now: Instant, out: &mut Vec<Output>) {
        for k in 0..self.kinds.len() {
            if !self.kinds[k].started {
                continue;
            }
            self.catch_up(now, k, out);
            self.kinds[k].handlers.now = now;
            while let Some(done) = self.kinds[k].handlers.pop_due(now) {
                self.life(k, now, out, |st, out| {
                    st.life.completed(now, done, &mut st.handlers, out)
                });
            }
            if self.kinds[k].life.poll_timeout().is_some_and(|t| t <= now) {
                self.life(k, now, out, |st, out| {
                    let node = &st.node;
                    st.life.handle_timeout(
                        now,
                        |shard| node.runs_entities(now, shard),
                        &mut st.handlers,
                        out,
                    )
                });
            }
            let loads = std::mem::take(&mut self.kinds[k].loads);
            let (due, later): (Vec<_>, Vec<_>) = loads.into_iter().partition(|(at, ..)| *at <= now);
            self.kinds[k].loads = later;
            for (_, shard, ids) in due {
                if self.kinds[k].node.runs_entities(now, &shard) {
                    self.life(k, now, out, |st, out| {
                        st.life
                            .start_loaded(now, &shard, &ids, true, &mut st.handlers, out);
                    });
                } else {
                    self.kinds[k].life.load_ended(&shard);
                }
            }
            if self.kinds[k].node.poll_timeout().is_some_and(|t| t <= now) {
                let mut effects = std::mem::take(&mut self.effects);
                self.kinds[k].node.handle_timeout(now, &mut effects);
                self.apply(now, k, &mut effects, out);
                self.effects = effects;
            }
        }
    }

    /// Every entity of `shard` has stopped (a durable one after the writes queued before its
    /// stop): the region hears so.
    fn entities_stopped(&mut self, now: Instant, k: usize, shard: ShardId, out: &mut Vec<Output>) {
        self.input(now, k, KindInput::EntitiesStopped(shard), out);
    }

    /// Calls kind `k`'s lifecycle (with its handlers at `now`) and carries out what it asks.
    fn life(
        &mut self,
        k: usize,
        now: Instant,
        out: &mut Vec<Output>,
        f: impl FnOnce(&mut KindState, &mut Vec<SimOutput>),
    ) {
        let mut life_out = std::mem::take(&mut self.life_out);
        let st = &mut self.kinds[k];
        st.handlers.now = now;
        f(st, &mut life_out);
        out.append(&mut st.handlers.durable_out);
        for handled in st.handlers.handled.drain(..) {
            match handled {
                Handled::Command { msg, entity } => out.push(Output::Handled {
                    kind: k,
                    msg,
                    entity,
                }),
                Handled::StrayTick {
                    entity,
                    set_by,
                    got,
                } => out.push(Output::StrayTick {
                    kind: k,
                    entity,
                    set_by,
                    got,
                }),
                Handled::Remembered { shard, entity } => self.remembered.add(k, &shard, &entity),
            }
        }
        for o in life_out.drain(..) {
            match o {
                SimOutput::Reply(SimAsk(Some(msg)), Err(why)) => {
                    out.push(Output::Unhandled { kind: k, msg, why })
                }
                SimOutput::Reply(..) => {}
                SimOutput::ShardEmpty(shard) => self.entities_stopped(now, k, shard, out),
                SimOutput::Started { shard, id } => out.push(Output::EntityStarted {
                    kind: k,
                    shard,
                    entity: id,
                }),
                SimOutput::Stopped { shard, id } => out.push(Output::EntityStopped {
                    kind: k,
                    shard,
                    entity: id,
                }),
                SimOutput::Failed { .. } | SimOutput::Restarted { .. } => {}
                SimOutput::Forget { shard, id } => self.remembered.remove(k, &shard, &id),
                SimOutput::Refused { reply, why, .. } => {
                    if let SimAsk(Some(msg)) = reply {
                        out.push(Output::Unhandled { kind: k, msg, why });
                    }
                }
            }
        }
        self.life_out = life_out;
    }

    /// The store answered lease call `id` of kind `kind`.
    pub fn lease_answered(
        &mut self,
        now: Instant,
        kind: usize,
        key: LeaseKey,
        id: u64,
        answer: LeaseAnswer,
        out: &mut Vec<Output>,
    ) {
        self.input(now, kind, KindInput::LeaseAnswered { key, id, answer }, out);
    }

    /// The store answered read `id` of kind `kind`'s shard leases.
    pub fn leases_read(
        &mut self,
        now: Instant,
        kind: usize,
        id: u64,
        answer: LeasesRead,
        out: &mut Vec<Output>,
    ) {
        self.input(now, kind, KindInput::ShardLeasesRead { id, answer }, out);
    }

    /// The name of kind `kind`'s lease `key` in the store, and so the scope of its fence.
    pub fn lease_name(&self, kind: usize, key: &LeaseKey) -> String {
        let name = &self.cfg.kinds[kind].name;
        match key {
            LeaseKey::Shard(shard) => format!("shard-{name}-{shard}"),
            LeaseKey::Coordinator => format!("coordinator-{name}"),
        }
    }

    /// The store answered a durable entity's write at `now`: its handler finishes.
    pub fn write_done(
        &mut self,
        now: Instant,
        token: u64,
        result: WriteResult,
        out: &mut Vec<Output>,
    ) {
        let k = token_kind(token);
        if k >= self.kinds.len() {
            return;
        }
        self.catch_up(now, k, out);
        self.life(k, now, out, |st, out| {
            if let Some(done) = st.handlers.write_done(token, result) {
                st.life.completed(now, done, &mut st.handlers, out);
            }
        });
    }

    /// The node died (crashed or shut down): every entity, shard and coordinator is gone.
    pub fn kill(&mut self, out: &mut Vec<Output>) {
        let mut lost: Vec<u64> = Vec::new();
        let now = self.kinds.first().map_or(Instant::ZERO, |k| k.handlers.now);
        for k in 0..self.kinds.len() {
            // What was running or waiting in an entity dies with the node.
            lost.extend(self.kinds[k].handlers.kill());
            let mut dying = Vec::new();
            self.force_stop_all(k, now, &mut dying);
            for o in dying {
                match o {
                    Output::Unhandled { msg, .. } => lost.push(msg),
                    other => out.push(other),
                }
            }
            let st = &mut self.kinds[k];
            st.loads.clear();
            for shard in st.node.region().hosted_shards() {
                out.push(Output::ShardStopped {
                    kind: k,
                    shard: shard.clone(),
                });
            }
            if st.node.coordinator().is_some() {
                out.push(Output::Coordinator {
                    kind: k,
                    running: false,
                });
            }
        }
        lost.extend(std::mem::take(&mut self.holding));
        if !lost.is_empty() {
            out.push(Output::LostWithNode { ids: lost });
        }
    }

    /// Drops every entity of kind `k` at once (its region stopped, or the node died).
    fn force_stop_all(&mut self, k: usize, now: Instant, out: &mut Vec<Output>) {
        let shards: Vec<ShardId> = self.kinds[k]
            .life
            .entity_ids()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        for shard in shards {
            self.force_stop(k, now, &shard, out);
        }
    }

    fn force_stop(&mut self, k: usize, now: Instant, shard: &ShardId, out: &mut Vec<Output>) {
        self.kinds[k].handlers.orphan_shard(shard);
        self.life(k, now, out, |st, out| {
            st.life.force_stop_shard(now, shard, &mut st.handlers, out)
        });
    }

    /// Client messages inside this node's regions right now.
    pub fn holding(&self) -> &BTreeSet<u64> {
        &self.holding
    }

    fn apply(
        &mut self,
        now: Instant,
        k: usize,
        effects: &mut Vec<KindEffect<SimMsg>>,
        out: &mut Vec<Output>,
    ) {
        for e in effects.drain(..) {
            match e {
                KindEffect::Send { to, msg } => out.push(Output::Send {
                    kind: k,
                    to,
                    wire: Wire::Proto(msg),
                }),
                KindEffect::Forward { to, env } => {
                    self.holding.remove(&env.msg.id);
                    out.push(Output::Send {
                        kind: k,
                        to,
                        wire: Wire::User(env),
                    })
                }
                KindEffect::Deliver(env) => {
                    self.holding.remove(&env.msg.id);
                    out.push(Output::Delivered {
                        kind: k,
                        env: env.clone(),
                    });
                    let Envelope { entity, shard, msg } = env;
                    let job = Job::new(SimCmd::Client(msg.clone()), SimAsk(Some(msg.id)));
                    self.life(k, now, out, |st, out| {
                        st.life
                            .deliver(now, shard, entity, job, &mut st.handlers, out)
                    });
                }
                KindEffect::ShardStarted(shard) => {
                    if self.cfg.remembers() {
                        // The load reads the store now and starts what it read a moment
                        // later: an entity passivated meanwhile must not start again.
                        self.kinds[k].life.load_started(&shard);
                        let ids = self.remembered.entities(k, &shard);
                        let at = now + Duration::from_millis(1);
                        self.kinds[k].loads.push((at, shard.clone(), ids));
                    }
                    out.push(Output::ShardStarted { kind: k, shard })
                }
                KindEffect::StopEntities(shard) => {
                    self.life(k, now, out, |st, out| {
                        st.life.stop_shard(now, &shard, &mut st.handlers, out)
                    });
                }
                KindEffect::ForceStopEntities(shard) => {
                    // The region already counts them as stopped: no `EntitiesStopped` later.
                    self.force_stop(k, now, &shard, out);
                }
                KindEffect::ShardStopped(shard) => {
                    out.push(Output::ShardStopped { kind: k, shard })
                }
                KindEffect::Dropped { env, reason } => {
                    self.holding.remove(&env.msg.id);
                    out.push(Output::Dropped {
                        kind: k,
                        env,
                        reason,
                    })
                }
                KindEffect::CoordinatorRunning(running) => {
                    out.push(Output::Coordinator { kind: k, running })
                }
                KindEffect::Coordinator(event) => {
                    out.push(Output::CoordinatorEvent { kind: k, event })
                }
                // The simulator's strategy answers on the spot.
                KindEffect::AllocationAsked { .. } | KindEffect::RebalanceAsked { .. } => {}
                KindEffect::Lease(request) => out.push(Output::Lease { kind: k, request }),
                KindEffect::ReadShardLeases { id, shards } => out.push(Output::ReadLeases {
                    kind: k,
                    id,
                    shards,
                }),
                KindEffect::ShardLeased { shard, token } => {
                    let scope = self.lease_name(k, &LeaseKey::Shard(shard.clone()));
                    self.kinds[k]
                        .handlers
                        .set_fence(&shard, Some(Fence::new(scope, token)));
                    out.push(Output::LeaseNote {
                        kind: k,
                        what: format!("shard {shard} leased, token {token}"),
                    });
                }
                KindEffect::ShardLeaseLost { shard, reason } => {
                    self.kinds[k].handlers.set_fence(&shard, None);
                    out.push(Output::LeaseNote {
                        kind: k,
                        what: format!("shard {shard} lease lost ({})", reason.as_str()),
                    });
                }
                KindEffect::CoordinatorLeaseLost(reason) => out.push(Output::LeaseNote {
                    kind: k,
                    what: format!("coordinator lease lost ({})", reason.as_str()),
                }),
                KindEffect::LeaseUnavailable { key, error } => out.push(Output::LeaseNote {
                    kind: k,
                    what: format!("lease {key:?} unavailable: {error}"),
                }),
                KindEffect::LeaseRecovered(_) => {}
                KindEffect::CoordinatorNodeLacksKind(node) => out.push(Output::LeaseNote {
                    kind: k,
                    what: format!("the coordinator's node {node} has not started the kind"),
                }),
                KindEffect::Fenced(closed) => out.push(Output::LeaseNote {
                    kind: k,
                    what: if closed {
                        "self-fenced: no majority for stable-after".into()
                    } else {
                        "self-fence open".into()
                    },
                }),
                KindEffect::RegionStopped => {
                    self.force_stop_all(k, now, out);
                    out.push(Output::RegionStopped { kind: k });
                }
            }
        }
    }
}
