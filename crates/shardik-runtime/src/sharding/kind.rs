//! The task that runs one entity kind on one node: it owns the kind's region core, the
//! coordinator core while this node hosts it, and the entities, and feeds them messages,
//! membership changes and timer expiries. Protocol decisions stay in the cores; this file only
//! translates their effects into channel sends, network frames and entity calls.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use shardik_core::Instant as CoreInstant;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{
    Coordinator, CoordinatorEffect, CoordinatorEvent, CoordinatorSettings, DropReason, EntityId,
    Envelope, Protocol, Region, RegionEffect, RegionSettings, ShardId, ShardingView,
};
use shardik_wire::{
    ReplyError, ReplyErrorKind, ShardingBody, ShardingFrame, WireEnvelope, WireReply,
    encode_envelope, encode_sharding,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant as TokioInstant;
use tracing::{debug, info, warn};

use super::allocation::{BoxedStrategy, Redrive, StrategyFactory};
use super::api::{Codec, Entity, ShardingError};
use super::host::{Completed, EntityHost, HostOutput, Job, ReplyTo};
use super::pending::PendingAsks;
use crate::handle::MembershipSnapshot;
use crate::metrics as m;
use crate::transport::UserSender;

/// A reply a local asker waits for.
pub(crate) struct LocalReply<R> {
    pub tx: oneshot::Sender<Result<R, ShardingError>>,
    pub deadline: TokioInstant,
}

/// A command from a sender on this node.
pub(crate) struct LocalMsg<E: Entity> {
    pub entity: EntityId,
    pub shard: ShardId,
    pub cmd: E::Command,
    pub reply: Option<LocalReply<E::Reply>>,
}

/// Input that does not depend on the entity type: from the network, the management API, the
/// node's shutdown.
pub(crate) enum Control {
    Remote {
        from: UniqueAddress,
        env: WireEnvelope,
    },
    Protocol {
        from: UniqueAddress,
        msg: Protocol,
    },
    State(oneshot::Sender<RegionState>),
    Stats(oneshot::Sender<Vec<(ShardId, usize)>>),
    Shutdown(oneshot::Sender<()>),
    /// An asynchronous allocation strategy has answered for `shard`: ask the coordinator again
    /// on behalf of the region that asked.
    RetryAllocation {
        requester: UniqueAddress,
        shard: ShardId,
    },
}

/// What a region reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegionState {
    /// Each hosted shard with its live entity ids, in shard order.
    pub shards: Vec<(ShardId, Vec<EntityId>)>,
    /// Whether the region is registered with a coordinator.
    pub registered: bool,
    /// Messages waiting for a shard home.
    pub buffered: usize,
}

/// The message a region routes: typed for local senders, bytes for remote ones.
pub(crate) enum Payload<E: Entity> {
    Local {
        cmd: E::Command,
        reply: Option<LocalReply<E::Reply>>,
    },
    Remote {
        bytes: Bytes,
        reply_to: Option<(UniqueAddress, NonZeroU64)>,
    },
}

/// Settings of one kind's task.
#[derive(Clone)]
pub(crate) struct KindSettings {
    pub region: RegionSettings,
    pub coordinator: CoordinatorSettings,
    pub allocation: shardik_core::sharding::AllocationSettings,
    pub down_removal_margin: Duration,
    /// Passivation of idle entities by a periodic scan (the plain idle strategy).
    pub idle: Option<shardik_passivation::IdleCheck>,
    pub proxy: bool,
    pub role: Option<String>,
}

/// How often to look for idle entities: the configured interval, but not more often than every
/// 100 ms (last-use times are kept in whole seconds anyway).
fn idle_scan_interval(check: shardik_passivation::IdleCheck) -> Duration {
    Duration::from_millis(check.interval_ms).max(Duration::from_millis(100))
}

type Strategy = BoxedStrategy;

/// Most inputs from the control channel (remote traffic) handled in one turn of the loop.
const CONTROL_BATCH: usize = 256;

pub(crate) struct KindTask<E: Entity, C: Codec> {
    pub name: Arc<str>,
    pub me: UniqueAddress,
    pub codec: Arc<C>,
    pub settings: KindSettings,
    pub host: EntityHost<E>,
    pub sender: UserSender,
    pub pending: PendingAsks,
    pub local: mpsc::Receiver<LocalMsg<E>>,
    pub control: mpsc::Receiver<Control>,
    pub membership: watch::Receiver<Arc<MembershipSnapshot>>,
    /// The kind's own allocation strategy, if it has one (else the configured one).
    pub strategy: Option<StrategyFactory>,
    /// The way back to this task for strategies that answer later.
    pub redrive: Redrive,
}

struct State<E: Entity> {
    epoch: TokioInstant,
    view: ShardingView,
    region: Region<Payload<E>>,
    coordinator: Option<Coordinator<Strategy>>,
    loopback: VecDeque<(UniqueAddress, Protocol)>,
    outgoing: Vec<(UniqueAddress, Bytes)>,
    region_effects: Vec<RegionEffect<Payload<E>>>,
    coordinator_effects: Vec<CoordinatorEffect>,
    host_out: Vec<HostOutput<E>>,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    shutdown_done: bool,
    next_idle_scan: Option<TokioInstant>,
    /// Deliveries not yet added to the `delivered` counter (added once per loop turn).
    delivered: u64,
    next_strategy_tick: Option<TokioInstant>,
    /// The clock as read once for the input being handled (a batch of commands, a completion,
    /// control messages): reading it per delivered command cost more than the routing.
    turn_clock: Option<CoreInstant>,
}

impl<E: Entity, C: Codec> KindTask<E, C> {
    pub async fn run(mut self) {
        let epoch = TokioInstant::now();
        let now = CoreInstant::ZERO;
        let view = ShardingView::new(
            self.me.clone(),
            self.settings.role.clone(),
            self.settings.down_removal_margin,
        );
        let region = Region::new(
            self.me.clone(),
            self.settings.proxy,
            self.settings.region.clone(),
            now,
        );
        let mut st = State {
            epoch,
            view,
            region,
            coordinator: None,
            loopback: VecDeque::new(),
            outgoing: Vec::new(),
            region_effects: Vec::new(),
            coordinator_effects: Vec::new(),
            host_out: Vec::new(),
            shutdown_waiters: Vec::new(),
            shutdown_done: false,
            next_idle_scan: self.settings.idle.map(|c| epoch + idle_scan_interval(c)),
            delivered: 0,
            next_strategy_tick: None,
            turn_clock: None,
        };
        self.membership_changed(&mut st);
        let mut batch: Vec<LocalMsg<E>> = Vec::with_capacity(256);
        let queue_limit = self.settings.region.buffer_size.max(1);
        let mut local_open = true;
        loop {
            self.settle(&mut st);
            self.flush(&mut st).await;
            self.publish_gauges(&mut st);
            let next = self.next_deadline(&st);
            let timer = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            let accept = self.host.queued() < queue_limit;
            st.turn_clock = None;
            tokio::select! {
                biased;
                changed = self.membership.changed() => {
                    if changed.is_err() {
                        // The node stopped: stop the region (entities are dropped).
                        let mut out = std::mem::take(&mut st.region_effects);
                        st.region.stop(&mut out);
                        st.region_effects = out;
                        self.apply_region_effects(&mut st);
                        self.drain_loopback(&mut st);
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
                        self.settle(&mut st);
                        match self.control.try_recv() {
                            Ok(ctl) => self.on_control(&mut st, ctl),
                            Err(_) => break,
                        }
                    }
                }
                Some(done) = self.host.running_mut().next(), if self.host.has_running() => {
                    st.turn_clock = Some(self.read_clock(&st));
                    let now_s = self.now_secs(&st);
                    self.complete(&mut st, done, now_s);
                }
                n = self.local.recv_many(&mut batch, 256), if accept && local_open => {
                    if n == 0 {
                        // Every region handle is gone; keep serving remote traffic.
                        local_open = false;
                    }
                    let now = self.read_clock(&st);
                    st.turn_clock = Some(now);
                    for msg in batch.drain(..) {
                        let env = Envelope {
                            entity: msg.entity,
                            shard: msg.shard,
                            msg: Payload::Local { cmd: msg.cmd, reply: msg.reply },
                        };
                        // Most commands are for shards that run here: deliver without the
                        // round trip through the region's effects.
                        if st.region.delivers_at_once(&env.shard) {
                            self.deliver(&mut st, env);
                            continue;
                        }
                        let mut out = std::mem::take(&mut st.region_effects);
                        st.region.route(now, None, env, &mut out);
                        st.region_effects = out;
                        self.apply_region_effects(&mut st);
                    }
                }
                _ = timer => self.on_timer(&mut st),
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

    fn now_secs(&self, st: &State<E>) -> u32 {
        (self.now(st).as_nanos() / 1_000_000_000) as u32
    }

    fn tokio_at(&self, st: &State<E>, t: CoreInstant) -> TokioInstant {
        st.epoch + Duration::from_nanos(t.as_nanos())
    }

    fn next_deadline(&self, st: &State<E>) -> Option<TokioInstant> {
        [
            st.region.poll_timeout(),
            st.coordinator.as_ref().and_then(|c| c.poll_timeout()),
            st.view.next_expiry(),
        ]
        .into_iter()
        .flatten()
        .map(|t| self.tokio_at(st, t))
        .chain(st.next_idle_scan)
        .chain(st.next_strategy_tick)
        .min()
    }

    fn membership_changed(&mut self, st: &mut State<E>) {
        let snap = self.membership.borrow_and_update().clone();
        let now = self.now(st);
        let unreachable = snap.unreachable.iter().map(|u| u.node.clone()).collect();
        st.view
            .update(now, snap.members.iter().cloned(), unreachable);
        self.view_changed(st);
    }

    fn view_changed(&mut self, st: &mut State<E>) {
        let now = self.now(st);
        let hosts = st.view.self_hosts_coordinator() && !self.settings.proxy;
        if hosts && st.coordinator.is_none() {
            info!(kind = %self.name, "this node now runs the coordinator");
            st.coordinator = Some(Coordinator::new(
                self.me.clone(),
                self.settings.coordinator.clone(),
                match &self.strategy {
                    Some(make) => make(self.redrive.clone()),
                    None => self.settings.allocation.strategy(),
                },
                now,
            ));
        } else if !hosts && st.coordinator.is_some() {
            info!(kind = %self.name, "this node no longer runs the coordinator");
            st.coordinator = None;
        }
        if let Some(c) = &mut st.coordinator {
            let mut out = std::mem::take(&mut st.coordinator_effects);
            c.view_changed(now, &st.view, &mut out);
            st.coordinator_effects = out;
            self.apply_coordinator_effects(st);
        }
        let mut out = std::mem::take(&mut st.region_effects);
        st.region.view_changed(now, &st.view, &mut out);
        st.region_effects = out;
        self.apply_region_effects(st);
    }

    fn on_timer(&mut self, st: &mut State<E>) {
        let now = self.now(st);
        if st.view.expire(now) {
            self.view_changed(st);
        }
        if let Some(c) = &mut st.coordinator {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                let mut out = std::mem::take(&mut st.coordinator_effects);
                c.handle_timeout(now, &st.view, &mut out);
                st.coordinator_effects = out;
                self.apply_coordinator_effects(st);
            }
        }
        if st.region.poll_timeout().is_some_and(|t| t <= now) {
            let mut out = std::mem::take(&mut st.region_effects);
            st.region.handle_timeout(now, &st.view, &mut out);
            st.region_effects = out;
            self.apply_region_effects(st);
        }
        if let Some(at) = st.next_strategy_tick {
            if at <= TokioInstant::now() {
                let now_ms = self.now(st).as_millis();
                self.host.interval_passed(now_ms);
                st.next_strategy_tick = None;
            }
        }
        if st.next_strategy_tick.is_none() {
            st.next_strategy_tick = self
                .host
                .passivation_interval()
                .map(|d| TokioInstant::now() + d.max(Duration::from_millis(100)));
        }
        if let (Some(at), Some(idle)) = (st.next_idle_scan, self.settings.idle) {
            if at <= TokioInstant::now() {
                let timeout = Duration::from_millis(idle.timeout_ms);
                let cutoff = self.now_secs(st).saturating_sub(timeout.as_secs() as u32);
                let n = self.host.passivate_idle(cutoff);
                if n > 0 {
                    debug!(kind = %self.name, entities = n, "passivating idle entities");
                }
                st.next_idle_scan = Some(TokioInstant::now() + idle_scan_interval(idle));
            }
        }
    }

    fn on_control(&mut self, st: &mut State<E>, ctl: Control) {
        let now = self.now(st);
        match ctl {
            Control::Remote { from, env } => {
                let env = Envelope {
                    entity: env.entity_id,
                    shard: env.shard,
                    msg: Payload::Remote {
                        bytes: env.payload,
                        reply_to: env.ask_id.map(|id| (from.clone(), id)),
                    },
                };
                if st.region.delivers_at_once(&env.shard) {
                    self.deliver(st, env);
                    return;
                }
                let mut out = std::mem::take(&mut st.region_effects);
                st.region.route(now, Some(&from), env, &mut out);
                st.region_effects = out;
                self.apply_region_effects(st);
            }
            Control::Protocol { from, msg } => self.protocol(st, from, msg),
            Control::State(tx) => {
                let _ = tx.send(RegionState {
                    shards: self.host_shards(st),
                    registered: st.region.coordinator().is_some(),
                    buffered: st.region.buffered(),
                });
            }
            Control::Stats(tx) => {
                let mut counts: std::collections::BTreeMap<ShardId, usize> =
                    st.region.hosted_shards().map(|s| (s.clone(), 0)).collect();
                counts.extend(self.host.entity_counts());
                let _ = tx.send(counts.into_iter().collect());
            }
            Control::RetryAllocation { requester, shard } => {
                self.protocol(st, requester, Protocol::GetShardHome { shard });
            }
            Control::Shutdown(tx) => {
                if st.shutdown_done {
                    let _ = tx.send(());
                    return;
                }
                st.shutdown_waiters.push(tx);
                let mut out = std::mem::take(&mut st.region_effects);
                st.region.graceful_shutdown(&mut out);
                st.region_effects = out;
                self.apply_region_effects(st);
            }
        }
    }

    /// Hosted shards with their live entities (shards without entities included).
    fn host_shards(&self, st: &State<E>) -> Vec<(ShardId, Vec<EntityId>)> {
        let mut by_shard: std::collections::BTreeMap<ShardId, Vec<EntityId>> = st
            .region
            .hosted_shards()
            .map(|s| (s.clone(), Vec::new()))
            .collect();
        for (shard, ids) in self.host.entity_ids() {
            by_shard.entry(shard).or_default().extend(ids);
        }
        by_shard.into_iter().collect()
    }

    fn protocol(&mut self, st: &mut State<E>, from: UniqueAddress, msg: Protocol) {
        let now = self.now(st);
        if msg.is_for_coordinator() {
            match &mut st.coordinator {
                Some(c) => {
                    let mut out = std::mem::take(&mut st.coordinator_effects);
                    c.handle(now, &from, msg, &st.view, &mut out);
                    st.coordinator_effects = out;
                    self.apply_coordinator_effects(st);
                }
                None => {
                    // Registration goes to several candidates; only the host answers.
                    debug!(kind = %self.name, %from, msg = msg.name(), "not the coordinator: ignored");
                }
            }
        } else {
            let mut out = std::mem::take(&mut st.region_effects);
            st.region.handle(now, &from, msg, &st.view, &mut out);
            st.region_effects = out;
            self.apply_region_effects(st);
        }
    }

    /// Hands a finished handler back to the host and carries out what follows.
    fn complete(&mut self, st: &mut State<E>, done: Completed<E>, now_s: u32) {
        let mut out = std::mem::take(&mut st.host_out);
        self.host.completed(done, now_s, &mut out);
        st.host_out = out;
        self.apply_host_outputs(st);
    }

    /// Completes the handlers that finished when they started (completing one may start the
    /// next command of its entity, which may finish at once too).
    fn drain_finished(&mut self, st: &mut State<E>, now_s: u32) {
        while let Some(done) = self.host.next_finished() {
            self.complete(st, done, now_s);
        }
    }

    /// Before waiting for input: nothing finished is left uncompleted and no message to this
    /// node is left in the loopback queue (each may produce the other).
    fn settle(&mut self, st: &mut State<E>) {
        loop {
            if self.host.has_finished() {
                let now_s = self.now_secs(st);
                self.drain_finished(st, now_s);
            }
            if st.loopback.is_empty() {
                return;
            }
            self.drain_loopback(st);
        }
    }

    fn drain_loopback(&mut self, st: &mut State<E>) {
        while let Some((from, msg)) = st.loopback.pop_front() {
            self.protocol(st, from, msg);
        }
    }

    fn send_protocol(&mut self, st: &mut State<E>, to: UniqueAddress, msg: Protocol) {
        if to == self.me {
            st.loopback.push_back((self.me.clone(), msg));
            return;
        }
        let frame = ShardingFrame {
            kind: self.name.clone(),
            body: ShardingBody::Protocol(msg),
        };
        st.outgoing.push((to, encode_sharding(&frame)));
    }

    fn apply_coordinator_effects(&mut self, st: &mut State<E>) {
        let effects = std::mem::take(&mut st.coordinator_effects);
        for e in effects {
            match e {
                CoordinatorEffect::Send { to, msg } => self.send_protocol(st, to, msg),
                CoordinatorEffect::Event(ev) => log_coordinator_event(&self.name, &ev),
            }
        }
    }

    fn apply_region_effects(&mut self, st: &mut State<E>) {
        let mut effects = std::mem::take(&mut st.region_effects);
        for e in effects.drain(..) {
            match e {
                RegionEffect::Send { to, msg } => self.send_protocol(st, to, msg),
                RegionEffect::Forward { to, env } => self.forward(st, to, env),
                RegionEffect::Deliver(env) => self.deliver(st, env),
                RegionEffect::ShardStarted(shard) => {
                    debug!(kind = %self.name, %shard, "shard started here")
                }
                RegionEffect::StopEntities(shard) => {
                    let mut out = std::mem::take(&mut st.host_out);
                    self.host.stop_shard(&shard, &mut out);
                    st.host_out = out;
                    self.apply_host_outputs(st);
                }
                RegionEffect::ForceStopEntities(shard) => {
                    let mut out = std::mem::take(&mut st.host_out);
                    self.host.force_stop_shard(&shard, &mut out);
                    st.host_out = out;
                    self.apply_host_outputs(st);
                }
                RegionEffect::ShardStopped(shard) => {
                    debug!(kind = %self.name, %shard, "shard stopped here")
                }
                RegionEffect::Dropped { env, reason } => self.dropped(st, env, reason),
                RegionEffect::ShutdownComplete => {
                    st.shutdown_done = true;
                    for w in st.shutdown_waiters.drain(..) {
                        let _ = w.send(());
                    }
                }
            }
        }
        st.region_effects = effects;
    }

    fn apply_host_outputs(&mut self, st: &mut State<E>) {
        let outputs = std::mem::take(&mut st.host_out);
        for o in outputs {
            match o {
                HostOutput::Reply(to, result) => self.reply(st, to, result),
                HostOutput::ShardEmpty(shard) => {
                    let mut out = std::mem::take(&mut st.region_effects);
                    st.region.entities_stopped(&shard, &mut out);
                    st.region_effects = out;
                    self.apply_region_effects(st);
                }
            }
        }
    }

    fn deliver(&mut self, st: &mut State<E>, env: Envelope<Payload<E>>) {
        let now = self.now(st);
        let now_s = (now.as_nanos() / 1_000_000_000) as u32;
        let job = match env.msg {
            Payload::Local { cmd, reply } => Job {
                cmd,
                reply: match reply {
                    Some(r) => ReplyTo::Local(r.tx),
                    None => ReplyTo::None,
                },
            },
            Payload::Remote { bytes, reply_to } => match self.codec.decode::<E::Command>(&bytes) {
                Ok(cmd) => Job {
                    cmd,
                    reply: match reply_to {
                        Some((node, ask_id)) => ReplyTo::Remote { node, ask_id },
                        None => ReplyTo::None,
                    },
                },
                Err(e) => {
                    self.count_drop("decode-failed");
                    warn!(kind = %self.name, entity = %env.entity, error = %e, "command could not be decoded: dropped");
                    if let Some((node, ask_id)) = reply_to {
                        self.send_reply_error(
                            st,
                            node,
                            ask_id,
                            ReplyErrorKind::DecodeFailed,
                            e.to_string(),
                        );
                    }
                    return;
                }
            },
        };
        st.delivered += 1;
        let now_ms = now.as_millis();
        self.host
            .deliver(&env.shard, &env.entity, job, now_s, now_ms);
        self.drain_finished(st, now_s);
    }

    fn forward(&mut self, st: &mut State<E>, to: UniqueAddress, env: Envelope<Payload<E>>) {
        let mut buf = BytesMut::new();
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
                encode_envelope(
                    &self.name,
                    &env.entity,
                    &env.shard,
                    &bytes,
                    relay_id,
                    &mut buf,
                );
            }
            Payload::Local { cmd, reply } => {
                let bytes = match self.codec.encode(&cmd) {
                    Ok(b) => b,
                    Err(e) => {
                        self.count_drop("encode-failed");
                        warn!(kind = %self.name, entity = %env.entity, error = %e, "command could not be encoded: dropped");
                        if let Some(r) = reply {
                            let _ = r.tx.send(Err(ShardingError::Codec(e)));
                        }
                        return;
                    }
                };
                let ask_id = reply.map(|r| {
                    let codec = Arc::clone(&self.codec);
                    self.pending.register(r.deadline, move |result| {
                        let reply = match result {
                            Ok(bytes) => codec
                                .decode::<E::Reply>(&bytes)
                                .map_err(ShardingError::Codec),
                            Err(e) => Err(e),
                        };
                        let _ = r.tx.send(reply);
                    })
                });
                encode_envelope(
                    &self.name,
                    &env.entity,
                    &env.shard,
                    &bytes,
                    ask_id,
                    &mut buf,
                );
            }
        }
        st.outgoing.push((to, buf.freeze()));
    }

    fn reply(
        &mut self,
        st: &mut State<E>,
        to: ReplyTo<E::Reply>,
        result: Result<E::Reply, String>,
    ) {
        match to {
            ReplyTo::None => {}
            ReplyTo::Local(tx) => {
                let _ = tx.send(result.map_err(ShardingError::EntityFailed));
            }
            ReplyTo::Remote { node, ask_id } => match result {
                Ok(r) => match self.codec.encode(&r) {
                    Ok(bytes) => {
                        let frame = ShardingFrame {
                            kind: self.name.clone(),
                            body: ShardingBody::Reply(WireReply {
                                ask_id: ask_id.get(),
                                result: Ok(Bytes::from(bytes)),
                            }),
                        };
                        st.outgoing.push((node, encode_sharding(&frame)));
                    }
                    Err(e) => self.send_reply_error(
                        st,
                        node,
                        ask_id,
                        ReplyErrorKind::DecodeFailed,
                        e.to_string(),
                    ),
                },
                Err(msg) => {
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
        st.outgoing.push((node, encode_sharding(&frame)));
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
        // Consecutive messages to the same node (the usual case for a proxy or a busy
        // forwarder) go to its queue together, looked up once.
        let mut outgoing = std::mem::take(&mut st.outgoing).into_iter().peekable();
        while let Some((to, first)) = outgoing.next() {
            let mut run = vec![first];
            while let Some((_, bytes)) = outgoing.next_if(|(next, _)| *next == to) {
                run.push(bytes);
            }
            let failed = self.sender.send_all(&to.address, run).await;
            if failed > 0 {
                metrics::counter!(m::SHARDING_DROPPED_TOTAL, "kind" => self.name.to_string(), "reason" => "send-failed")
                    .increment(failed as u64);
                warn!(kind = %self.name, %to, messages = failed, "sharding messages not sent (peer limit or writer gone)");
            }
        }
    }

    fn publish_gauges(&self, st: &mut State<E>) {
        let kind = self.name.to_string();
        if st.delivered > 0 {
            metrics::counter!(m::SHARDING_DELIVERED_TOTAL, "kind" => kind.clone())
                .increment(std::mem::take(&mut st.delivered));
        }
        metrics::gauge!(m::SHARDING_ENTITIES, "kind" => kind.clone())
            .set(self.host.active_entities() as f64);
        metrics::gauge!(m::SHARDING_SHARDS, "kind" => kind.clone())
            .set(exact_len(st.region.hosted_shards()) as f64);
        metrics::gauge!(m::SHARDING_BUFFERED, "kind" => kind).set(st.region.buffered() as f64);
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
        CoordinatorEvent::StateComplete => {
            info!(%kind, "coordinator heard from every region: allocating")
        }
        CoordinatorEvent::HandOffStarted {
            shard,
            from,
            rebalance,
        } => info!(%kind, %shard, from = %from.address, rebalance, "hand-off started"),
        CoordinatorEvent::HandOffDone { shard, ok } => {
            if *ok {
                info!(%kind, %shard, "hand-off done")
            } else {
                warn!(%kind, %shard, "hand-off timed out; the shard stays where it was")
            }
        }
    }
}
