//! The task that runs one entity kind on one node: a thin driver of the core's [`KindNode`]
//! (the kind's view, region, coordinator while hosted here, loopback and leaving, the same
//! composition the simulator drives) and the owner of the kind's entities. It feeds the node
//! messages, membership changes and timer expiries, and turns its effects into channel sends,
//! network frames and entity calls. Every protocol decision is the core's.
//!
//! This file is the loop: inputs in (local commands, frames from other nodes, control
//! messages, membership, timers, finished handlers), one routing call per message
//! ([`KindNode::route`]). What the core asks back is carried out in `kind/effects.rs`, what
//! leaves for other nodes and askers in `kind/frames.rs`, and what the task reports about
//! itself (drops, warnings, gauges) in `kind/observe.rs`, with the metric handles in
//! `kind/gauges.rs` and the coordinator's events in the log in `kind/hand_offs.rs`.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use shardik_core::Instant as CoreInstant;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{
    AllocationSettings, CoordinatorEvent, DropReason, EntityId, Envelope, KindEffect, KindInput,
    KindNode, KindNodeSettings, LeaseKey, Protocol, Routed, ShardId,
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
use super::handlers::{Asker, Completed, Entities, Handlers, HostOutput, Job};
use super::messages::{Control, LocalMsg, Payload, RegionCounts, RegionState};
use super::outgoing::Outgoing;
use super::pending::{AnswerRoute, PendingAsks};
use super::remember::{self, RememberSettings, RememberWriter};
use super::resolve::{EnvelopeAsk, Resolver, decoding_envelope, decoding_with};
use super::strategy::KindAllocation;
use crate::metrics as m;
use shardik_core::node::ClusterView;
use shardik_transport::UserSender;

mod effects;
mod frames;
mod gauges;
mod hand_offs;
mod observe;

use gauges::KindGauges;
use hand_offs::{HandOffRounds, log_coordinator_event};

/// Most inputs from the control channel (remote traffic) handled in one turn of the loop.
const CONTROL_BATCH: usize = 256;
/// Most commands of local senders taken from their queue at once.
const LOCAL_BATCH: usize = 256;

pub(crate) struct KindTask<E: Entity, C: Codec> {
    pub name: Arc<str>,
    pub me: UniqueAddress,
    pub codec: Arc<C>,
    /// The kind's node settings: the node's sharding defaults applied to this kind
    /// ([`ShardingSettings::kind_node_settings`](shardik_core::node::ShardingSettings::kind_node_settings)).
    pub settings: KindNodeSettings,
    /// The configured allocation strategy, for a kind whose code brings none.
    pub configured_allocation: AllocationSettings,
    /// The kind's entities: what runs when (the core's lifecycle)…
    pub entities: Entities<E>,
    /// …and what runs it.
    pub handlers: Handlers<E>,
    pub sender: UserSender,
    pub pending: PendingAsks,
    pub local: super::local_queue::Receiver<LocalMsg<E>>,
    pub control: mpsc::Receiver<Control>,
    pub membership: watch::Receiver<Arc<ClusterView>>,
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
    /// The answers to remote askers made during the current turn, on their way to `outgoing`
    /// (kept for the task's life, so that a turn allocates no list).
    answers: Vec<crate::sharding::pending::GatheredAnswer>,
    /// Where answers to the last node that sent this kind an ask go (see `answer_route`).
    answer_route: Option<Arc<AnswerRoute>>,
    /// Where a command for another node is encoded before it is copied into its frame.
    payload: Vec<u8>,
    /// Shard ids named by batches from other nodes, so that each envelope does not allocate
    /// its own.
    shard_ids: IdCache,
    gauges: KindGauges,
    /// The coordinator's hand-offs, told in the log as rounds rather than shard by shard.
    handoffs: HandOffRounds,
    effects: Vec<KindEffect<Payload<E>>>,
    host_out: Vec<HostOutput<E>>,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    shutdown_done: bool,
    /// Deliveries not yet added to the `delivered` counter (added once per loop turn).
    delivered: u64,
    /// One warning a minute at most that the coordinator's node has not started the kind
    /// (this region's registration is answered so at every retry).
    coordinator_lacks_kind_log: shardik_transport::log_limit::LogLimit,
    /// The clock as read once for the input being handled (a batch of commands, a completion,
    /// control messages): reading it per delivered command cost more than the routing.
    turn_clock: Option<CoreInstant>,
    /// Handlers the lanes finished, on their way back to the lifecycle (kept for the task's
    /// life, so that taking them allocates nothing).
    lane_done: Vec<Completed<E>>,
}

impl<E: Entity, C: Codec> KindTask<E, C> {
    pub async fn run(mut self) {
        if let Some(remember) = &self.remember {
            self.handlers.set_remember(RememberWriter::spawn(
                self.name.clone(),
                Arc::clone(&remember.store),
            ));
            if !self.settings.proxy {
                crate::task::spawn(remember::load_shards(
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
            self.settings.clone(),
            self.allocation.choice(self.configured_allocation),
            CoreInstant::ZERO,
        );
        let mut st = State {
            epoch,
            node,
            outgoing: Outgoing::new(self.name.clone()),
            answers: Vec::new(),
            answer_route: None,
            payload: Vec::new(),
            shard_ids: IdCache::default(),
            effects: Vec::new(),
            host_out: Vec::new(),
            shutdown_waiters: Vec::new(),
            shutdown_done: false,
            delivered: 0,
            gauges: KindGauges::new(&self.name),
            handoffs: HandOffRounds::default(),
            turn_clock: None,
            lane_done: Vec::new(),
            coordinator_lacks_kind_log: shardik_transport::log_limit::LogLimit::new(
                Duration::from_secs(60),
            ),
        };
        self.handlers.start_lanes(
            tokio::runtime::Handle::current().metrics().num_workers(),
            &self.name,
        );
        let lanes = self.handlers.lane_completions();
        self.membership_changed(&mut st);
        let mut batch: Vec<LocalMsg<E>> = Vec::with_capacity(LOCAL_BATCH);
        let queue_limit = self.settings.region.buffer_size.max(1);
        let mut local_open = true;
        // One timer for the task's life, moved only when the next deadline moves: a new one
        // each turn registered and removed a timer-wheel entry per turn, under the driver's
        // lock, which a busy kind paid on every batch it took.
        let timer = tokio::time::sleep_until(epoch);
        tokio::pin!(timer);
        let mut armed: Option<TokioInstant> = None;
        loop {
            // Envelopes for other nodes wait in an open batch: before writing it, let the
            // tasks that are ready run (askers that answers just woke send their next
            // commands then), and add what they queued to the same batch. One yield per batch
            // written, and only while senders are busy (the batch holds more than one
            // envelope, or other asks of this node are in flight): a lone command goes out at
            // once, as a yield added some 10 µs to the median of sparse asks. With 64 asks in
            // flight through a proxy the batches grew, the writes fell and the asks went
            // faster (docs/PERFORMANCE-HISTORY.md, "Fewer, fuller batches").
            let open = st.outgoing.open_batch_len();
            let busy = open > 1 || (open == 1 && self.pending.len() > 1);
            if busy && local_open && self.entities.queued() < queue_limit {
                tokio::task::yield_now().await;
                if self.local.try_recv_many(&mut batch, LOCAL_BATCH) > 0 {
                    st.turn_clock = Some(self.read_clock(&st));
                    self.route_local(&mut st, &mut batch);
                }
            }
            self.handlers.send_to_lanes();
            self.flush(&mut st).await;
            self.publish_gauges(&mut st);
            let next = self.next_deadline(&st);
            if next != armed {
                if let Some(t) = next {
                    timer.as_mut().reset(t);
                }
                armed = next;
            }
            // Commands are taken in while the entities' queues are under the buffer's limit
            // and the lanes still lack work: what waits for the lanes to come back is better
            // left in the senders' queue, read in order, than spread over the entities'
            // queues, read back out of cache.
            let accept = self.entities.queued() < queue_limit && !self.handlers.lanes_full();
            st.turn_clock = None;
            // Last before waiting: what the lanes finished while this turn ran.
            self.handlers.settle_lanes();
            tokio::select! {
                biased;
                changed = self.membership.changed() => {
                    if changed.is_err() {
                        // The node stopped: stop the region (entities are dropped) and the
                        // coordinator, and give their leases back before the task ends, which
                        // the node's owner waits for (`Sharding::stopped`).
                        self.input(&mut st, KindInput::Stop);
                        self.flush(&mut st).await;
                        if let Some(leases) = &mut self.leases {
                            leases.releases_done().await;
                        }
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
                    self.catch_up(&mut st, armed);
                    self.complete(&mut st, done);
                }
                // Only while a lane has handlers of this kind: a kind whose handlers all run
                // here (short ones) pays nothing for its lanes on each turn.
                _ = lanes_ready(&lanes), if self.handlers.lanes_busy() => {
                    st.turn_clock = Some(self.read_clock(&st));
                    self.catch_up(&mut st, armed);
                    let mut done = std::mem::take(&mut st.lane_done);
                    self.handlers.take_lane_completions(&mut done);
                    for d in done.drain(..) {
                        self.complete(&mut st, d);
                    }
                    st.lane_done = done;
                }
                n = self.local.recv_many(&mut batch, LOCAL_BATCH), if accept && local_open => {
                    if n == 0 {
                        // Every region handle is gone; keep serving remote traffic.
                        local_open = false;
                    }
                    st.turn_clock = Some(self.read_clock(&st));
                    self.route_local(&mut st, &mut batch);
                }
                _ = &mut timer, if armed.is_some() => {
                    // A fired timer stays elapsed until it is reset: arm it anew next turn.
                    armed = None;
                    self.on_timer(&mut st);
                }
            }
        }
    }
}

/// Waits until a lane has handed back finished handlers; for ever if the kind has no lanes.
async fn lanes_ready<E: Entity>(lanes: &Option<Arc<super::handlers::Completions<E>>>) {
    match lanes {
        Some(lanes) => lanes.ready().await,
        None => std::future::pending().await,
    }
}

impl<E: Entity, C: Codec> KindTask<E, C> {
    /// Routes the commands of local senders in `batch`, in order, leaving it empty.
    fn route_local(&mut self, st: &mut State<E>, batch: &mut Vec<LocalMsg<E>>) {
        for msg in batch.drain(..) {
            let env = Envelope {
                entity: msg.ids.id.clone(),
                shard: msg.ids.shard.clone(),
                msg: Payload::Local {
                    cmd: msg.cmd,
                    reply: msg.reply,
                },
            };
            self.route(st, None, env);
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
        let view = self.membership.borrow_and_update().clone();
        self.input(
            st,
            KindInput::Membership {
                members: view.members.clone(),
                unreachable: view.unreachable.clone(),
            },
        );
    }

    /// What is due at `now`: the node's timers first (a lease past its deadline stops its
    /// shard's entities before their own timers could run a command under it), then the
    /// entities'.
    fn on_timer(&mut self, st: &mut State<E>) {
        let now = self.now(st);
        if st.node.poll_timeout().is_some_and(|t| t <= now) {
            let mut out = std::mem::take(&mut st.effects);
            st.node.handle_timeout(now, &mut out);
            self.apply_effects(st, &mut out);
            st.effects = out;
        }
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
    }

    /// Before finished handlers go back to the lifecycle, the node judges the time
    /// ([`KindNode::catch_up`]) if a deadline is due: the timer branch comes last in the
    /// loop, and after a pause (a frozen process) the handlers that finished meanwhile are
    /// ready before it, so a shard whose lease lapsed would otherwise have a passivation or a
    /// failure start a new incarnation of one of its entities under no lease. `armed` is the
    /// earliest of the node's and the entities' deadlines, read this turn: nothing due, nothing
    /// to ask.
    fn catch_up(&mut self, st: &mut State<E>, armed: Option<TokioInstant>) {
        let now = self.now(st);
        if armed.is_none_or(|t| t > self.tokio_at(st, now)) {
            return;
        }
        let mut out = std::mem::take(&mut st.effects);
        st.node.catch_up(now, &mut out);
        self.apply_effects(st, &mut out);
        st.effects = out;
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
                // `KindNode::route`'s first answer, asked before the envelope is built so that
                // a delivery decodes straight from the frame.
                if st.node.delivers_at_once(&shard) {
                    let ask = env.ask_id.map(|ask_id| EnvelopeAsk {
                        route: self.answer_route(&mut st.answer_route, from),
                        ask_id,
                    });
                    let decoded = decoding_envelope(ask.clone(), || {
                        self.codec.decode::<E::Command>(env.payload)
                    });
                    match decoded {
                        Ok(cmd) => self.deliver_job(st, shard, entity, remote_job(cmd, ask)),
                        Err(e) => {
                            let reply_to = env.ask_id.map(|id| (from.clone(), id));
                            self.undecodable(st, &entity, reply_to, e)
                        }
                    }
                } else {
                    let reply_to = env.ask_id.map(|id| (from.clone(), id));
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
                let _ = tx.send(RegionCounts {
                    shards: counts.into_iter().collect(),
                    registered: st.node.region().coordinator().is_some(),
                });
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
            Control::LeasesRead { id, answer } => {
                self.input(st, KindInput::ShardLeasesRead { id, answer })
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

    fn deliver(&mut self, st: &mut State<E>, env: Envelope<Payload<E>>) {
        let job = match env.msg {
            Payload::Local { cmd, reply } => Job {
                cmd,
                reply: if reply.is_ask() {
                    Asker::Local(reply)
                } else {
                    Asker::None
                },
                from_context: false,
            },
            Payload::Remote { bytes, reply_to } => {
                let ask = reply_to.as_ref().map(|(asker, ask_id)| EnvelopeAsk {
                    route: self.answer_route(&mut st.answer_route, asker),
                    ask_id: *ask_id,
                });
                let decoded = decoding_with(&self.resolver, || {
                    decoding_envelope(ask.clone(), || self.codec.decode::<E::Command>(&bytes))
                });
                match decoded {
                    Ok(cmd) => remote_job(cmd, ask),
                    Err(e) => return self.undecodable(st, &env.entity, reply_to, e),
                }
            }
        };
        self.deliver_job(st, env.shard, env.entity, job);
    }

    /// Where answers to asks from `asker` (or reports of their failure) go. `last` is the
    /// route of the last node that sent this kind an ask: the envelopes of a batch, and the
    /// batches of a busy asker, share it rather than each making its own.
    fn answer_route(
        &self,
        last: &mut Option<Arc<AnswerRoute>>,
        asker: &UniqueAddress,
    ) -> Arc<AnswerRoute> {
        match last {
            Some(route) if route.asker() == asker => Arc::clone(route),
            _ => {
                let endpoint = self
                    .resolver
                    .upgrade()
                    .map(|node| Arc::downgrade(&node.reply_endpoint()))
                    .unwrap_or_default();
                let route = Arc::new(AnswerRoute::new(self.name.clone(), asker.clone(), endpoint));
                *last = Some(Arc::clone(&route));
                route
            }
        }
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
}

/// The job of a command from another node: an ask is answered over the network.
fn remote_job<E: Entity>(cmd: E::Command, ask: Option<EnvelopeAsk>) -> Job<E> {
    Job {
        cmd,
        reply: match ask {
            Some(ask) => Asker::Remote(ask.route, ask.ask_id),
            None => Asker::None,
        },
        from_context: false,
    }
}
