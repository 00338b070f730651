//! The task that runs one entity kind on one node: a thin driver of the core's [`KindNode`]
//! (the kind's view, region, coordinator while hosted here, loopback and leaving, the same
//! composition the simulator drives) and the owner of the kind's entities. It feeds the node
//! messages, membership changes and timer expiries, and turns its effects into channel sends,
//! network frames and entity calls. Every protocol decision is the core's.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use shardik_core::Instant as CoreInstant;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{
    CoordinatorEvent, CoordinatorSettings, DropReason, EntityId, Envelope, KindEffect, KindInput,
    KindNode, KindNodeSettings, LeaseKey, Protocol, RegionSettings, Routed, ShardId,
};
use shardik_wire::{
    EnvelopeBatch, IdCache, ReplyError, ReplyErrorKind, ShardingBody, ShardingFrame, WireEnvelope,
    WireReply, batch_item_len, encode_batch_item, encode_sharding,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant as TokioInstant;
use tracing::{debug, info, warn};

use super::allocation::{answer_allocation, answer_rebalance};
use super::api::{Codec, CodecError, Entity, ShardingError};
use super::handlers::{Asker, Completed, Entities, Handlers, HostOutput, Job, RemoteAsker};
use super::messages::{Control, LocalMsg, Payload, RegionState};
use super::outgoing::Outgoing;
use super::pending::PendingAsks;
use super::remember::{self, RememberSettings, RememberWriter};
use super::resolve::{Resolver, decoding_with};
use super::strategy::KindAllocation;
use crate::handle::MembershipSnapshot;
use crate::metrics as m;
use crate::transport::UserSender;

/// Settings of one kind's task.
#[derive(Clone)]
pub(crate) struct KindSettings {
    pub region: RegionSettings,
    pub coordinator: CoordinatorSettings,
    pub allocation: shardik_core::sharding::AllocationSettings,
    pub down_removal_margin: Duration,
    /// How long the hand-off on leaving may take.
    pub shutdown_timeout: Duration,
    pub proxy: bool,
    pub role: Option<String>,
    /// The coordinator's lease (`coordinator-singleton.use-lease`); the shards' is
    /// `region.lease`.
    pub coordinator_lease: Option<shardik_core::sharding::LeaseTiming>,
    /// See [`super::ShardingConfig::self_fence_after`].
    pub self_fence_after: Option<Duration>,
}

/// Most inputs from the control channel (remote traffic) handled in one turn of the loop.
const CONTROL_BATCH: usize = 256;

pub(crate) struct KindTask<E: Entity, C: Codec> {
    pub name: Arc<str>,
    pub me: UniqueAddress,
    pub codec: Arc<C>,
    pub settings: KindSettings,
    /// The kind's entities: what runs when (the core's lifecycle)…
    pub entities: Entities<E>,
    /// …and what runs it.
    pub handlers: Handlers<E>,
    pub sender: UserSender,
    pub pending: PendingAsks,
    pub local: super::local_queue::Receiver<LocalMsg<E>>,
    pub control: mpsc::Receiver<Control>,
    pub membership: watch::Receiver<Arc<MembershipSnapshot>>,
    /// How the kind's coordinator places shards.
    pub allocation: KindAllocation,
    /// The way back to this task for answers of an asynchronous strategy (weak, so that a
    /// strategy never keeps its own task's queue open).
    pub control_back: mpsc::WeakSender<Control>,
    /// This node's kinds, for the `EntityRef`s inside decoded commands and replies.
    pub resolver: Resolver,
    /// Where the kind's running entities are remembered, if it remembers them.
    pub remember: Option<RememberSettings>,
    /// The kind's leases, when `use-lease` or the coordinator's lease is on (never on a
    /// proxy).
    pub leases: Option<super::leases::KindLeases>,
    /// Where this kind says that its coordinator waits for silent members (for `/ready`).
    pub held_back: Arc<super::held_back::HeldBack>,
}

struct State<E: Entity> {
    epoch: TokioInstant,
    node: KindNode<Payload<E>>,
    outgoing: Outgoing,
    /// Where a command for another node is encoded before it is copied into its frame.
    payload: Vec<u8>,
    /// Shard ids named by batches from other nodes, so that each envelope does not allocate
    /// its own.
    shard_ids: IdCache,
    gauges: KindGauges,
    effects: Vec<KindEffect<Payload<E>>>,
    host_out: Vec<HostOutput<E>>,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    shutdown_done: bool,
    /// Deliveries not yet added to the `delivered` counter (added once per loop turn).
    delivered: u64,
    /// One warning a minute at most that the coordinator's node has not started the kind
    /// (this region's registration is answered so at every retry).
    coordinator_lacks_kind_log: crate::log_limit::LogLimit,
    /// The clock as read once for the input being handled (a batch of commands, a completion,
    /// control messages): reading it per delivered command cost more than the routing.
    turn_clock: Option<CoreInstant>,
}

impl<E: Entity, C: Codec> KindTask<E, C> {
    pub async fn run(mut self) {
        if let Some(remember) = &self.remember {
            self.handlers.set_remember(RememberWriter::spawn(
                self.name.clone(),
                Arc::clone(&remember.store),
            ));
            if !self.settings.proxy {
                tokio::spawn(remember::load_shards(
                    self.name.clone(),
                    remember.clone(),
                    self.settings.region.retry_interval,
                    self.control_back.clone(),
                ));
            }
        }
        let epoch = TokioInstant::now();
        let node = KindNode::new(
            self.me.clone(),
            KindNodeSettings {
                region: self.settings.region.clone(),
                coordinator: self.settings.coordinator.clone(),
                role: self.settings.role.clone(),
                proxy: self.settings.proxy,
                down_removal_margin: self.settings.down_removal_margin,
                shutdown_timeout: self.settings.shutdown_timeout,
                coordinator_lease: self.settings.coordinator_lease,
                self_fence_after: self.settings.self_fence_after,
            },
            self.allocation.choice(self.settings.allocation),
            CoreInstant::ZERO,
        );
        let mut st = State {
            epoch,
            node,
            outgoing: Outgoing::new(self.name.clone()),
            payload: Vec::new(),
            shard_ids: IdCache::default(),
            effects: Vec::new(),
            host_out: Vec::new(),
            shutdown_waiters: Vec::new(),
            shutdown_done: false,
            delivered: 0,
            gauges: KindGauges::new(&self.name),
            turn_clock: None,
            coordinator_lacks_kind_log: crate::log_limit::LogLimit::new(Duration::from_secs(60)),
        };
        self.membership_changed(&mut st);
        let mut batch: Vec<LocalMsg<E>> = Vec::with_capacity(256);
        let queue_limit = self.settings.region.buffer_size.max(1);
        let mut local_open = true;
        // One timer for the task's life, moved only when the next deadline moves: a new one
        // each turn registered and removed a timer-wheel entry per turn, under the driver's
        // lock, which a busy kind paid on every batch it took.
        let timer = tokio::time::sleep_until(epoch);
        tokio::pin!(timer);
        let mut armed: Option<TokioInstant> = None;
        loop {
            self.flush(&mut st).await;
            self.publish_gauges(&mut st);
            let next = self.next_deadline(&st);
            if next != armed {
                if let Some(t) = next {
                    timer.as_mut().reset(t);
                }
                armed = next;
            }
            let accept = self.entities.queued() < queue_limit;
            st.turn_clock = None;
            tokio::select! {
                biased;
                changed = self.membership.changed() => {
                    if changed.is_err() {
                        // The node stopped: stop the region (entities are dropped).
                        self.input(&mut st, KindInput::Stop);
                        self.flush(&mut st).await;
                        return;
                    }
                    self.membership_changed(&mut st);
                }
                Some(ctl) = self.control.recv() => {
                    st.turn_clock = Some(self.read_clock(&st));
                    self.on_control(&mut st, ctl);
                    // A turn of this loop has fixed costs (deadlines, gauges, which walk the
                    // hosted shards): take what else is queued now, each settled as after a
                    // turn of its own; their network sends go out together below.
                    for _ in 1..CONTROL_BATCH {
                        match self.control.try_recv() {
                            Ok(ctl) => self.on_control(&mut st, ctl),
                            Err(_) => break,
                        }
                    }
                }
                Some(done) = self.handlers.running_mut().next(), if self.handlers.has_running() => {
                    st.turn_clock = Some(self.read_clock(&st));
                    self.complete(&mut st, done);
                }
                n = self.local.recv_many(&mut batch, 256), if accept && local_open => {
                    if n == 0 {
                        // Every region handle is gone; keep serving remote traffic.
                        local_open = false;
                    }
                    st.turn_clock = Some(self.read_clock(&st));
                    for msg in batch.drain(..) {
                        let env = Envelope {
                            entity: msg.ids.id.clone(),
                            shard: msg.ids.shard.clone(),
                            msg: Payload::Local { cmd: msg.cmd, reply: msg.reply },
                        };
                        self.route(&mut st, None, env);
                    }
                }
                _ = &mut timer, if armed.is_some() => {
                    // A fired timer stays elapsed until it is reset: arm it anew next turn.
                    armed = None;
                    self.on_timer(&mut st);
                }
            }
        }
    }

    /// Now: the clock read for the current input, or read afresh outside of one.
    fn now(&self, st: &State<E>) -> CoreInstant {
        st.turn_clock.unwrap_or_else(|| self.read_clock(st))
    }

    fn read_clock(&self, st: &State<E>) -> CoreInstant {
        CoreInstant::from_nanos(
            TokioInstant::now()
                .saturating_duration_since(st.epoch)
                .as_nanos() as u64,
        )
    }

    fn tokio_at(&self, st: &State<E>, t: CoreInstant) -> TokioInstant {
        st.epoch + Duration::from_nanos(t.as_nanos())
    }

    fn next_deadline(&self, st: &State<E>) -> Option<TokioInstant> {
        st.node
            .poll_timeout()
            .into_iter()
            .chain(self.entities.poll_timeout())
            .min()
            .map(|t| self.tokio_at(st, t))
    }

    /// Feeds the core one input and carries out what it asks for.
    fn input(&mut self, st: &mut State<E>, input: KindInput<Payload<E>>) {
        let now = self.now(st);
        let mut out = std::mem::take(&mut st.effects);
        st.node.handle(now, input, &mut out);
        self.apply_effects(st, &mut out);
        st.effects = out;
    }

    /// Routes one message: the core decides once ([`KindNode::route`]); a delivery or a
    /// forward to a known home (most messages) is carried out at once, with no effect built.
    fn route(&mut self, st: &mut State<E>, from: Option<UniqueAddress>, env: Envelope<Payload<E>>) {
        let now = self.now(st);
        let mut out = std::mem::take(&mut st.effects);
        match st.node.route(now, from, env, &mut out) {
            Routed::Deliver(env) => self.deliver(st, env),
            Routed::Forward { to, env } => self.forward(st, &to, env),
            Routed::Effects => self.apply_effects(st, &mut out),
        }
        st.effects = out;
    }

    fn membership_changed(&mut self, st: &mut State<E>) {
        let snap = self.membership.borrow_and_update().clone();
        let unreachable = snap.unreachable.iter().map(|u| u.node.clone()).collect();
        let members = snap.members.clone();
        self.input(
            st,
            KindInput::Membership {
                members,
                unreachable,
            },
        );
    }

    fn on_timer(&mut self, st: &mut State<E>) {
        let now = self.now(st);
        if self.entities.poll_timeout().is_some_and(|t| t <= now) {
            let mut out = std::mem::take(&mut st.host_out);
            let node = &st.node;
            // A failed remembered entity starts again only if its shard still runs here.
            self.entities.handle_timeout(
                now,
                |shard| node.runs_entities(now, shard),
                &mut self.handlers,
                &mut out,
            );
            st.host_out = out;
            self.apply_host_outputs(st);
        }
        if st.node.poll_timeout().is_some_and(|t| t <= now) {
            let mut out = std::mem::take(&mut st.effects);
            st.node.handle_timeout(now, &mut out);
            self.apply_effects(st, &mut out);
            st.effects = out;
        }
    }

    /// Routes an envelope that arrived from `from`; an ask is answered to `from`.
    fn route_remote(&mut self, st: &mut State<E>, from: &UniqueAddress, env: WireEnvelope) {
        let env = Envelope {
            entity: self.entities.entity_id(&env.entity_id),
            shard: env.shard,
            msg: Payload::Remote {
                bytes: env.payload,
                reply_to: env.ask_id.map(|id| (from.clone(), id)),
            },
        };
        self.route(st, Some(from.clone()), env);
    }

    /// A batch from another node, read in place. An envelope for a shard that runs here goes
    /// straight to its entity, under the host's own copy of the entity's id and with its
    /// command decoded from the frame's bytes: nothing is allocated or shared for it. Any other
    /// is routed as a single envelope.
    fn route_batch(&mut self, st: &mut State<E>, from: &UniqueAddress, batch: &EnvelopeBatch) {
        // One decoding scope for the batch rather than one per command.
        let resolver = self.resolver.clone();
        decoding_with(&resolver, || {
            for env in batch.iter() {
                let shard = st.shard_ids.get(env.shard);
                let entity = self.entities.entity_id(env.entity_id);
                let reply_to = env.ask_id.map(|id| (from.clone(), id));
                // `KindNode::route`'s first answer, asked before the envelope is built so that
                // a delivery decodes straight from the frame.
                if st.node.delivers_at_once(&shard) {
                    match self.codec.decode::<E::Command>(env.payload) {
                        Ok(cmd) => self.deliver_job(st, shard, entity, remote_job(cmd, reply_to)),
                        Err(e) => self.undecodable(st, &entity, reply_to, e),
                    }
                } else {
                    let env = Envelope {
                        entity,
                        shard,
                        msg: Payload::Remote {
                            bytes: env.payload_bytes(),
                            reply_to,
                        },
                    };
                    self.route(st, Some(from.clone()), env);
                }
            }
        });
    }

    fn on_control(&mut self, st: &mut State<E>, ctl: Control) {
        match ctl {
            Control::Remote { from, env } => self.route_remote(st, &from, env),
            Control::RemoteBatch { from, batch } => self.route_batch(st, &from, &batch),
            Control::Protocol { from, msg } => self.input(st, KindInput::Protocol { from, msg }),
            Control::State(tx) => {
                let _ = tx.send(RegionState {
                    shards: self.host_shards(st),
                    registered: st.node.region().coordinator().is_some(),
                    buffered: st.node.region().buffered(),
                });
            }
            Control::Stats(tx) => {
                let mut counts: std::collections::BTreeMap<ShardId, usize> = st
                    .node
                    .region()
                    .hosted_shards()
                    .map(|s| (s.clone(), 0))
                    .collect();
                counts.extend(self.entities.entity_counts());
                let _ = tx.send(counts.into_iter().collect());
            }
            Control::AllocationAnswered {
                requester,
                shard,
                answer,
            } => self.input(
                st,
                KindInput::AllocationAnswered {
                    requester,
                    shard,
                    answer,
                },
            ),
            Control::WantHomes(shards) => {
                for shard in shards {
                    self.input(st, KindInput::WantHome(shard));
                }
            }
            Control::StartRemembered { shard, ids, last } => {
                let now = self.now(st);
                if st.node.runs_entities(now, &shard) {
                    let mut out = std::mem::take(&mut st.host_out);
                    let started = self.entities.start_loaded(
                        now,
                        &shard,
                        &ids,
                        last,
                        &mut self.handlers,
                        &mut out,
                    );
                    st.host_out = out;
                    self.apply_host_outputs(st);
                    debug!(kind = %self.name, %shard, started, "remembered entities started");
                } else if last {
                    self.entities.load_ended(&shard);
                }
            }
            Control::RebalanceAnswered(moves) => {
                self.input(st, KindInput::RebalanceAnswered(moves))
            }
            Control::LeaseAnswered { key, id, answer } => {
                self.input(st, KindInput::LeaseAnswered { key, id, answer })
            }
            Control::Shutdown(tx) => {
                if st.shutdown_done {
                    let _ = tx.send(());
                    return;
                }
                st.shutdown_waiters.push(tx);
                self.input(st, KindInput::Shutdown);
            }
        }
    }

    /// Hosted shards with their live entities (shards without entities included).
    fn host_shards(&self, st: &State<E>) -> Vec<(ShardId, Vec<EntityId>)> {
        let mut by_shard: std::collections::BTreeMap<ShardId, Vec<EntityId>> = st
            .node
            .region()
            .hosted_shards()
            .map(|s| (s.clone(), Vec::new()))
            .collect();
        for (shard, ids) in self.entities.entity_ids() {
            by_shard.entry(shard).or_default().extend(ids);
        }
        by_shard.into_iter().collect()
    }

    /// Hands a finished handler back to the lifecycle and carries out what follows.
    fn complete(&mut self, st: &mut State<E>, done: Completed<E>) {
        let now = self.now(st);
        let mut out = std::mem::take(&mut st.host_out);
        self.entities
            .completed(now, done, &mut self.handlers, &mut out);
        st.host_out = out;
        self.apply_host_outputs(st);
    }

    fn send_protocol(&mut self, st: &mut State<E>, to: UniqueAddress, msg: Protocol) {
        let frame = ShardingFrame {
            kind: self.name.clone(),
            body: ShardingBody::Protocol(msg),
        };
        st.outgoing.frame(&to, encode_sharding(&frame));
    }

    fn apply_effects(&mut self, st: &mut State<E>, effects: &mut Vec<KindEffect<Payload<E>>>) {
        for e in effects.drain(..) {
            match e {
                KindEffect::Send { to, msg } => self.send_protocol(st, to, msg),
                KindEffect::Forward { to, env } => self.forward(st, &to, env),
                KindEffect::Deliver(env) => self.deliver(st, env),
                KindEffect::ShardStarted(shard) => {
                    debug!(kind = %self.name, %shard, "shard started here");
                    if let Some(remember) = &self.remember {
                        self.entities.load_started(&shard);
                        tokio::spawn(remember::load_and_start(
                            self.name.clone(),
                            shard,
                            remember.clone(),
                            self.settings.region.retry_interval,
                            self.control_back.clone(),
                        ));
                    }
                }
                KindEffect::StopEntities(shard) => {
                    let now = self.now(st);
                    let mut out = std::mem::take(&mut st.host_out);
                    self.entities
                        .stop_shard(now, &shard, &mut self.handlers, &mut out);
                    st.host_out = out;
                    self.apply_host_outputs(st);
                }
                KindEffect::ForceStopEntities(shard) => {
                    let now = self.now(st);
                    let mut out = std::mem::take(&mut st.host_out);
                    self.entities
                        .force_stop_shard(now, &shard, &mut self.handlers, &mut out);
                    st.host_out = out;
                    self.apply_host_outputs(st);
                }
                KindEffect::ShardStopped(shard) => {
                    debug!(kind = %self.name, %shard, "shard stopped here");
                    if let Some(leases) = &self.leases {
                        self.handlers.clear_fence(&shard);
                        let name = leases.name(&LeaseKey::Shard(shard));
                        leases.health().recovered(&name);
                    }
                }
                KindEffect::Lease(request) => {
                    if let Some(leases) = &self.leases {
                        leases.call(request, self.control_back.clone());
                    }
                }
                KindEffect::ShardLeased { shard, token } => {
                    if let Some(leases) = &self.leases {
                        let fence = leases.fence(&shard, token);
                        leases.health().recovered(&fence.scope);
                        info!(kind = %self.name, %shard, token, "shard lease acquired");
                        self.handlers.set_fence(shard, fence);
                    }
                }
                KindEffect::ShardLeaseLost { shard, reason } => {
                    self.handlers.clear_fence(&shard);
                    metrics::counter!(m::LEASE_LOSSES_TOTAL, "reason" => reason.as_str())
                        .increment(1);
                    warn!(kind = %self.name, %shard, reason = reason.as_str(), "shard lease lost: its entities were stopped");
                }
                KindEffect::Fenced(true) => {
                    metrics::counter!(m::SELF_FENCES_TOTAL).increment(1);
                    warn!(kind = %self.name, "no majority seen for the resolver's decision time: this node stopped its shards and coordinator until it sees one again (self-fence)");
                }
                KindEffect::Fenced(false) => {
                    info!(kind = %self.name, "a majority is back: shards run here again")
                }
                KindEffect::CoordinatorLeaseLost(reason) => {
                    metrics::counter!(m::LEASE_LOSSES_TOTAL, "reason" => reason.as_str())
                        .increment(1);
                    warn!(kind = %self.name, reason = reason.as_str(), "coordinator lease lost: the coordinator stopped");
                }
                KindEffect::LeaseUnavailable { key, error } => {
                    warn!(kind = %self.name, lease = ?key, %error, "lease store failing");
                    if let Some(leases) = &self.leases {
                        leases.health().failed(leases.name(&key), error);
                    }
                }
                KindEffect::LeaseRecovered(key) => {
                    info!(kind = %self.name, lease = ?key, "lease no longer failing (its store answers again, or it is no longer wanted)");
                    if let Some(leases) = &self.leases {
                        leases.health().recovered(&leases.name(&key));
                    }
                }
                KindEffect::Dropped { env, reason } => self.dropped(st, env, reason),
                KindEffect::CoordinatorRunning(true) => {
                    info!(kind = %self.name, "this node now runs the coordinator");
                    if let Some(leases) = &self.leases {
                        leases
                            .health()
                            .recovered(&leases.name(&LeaseKey::Coordinator));
                    }
                }
                KindEffect::CoordinatorRunning(false) => {
                    info!(kind = %self.name, "this node no longer runs the coordinator");
                    self.allocation_proceeds(st);
                }
                KindEffect::Coordinator(CoordinatorEvent::RegionsUnheard(silent)) => {
                    self.warn_unheard(st, &silent)
                }
                KindEffect::Coordinator(CoordinatorEvent::StateComplete) => {
                    info!(kind = %self.name, "coordinator heard from every region: allocating");
                    self.allocation_proceeds(st);
                }
                KindEffect::Coordinator(ev) => log_coordinator_event(&self.name, &ev),
                KindEffect::CoordinatorNodeLacksKind(node) => {
                    if st.coordinator_lacks_kind_log.check().is_some() {
                        warn!(
                            kind = %self.name,
                            coordinator_node = %node.address,
                            "the oldest member, {}, which must run the coordinator of entity kind \
                             {}, has not started that kind: no shard of it can be allocated \
                             until that node calls sharding().init for {} or leaves the cluster",
                            node.address, self.name, self.name
                        );
                    }
                }
                KindEffect::AllocationAsked {
                    requester,
                    shard,
                    snapshot,
                } => {
                    if let Some(strategy) = self.allocation.deferred() {
                        answer_allocation(
                            strategy,
                            self.control_back.clone(),
                            requester,
                            shard,
                            snapshot,
                        );
                    }
                }
                KindEffect::RebalanceAsked {
                    snapshot,
                    in_progress,
                } => {
                    if let Some(strategy) = self.allocation.deferred() {
                        answer_rebalance(
                            strategy,
                            self.control_back.clone(),
                            snapshot,
                            in_progress,
                        );
                    }
                }
                KindEffect::RegionStopped => {
                    info!(kind = %self.name, "region stopped");
                    st.shutdown_done = true;
                    for w in st.shutdown_waiters.drain(..) {
                        let _ = w.send(());
                    }
                }
            }
        }
    }

    fn apply_host_outputs(&mut self, st: &mut State<E>) {
        if st.host_out.is_empty() {
            return;
        }
        let mut outputs = std::mem::take(&mut st.host_out);
        for o in outputs.drain(..) {
            match o {
                HostOutput::Reply(to, result) => self.reply(st, to, result),
                HostOutput::ShardEmpty(shard) => {
                    self.input(st, KindInput::EntitiesStopped(shard));
                }
                // The lifecycle's own record of incarnations; the gauge counts them.
                HostOutput::Started { .. } | HostOutput::Stopped { .. } => {}
                HostOutput::Failed { shard, id, why } => {
                    tracing::error!(kind = %self.name, entity = %id, %shard, %why, "entity failed; this incarnation is dropped");
                    metrics::counter!(m::ENTITY_FAILURES_TOTAL).increment(1);
                }
                HostOutput::Forget { shard, id } => {
                    if let Some(writer) = self.handlers.remember_writer() {
                        writer.stopped(&shard, &id);
                    }
                }
                HostOutput::Restarted { shard, id } => {
                    info!(kind = %self.name, entity = %id, %shard, "failed remembered entity started again after entity-restart-backoff");
                }
                HostOutput::Refused { id, reply, why } => {
                    self.count_drop("wrong-shard");
                    warn!(kind = %self.name, entity = %id, %why, "command refused");
                    self.reply(st, reply, Err(why));
                }
            }
        }
        // Kept for the next completion: handing out a fresh vector each time cost an
        // allocation and a free per command.
        if st.host_out.is_empty() {
            st.host_out = outputs;
        }
    }

    fn deliver(&mut self, st: &mut State<E>, env: Envelope<Payload<E>>) {
        let job = match env.msg {
            Payload::Local { cmd, reply } => Job {
                cmd,
                reply: match reply {
                    Some(r) => Asker::Local(r.tx),
                    None => Asker::None,
                },
                from_context: false,
            },
            Payload::Remote { bytes, reply_to } => {
                match decoding_with(&self.resolver, || self.codec.decode::<E::Command>(&bytes)) {
                    Ok(cmd) => remote_job(cmd, reply_to),
                    Err(e) => return self.undecodable(st, &env.entity, reply_to, e),
                }
            }
        };
        self.deliver_job(st, env.shard, env.entity, job);
    }

    /// Hands a command to its entity, which runs here.
    fn deliver_job(&mut self, st: &mut State<E>, shard: ShardId, entity: EntityId, job: Job<E>) {
        let now = self.now(st);
        st.delivered += 1;
        let mut out = std::mem::take(&mut st.host_out);
        self.entities
            .deliver(now, shard, entity, job, &mut self.handlers, &mut out);
        st.host_out = out;
        self.apply_host_outputs(st);
    }

    /// A command from another node that the kind's codec could not read: counted, and its
    /// asker, if any, told why.
    fn undecodable(
        &mut self,
        st: &mut State<E>,
        entity: &EntityId,
        reply_to: Option<(UniqueAddress, NonZeroU64)>,
        e: CodecError,
    ) {
        self.count_drop("decode-failed");
        warn!(kind = %self.name, entity = %entity, error = %e, "command could not be decoded: dropped");
        if let Some((node, ask_id)) = reply_to {
            self.send_reply_error(
                st,
                node,
                ask_id,
                ReplyErrorKind::DecodeFailed,
                e.to_string(),
            );
        }
    }

    fn forward(&mut self, st: &mut State<E>, to: &UniqueAddress, env: Envelope<Payload<E>>) {
        match env.msg {
            Payload::Remote { bytes, reply_to } => {
                // Passing through (the home moved while the message was on its way). The next
                // hop answers us, so an ask gets a relay entry here that sends the answer on to
                // the original asker.
                let relay_id = reply_to.map(|(node, ask_id)| {
                    let sender = self.sender.clone();
                    let kind = self.name.clone();
                    let deadline = TokioInstant::now() + self.settings.region.handoff_timeout;
                    self.pending.register(deadline, move |result| {
                        let result = result.map_err(|e| ReplyError {
                            kind: reply_error_kind(&e),
                            message: e.to_string(),
                        });
                        let frame = ShardingFrame {
                            kind,
                            body: ShardingBody::Reply(WireReply {
                                ask_id: ask_id.get(),
                                result,
                            }),
                        };
                        tokio::spawn(async move {
                            sender.send(&node.address, encode_sharding(&frame)).await;
                        });
                    })
                });
                let len = batch_item_len(&env.entity, &env.shard, bytes.len(), relay_id);
                st.outgoing.envelope(to, len, |buf| {
                    encode_batch_item(&env.entity, &env.shard, &bytes, relay_id, buf)
                });
            }
            Payload::Local { cmd, reply } => {
                // Encoded into a buffer kept for the task's life, and from there into the
                // batch frame: no allocation per command.
                st.payload.clear();
                if let Err(e) = self.codec.encode_into(&cmd, &mut st.payload) {
                    {
                        self.count_drop("encode-failed");
                        warn!(kind = %self.name, entity = %env.entity, error = %e, "command could not be encoded: dropped");
                        if let Some(r) = reply {
                            let _ = r.tx.send(Err(ShardingError::Codec(e)));
                        }
                        return;
                    }
                }
                let ask_id = reply.map(|r| {
                    let codec = Arc::clone(&self.codec);
                    let resolver = self.resolver.clone();
                    self.pending.register(r.deadline, move |result| {
                        let reply = match result {
                            Ok(bytes) => {
                                decoding_with(&resolver, || codec.decode::<E::Reply>(&bytes))
                                    .map_err(ShardingError::Codec)
                            }
                            Err(e) => Err(e),
                        };
                        let _ = r.tx.send(reply);
                    })
                });
                let payload = &st.payload;
                let len = batch_item_len(&env.entity, &env.shard, payload.len(), ask_id);
                st.outgoing.envelope(to, len, |buf| {
                    encode_batch_item(&env.entity, &env.shard, payload, ask_id, buf)
                });
            }
        }
    }

    fn reply(&mut self, st: &mut State<E>, to: Asker<E::Reply>, result: Result<E::Reply, String>) {
        match to {
            Asker::None => {}
            Asker::Local(tx) => {
                let _ = tx.send(result.map_err(ShardingError::EntityFailed));
            }
            Asker::Remote(to) => match (*to, result) {
                (RemoteAsker { node, ask_id }, Ok(r)) => match self.codec.encode(&r) {
                    Ok(bytes) => {
                        let frame = ShardingFrame {
                            kind: self.name.clone(),
                            body: ShardingBody::Reply(WireReply {
                                ask_id: ask_id.get(),
                                result: Ok(Bytes::from(bytes)),
                            }),
                        };
                        st.outgoing.frame(&node, encode_sharding(&frame));
                    }
                    Err(e) => self.send_reply_error(
                        st,
                        node,
                        ask_id,
                        ReplyErrorKind::DecodeFailed,
                        e.to_string(),
                    ),
                },
                (RemoteAsker { node, ask_id }, Err(msg)) => {
                    self.send_reply_error(st, node, ask_id, ReplyErrorKind::EntityFailed, msg)
                }
            },
        }
    }

    fn send_reply_error(
        &mut self,
        st: &mut State<E>,
        node: UniqueAddress,
        ask_id: NonZeroU64,
        kind: ReplyErrorKind,
        message: String,
    ) {
        let frame = ShardingFrame {
            kind: self.name.clone(),
            body: ShardingBody::Reply(WireReply {
                ask_id: ask_id.get(),
                result: Err(ReplyError { kind, message }),
            }),
        };
        st.outgoing.frame(&node, encode_sharding(&frame));
    }

    fn count_drop(&self, reason: &'static str) {
        metrics::counter!(m::SHARDING_DROPPED_TOTAL, "kind" => self.name.to_string(), "reason" => reason)
            .increment(1);
    }

    fn dropped(&mut self, st: &mut State<E>, env: Envelope<Payload<E>>, reason: DropReason) {
        self.count_drop(reason.as_str());
        warn!(kind = %self.name, entity = %env.entity, shard = %env.shard, reason = reason.as_str(), "message dropped");
        match env.msg {
            Payload::Local { reply: Some(r), .. } => {
                let _ = r.tx.send(Err(match reason {
                    DropReason::BufferFull => ShardingError::BufferFull,
                    DropReason::RegionStopped => ShardingError::RegionStopped,
                    DropReason::LeaseUnavailable => ShardingError::LeaseUnavailable,
                    other => ShardingError::Dropped(other.as_str()),
                }));
            }
            Payload::Remote {
                reply_to: Some((node, ask_id)),
                ..
            } => {
                let kind = match reason {
                    DropReason::BufferFull => ReplyErrorKind::BufferFull,
                    DropReason::RegionStopped => ReplyErrorKind::RegionStopped,
                    _ => ReplyErrorKind::ShardUnavailable,
                };
                self.send_reply_error(
                    st,
                    node,
                    ask_id,
                    kind,
                    format!("dropped: {}", reason.as_str()),
                );
            }
            _ => {}
        }
    }

    async fn flush(&mut self, st: &mut State<E>) {
        if st.outgoing.is_empty() {
            return;
        }
        // Consecutive messages to the same node (the usual case for a proxy or a busy
        // forwarder) go out together: their envelopes batched, the run written at once.
        for (to, run) in st.outgoing.take_runs() {
            let failed = self.sender.send_all(&to.address, run).await;
            if failed > 0 {
                metrics::counter!(m::SHARDING_DROPPED_TOTAL, "kind" => self.name.to_string(), "reason" => "send-failed")
                    .increment(failed as u64);
                warn!(kind = %self.name, %to, messages = failed, "sharding messages not sent (peer limit or writer gone)");
            }
        }
    }

    /// The coordinator here has waited too long for `silent` members: a warning (the core
    /// spaces these out with a doubling interval), the gauge and `/ready`'s list.
    fn warn_unheard(&self, st: &mut State<E>, silent: &[(UniqueAddress, Duration)]) {
        let members: Vec<String> = silent
            .iter()
            .map(|(m, waited)| {
                format!(
                    "{} (for {})",
                    m.address,
                    humantime::format_duration(round_secs(*waited))
                )
            })
            .collect();
        warn!(
            kind = %self.name,
            members = %members.join(", "),
            "the coordinator of entity kind {} allocates no new shard until these members' \
             regions register or their nodes say they never started the kind: {}. A member \
             whose application never calls sharding().init for {} and runs an older shardik \
             cannot say so; start the kind there, or remove the member. Shards already placed \
             keep working",
            self.name,
            members.join(", "),
            self.name
        );
        st.gauges.unheard.set(silent.len() as f64);
        self.held_back.set(&self.name, silent);
    }

    /// Allocation no longer waits here (the state is complete, or the coordinator left).
    fn allocation_proceeds(&self, st: &mut State<E>) {
        st.gauges.unheard.set(0.0);
        if self.held_back.clear(&self.name) {
            info!(kind = %self.name, "the coordinator no longer waits for silent members");
        }
    }

    fn publish_gauges(&self, st: &mut State<E>) {
        let g = &st.gauges;
        if st.delivered > 0 {
            g.delivered.increment(std::mem::take(&mut st.delivered));
        }
        g.entities.set(self.entities.active_entities() as f64);
        g.shards
            .set(exact_len(st.node.region().hosted_shards()) as f64);
        g.buffered.set(st.node.region().buffered() as f64);
    }
}

/// The kind's metric handles, registered once: a turn of the task's loop publishes them, and
/// looking them up by name and label every turn cost more than a small turn's work.
struct KindGauges {
    delivered: metrics::Counter,
    entities: metrics::Gauge,
    shards: metrics::Gauge,
    buffered: metrics::Gauge,
    unheard: metrics::Gauge,
}

impl KindGauges {
    fn new(kind: &str) -> Self {
        KindGauges {
            delivered: metrics::counter!(m::SHARDING_DELIVERED_TOTAL, "kind" => kind.to_string()),
            entities: metrics::gauge!(m::SHARDING_ENTITIES, "kind" => kind.to_string()),
            shards: metrics::gauge!(m::SHARDING_SHARDS, "kind" => kind.to_string()),
            buffered: metrics::gauge!(m::SHARDING_BUFFERED, "kind" => kind.to_string()),
            unheard: metrics::gauge!(m::SHARDING_UNHEARD_REGIONS, "kind" => kind.to_string()),
        }
    }
}

/// How many items `it` yields: O(1) when it knows exactly (the keys of a map), else counted.
/// Gauges are published every turn of the loop, so walking every hosted shard for them is
/// a cost per message when messages come one at a time.
fn exact_len(it: impl Iterator) -> usize {
    match it.size_hint() {
        (lo, Some(hi)) if lo == hi => lo,
        _ => it.count(),
    }
}

/// `d` to whole seconds, for log lines.
fn round_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

/// The wire error kind that carries `e` back to a remote asker.
fn reply_error_kind(e: &ShardingError) -> ReplyErrorKind {
    match e {
        ShardingError::BufferFull => ReplyErrorKind::BufferFull,
        ShardingError::RegionStopped => ReplyErrorKind::RegionStopped,
        ShardingError::EntityFailed(_) => ReplyErrorKind::EntityFailed,
        ShardingError::Codec(_) => ReplyErrorKind::DecodeFailed,
        ShardingError::UnknownKind(_) => ReplyErrorKind::UnknownKind,
        _ => ReplyErrorKind::ShardUnavailable,
    }
}

fn log_coordinator_event(kind: &str, ev: &CoordinatorEvent) {
    match ev {
        CoordinatorEvent::State(e) => debug!(%kind, event = ?e, "coordinator state"),
        CoordinatorEvent::ConflictingClaim {
            shard,
            home,
            claimant,
        } => {
            warn!(%kind, %shard, %home, %claimant, "two regions claim one shard; keeping the first")
        }
        CoordinatorEvent::RegistrationRefused(r) => {
            debug!(%kind, region = %r, "registration refused: not a member in a registrable status")
        }
        CoordinatorEvent::StateComplete | CoordinatorEvent::RegionsUnheard(_) => {}
        CoordinatorEvent::KindNotStarted(member) => info!(
            %kind,
            member = %member.address,
            "member {} has not started entity kind {kind}: it counts as hosting none of its \
             shards, and gets some once it calls sharding().init for {kind}",
            member.address
        ),
        CoordinatorEvent::HandOffStarted {
            shard,
            from,
            rebalance,
        } => info!(%kind, %shard, from = %from.address, rebalance, "hand-off started"),
        CoordinatorEvent::PreparingForShutdown => info!(
            %kind,
            "the cluster is preparing for a full shutdown: no shard of {kind} is rebalanced or \
             handed off any more, and the shards of a node that stops stay stopped"
        ),
        CoordinatorEvent::ShardsRetired { region, shards } => info!(
            %kind,
            region = %region.address,
            shards,
            "{shards} shards of {kind} stopped with the region on {} and get no new home \
             while the cluster prepares for a full shutdown",
            region.address
        ),
        CoordinatorEvent::HandOffDone { shard, ok } => {
            if *ok {
                info!(%kind, %shard, "hand-off done")
            } else {
                warn!(%kind, %shard, "hand-off timed out; the shard stays where it was")
            }
        }
    }
}

/// The job of a command from another node: an ask is answered over the network.
fn remote_job<E: Entity>(cmd: E::Command, reply_to: Option<(UniqueAddress, NonZeroU64)>) -> Job<E> {
    Job {
        cmd,
        reply: match reply_to {
            Some((node, ask_id)) => Asker::Remote(Box::new(RemoteAsker { node, ask_id })),
            None => Asker::None,
        },
        from_context: false,
    }
}
