//! The node driver: one tokio task that owns the membership core and feeds it network
//! messages, control commands and timer expiries, then carries out its effects.
//!
//! No protocol decision is made here: the driver only translates between the core's
//! `(now, input) -> effects` world and sockets, clocks, logs and metrics.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shardik_core::Instant as CoreInstant;
use shardik_core::membership::{
    Address, ClusterEvent, Command, CommandError, DropReason, Effect, Gossip, Input, MemberStatus,
    Membership, MembershipConfig, Message, ShutdownReason, UniqueAddress,
};
use shardik_core::node::{ClusterView, NodeCore, Overdue};
use shardik_wire::{DecodeLimits, LocalIdentity};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant as TokioInstant;
use tracing::{debug, info, warn};

use super::exit::ExitTasks;
use super::handle::{ControlCommand, MembershipSnapshot, NodeHandle, UnreachableMember};
use super::start_error::StartError;
use crate::metrics as m;
use crate::sbr_lease::{SbrLease, SbrLeaseOptions};
use shardik_transport::log_limit::{LogLimit, LogLimits};
use shardik_transport::{
    Inbound, InboundUser, Outgoing, Transport, TransportConfig, TransportError, UserInbound,
    UserSender,
};

/// What a node needs to start.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// `HOST:PORT` to listen on (`cluster.bind-address`); also this node's address in the
    /// cluster unless `advertise` says otherwise.
    pub bind: Address,
    /// This node's address in the cluster, its identity (`cluster.canonical-address`), when
    /// peers reach it under another address than `bind` (bound to `0.0.0.0`, behind NAT, known
    /// by a DNS name). `None`: `bind`.
    pub advertise: Option<Address>,
    /// Seed nodes to join through (empty: wait for a manual join).
    pub seeds: Vec<Address>,
    /// Membership settings.
    pub membership: MembershipConfig,
    /// Transport settings.
    pub transport: TransportConfig,
    /// Longest a graceful leave may take before the node stops anyway.
    pub leave_timeout: Duration,
}

/// A started node.
pub struct RunningNode {
    /// Observe and steer the node.
    pub handle: NodeHandle,
    /// This incarnation.
    pub self_node: UniqueAddress,
    /// Ask for a graceful leave (first request) or an immediate stop (second request).
    pub stop: mpsc::Sender<StopRequest>,
    /// Resolves when the node has stopped, with the reason.
    pub finished: tokio::task::JoinHandle<ShutdownReason>,
    /// User payloads other nodes sent to this one, kept apart from the driver so that user
    /// traffic can never stall membership; taken once by whoever serves them (sharding).
    user_messages: std::sync::Mutex<Option<mpsc::Receiver<InboundUser>>>,
    /// Sends user payloads (sharding traffic) to other nodes.
    pub user_sender: UserSender,
    /// Installs where inbound user payloads go, read by the connections' readers themselves
    /// (sharding installs its dispatcher when it starts).
    pub user_inbound: UserInbound,
}

impl RunningNode {
    /// Takes the node's inbound user traffic; only the first call gets it (sharding takes it
    /// when it starts on the node).
    pub fn take_user_messages(&self) -> Option<mpsc::Receiver<InboundUser>> {
        self.user_messages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Subscribes to this node's cluster events (see [`NodeHandle::subscribe`]).
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.handle.subscribe()
    }
}

/// How to stop.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StopRequest {
    /// Leave the cluster gracefully (Leaving → Exiting → Removed), then stop.
    Leave,
    /// Stop now without telling anyone (others will detect it as unreachable).
    Now,
}

/// A fresh random 64-bit uid for this incarnation, from the operating system's randomness:
/// distinct across restarts, which is all a uid needs.
pub fn random_uid() -> u64 {
    rand::random()
}

/// Starts a node: binds the transport, starts the driver task and joins the seeds.
pub async fn start(opts: NodeOptions) -> Result<RunningNode, StartError> {
    start_with_sbr_lease(opts, None).await
}

/// [`start`], with the lease the split-brain resolver's lease-majority strategy needs.
pub async fn start_with_sbr_lease(
    opts: NodeOptions,
    sbr_lease: Option<SbrLeaseOptions>,
) -> Result<RunningNode, StartError> {
    match &opts.advertise {
        Some(a) => shardik_config::check_identity(a, shardik_config::CANONICAL_ADDRESS_KEY)?,
        None => shardik_config::check_identity(&opts.bind, shardik_config::BIND_ADDRESS_KEY)?,
    }
    let bind = opts.bind.to_string();
    // Bound before the identity is made: with port 0 the OS picks the port, and without an
    // advertised address that port is part of this node's identity.
    let listener = Transport::bind(&bind).await?;
    let canonical = match &opts.advertise {
        Some(a) => a.clone(),
        None => {
            let port = listener
                .local_addr()
                .map_err(|source| TransportError::Bind {
                    addr: bind.clone(),
                    source,
                })?
                .port();
            Address::new(opts.bind.host.clone(), port)
        }
    };
    // The runtime the node was started on, as the host sized it (`runtime.worker-threads`
    // for `shardik node`); a current-thread runtime counts one.
    metrics::gauge!(m::RUNTIME_WORKER_THREADS)
        .set(tokio::runtime::Handle::current().metrics().num_workers() as f64);
    let uid = random_uid();
    let self_node = UniqueAddress::new(canonical, uid);
    let mut sbr_lease =
        SbrLease::start(sbr_lease, &self_node).map_err(|e| StartError::SbrLease(e.to_string()))?;
    let sbr_answers = sbr_lease.take_answers();
    let identity = LocalIdentity {
        cluster_name: opts.membership.cluster_name.clone(),
        address: self_node.clone(),
    };
    if opts.transport.tls.is_none() && !is_loopback_host(&opts.bind.host) {
        warn!(
            address = %bind,
            "listening on a non-loopback address without TLS: anyone who can reach it can talk to \
             this node; set transport.tls.enabled = on with cert-file, key-file and ca-cert-file \
             (see docs/SECURITY.md, 'TLS between nodes')"
        );
    }
    let (transport, receivers) =
        Transport::start_bound(listener, &bind, identity, opts.transport.clone()).await?;
    let inbound = receivers.membership;
    let identified = transport.identified();
    let refused = transport.refused();
    let user_sender = transport.user_sender();
    let user_inbound = transport.user_inbound();
    let epoch = TokioInstant::now();
    let core = NodeCore::new(
        opts.membership.clone(),
        self_node.clone(),
        uid ^ 0x9e37_79b9_7f4a_7c15,
        CoreInstant::ZERO,
        opts.leave_timeout,
    );
    let (snapshot_tx, snapshot_rx) =
        watch::channel(Arc::new(MembershipSnapshot::not_joined(self_node.clone())));
    let (cmd_tx, cmd_rx) = mpsc::channel(64);
    let (stop_tx, stop_rx) = mpsc::channel(4);
    let (view_tx, view_rx) = watch::channel(Arc::new(ClusterView::default()));
    let handle = NodeHandle::with_view(snapshot_rx, cmd_tx, view_rx);
    let (exit_done_tx, exit_done_rx) = mpsc::channel(1);
    let mut driver = Driver {
        view_tx,
        events: handle.events().clone(),
        exit_tasks: handle.exit_tasks().clone(),
        exit_done: exit_done_tx,
        core,
        transport,
        epoch,
        snapshot_tx,
        last_published: None,
        effects: Vec::new(),
        user_sender: user_sender.clone(),
        sbr_lease,
        identified: Arc::clone(&identified),
        refused,
        aliases: std::collections::BTreeSet::new(),
    };
    info!(node = %self_node, bind = %bind, "node started");
    let seeds = opts.seeds.clone();
    let finished = crate::task::spawn(async move {
        if !seeds.is_empty() {
            driver.command(Command::JoinSeedNodes(seeds));
        }
        driver
            .run(inbound, cmd_rx, stop_rx, exit_done_rx, sbr_answers)
            .await
    });
    Ok(RunningNode {
        handle,
        self_node,
        stop: stop_tx,
        finished,
        user_messages: std::sync::Mutex::new(Some(receivers.user)),
        user_sender,
        user_inbound,
    })
}

struct Driver {
    core: NodeCore,
    /// Where the view the kinds act on is published (dropped when the node stops, which is
    /// how the kinds learn it).
    view_tx: watch::Sender<Arc<ClusterView>>,
    transport: Transport,
    epoch: TokioInstant,
    snapshot_tx: watch::Sender<Arc<MembershipSnapshot>>,
    last_published: Option<Arc<Gossip>>,
    effects: Vec<Effect>,
    user_sender: UserSender,
    /// Run when this node becomes Exiting, before it confirms.
    exit_tasks: ExitTasks,
    /// Told when the exit tasks have finished.
    exit_done: mpsc::Sender<()>,
    /// Where cluster events go to subscribers.
    events: broadcast::Sender<ClusterEvent>,
    /// Carries out the split-brain resolver's lease calls and reports its decisions.
    sbr_lease: SbrLease,
    /// Addresses our lanes dialled that another incarnation answered (seed aliases).
    identified: Arc<shardik_transport::Identified>,
    /// Peers whose port refused a connection (`Input::PeerRefused`).
    refused: Arc<shardik_transport::Refused>,
    /// Aliases learnt while joining, whose lanes are closed once this node is a member: it
    /// never sends to them again, so they must not linger.
    aliases: std::collections::BTreeSet<Address>,
}

impl Driver {
    fn now(&self) -> CoreInstant {
        self.core_instant(TokioInstant::now())
    }

    fn core_instant(&self, t: TokioInstant) -> CoreInstant {
        CoreInstant::from_nanos(t.saturating_duration_since(self.epoch).as_nanos() as u64)
    }

    fn tokio_instant(&self, t: CoreInstant) -> TokioInstant {
        self.epoch + Duration::from_nanos(t.as_nanos())
    }

    async fn run(
        &mut self,
        mut inbound: mpsc::Receiver<Inbound>,
        mut commands: mpsc::Receiver<ControlCommand>,
        mut stop: mpsc::Receiver<StopRequest>,
        mut exit_done: mpsc::Receiver<()>,
        sbr_answers: Option<mpsc::Receiver<Input>>,
    ) -> ShutdownReason {
        let mut sbr_answers = sbr_answers.unwrap_or_else(|| mpsc::channel(1).1);
        loop {
            let next = self.core.poll_timeout().map(|t| self.tokio_instant(t));
            let timer = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            let identified = Arc::clone(&self.identified);
            let refused = Arc::clone(&self.refused);
            tokio::select! {
                biased;
                req = stop.recv() => {
                    let now = self.now();
                    let mut out = std::mem::take(&mut self.effects);
                    // The core bounds the leave by the leave timeout, or stops at once (a
                    // second request, or before this node is a member).
                    let stops = req != Some(StopRequest::Leave) || self.core.leave(now, &mut out);
                    self.effects = out;
                    if stops {
                        info!("stopping now");
                        return ShutdownReason::Stopped;
                    }
                    info!("leaving the cluster gracefully");
                }
                _ = identified.changed() => self.take_identified(),
                _ = refused.changed() => self.take_refused(),
                Some(msg) = inbound.recv() => {
                    // Who answered where we dialled is known before what they answered.
                    self.take_identified();
                    let now = self.now();
                    let received_at = self.core_instant(msg.received_at);
                    let mut out = std::mem::take(&mut self.effects);
                    let input = Input::Message { msg: msg.msg, from: msg.from, received_at };
                    self.core.handle(now, input, &mut out);
                    self.effects = out;
                }
                Some(cmd) = commands.recv() => self.control(cmd),
                Some(answer) = sbr_answers.recv() => {
                    let now = self.now();
                    let mut out = std::mem::take(&mut self.effects);
                    self.core.handle(now, answer, &mut out);
                    self.effects = out;
                }
                Some(()) = exit_done.recv() => {
                    info!("exit tasks done: confirming Exiting");
                    let now = self.now();
                    let mut out = std::mem::take(&mut self.effects);
                    self.core.exit_tasks_done(now, &mut out);
                    self.effects = out;
                }
                _ = timer => {
                    let now = self.now();
                    let mut out = std::mem::take(&mut self.effects);
                    let overdue = self.core.handle_timeout(now, &mut out);
                    self.effects = out;
                    self.log_overdue(overdue);
                }
            }
            let stopped = self.apply_effects(None);
            self.forget_aliases();
            if let Some(reason) = stopped {
                self.publish();
                self.snapshot_tx
                    .send_modify(|s| Arc::make_mut(s).stopped = Some(reason.clone()));
                info!(?reason, "node stopped");
                // Let the writers flush the last gossip and exit confirmation.
                tokio::time::sleep(Duration::from_millis(300)).await;
                return reason;
            }
            self.publish();
        }
    }

    /// Hands the core who answered where our lanes dialled, when that was another incarnation
    /// than the dialled address names (a seed named by an alias).
    fn take_identified(&mut self) {
        for (dialled, node) in self.identified.take() {
            info!(%dialled, answered = %node, "{dialled} is {}", node.address);
            self.aliases.insert(dialled.clone());
            let now = self.now();
            let mut out = std::mem::take(&mut self.effects);
            self.core
                .handle(now, Input::PeerIdentified { dialled, node }, &mut out);
            self.effects = out;
        }
    }

    /// Hands the core the peers whose port refused a connection: evidence that a member's
    /// process is gone (the core decides whether one is).
    fn take_refused(&mut self) {
        for address in self.refused.take() {
            debug!(%address, "connection refused by {address}");
            let now = self.now();
            let mut out = std::mem::take(&mut self.effects);
            self.core
                .handle(now, Input::PeerRefused { address }, &mut out);
            self.effects = out;
        }
    }

    /// Once a member, closes the lanes to aliases learnt while joining (the core only ever
    /// sends to members' identities from then on), unless an alias is a member's address.
    fn forget_aliases(&mut self) {
        if self.aliases.is_empty() || !self.core.membership().is_member() {
            return;
        }
        let members = &self.core.gossip().members;
        for alias in std::mem::take(&mut self.aliases) {
            if members.keys().any(|m| m.address == alias) {
                continue;
            }
            info!(%alias, "joined: closing the lanes to seed alias {alias}");
            self.transport.forget_peer(&alias);
            self.user_sender.forget_peer(&alias);
        }
    }

    fn command(&mut self, cmd: Command) -> Option<CommandError> {
        let now = self.now();
        let mut out = std::mem::take(&mut self.effects);
        self.core.handle(now, Input::Command(cmd), &mut out);
        self.effects = out;
        let mut failed = None;
        let _ = self.apply_effects(Some(&mut failed));
        self.publish();
        failed
    }

    fn control(&mut self, cmd: ControlCommand) {
        let (command, reply): (Command, oneshot::Sender<Result<(), CommandError>>) = match cmd {
            ControlCommand::Join(a, r) => (Command::Join(a), r),
            ControlCommand::JoinSeedNodes(seeds, r) => (Command::JoinSeedNodes(seeds), r),
            ControlCommand::Leave(a, r) => (Command::Leave(a), r),
            ControlCommand::Down(a, r) => (Command::Down(a), r),
            ControlCommand::PrepareForFullClusterShutdown(r) => {
                (Command::PrepareForFullClusterShutdown, r)
            }
        };
        let result = match self.command(command) {
            Some(e) => Err(e),
            None => Ok(()),
        };
        let _ = reply.send(result);
    }

    /// Carries out queued effects. Returns the shutdown reason if the core stopped.
    fn apply_effects(
        &mut self,
        mut failed: Option<&mut Option<CommandError>>,
    ) -> Option<ShutdownReason> {
        let mut stopped = None;
        let mut effects = std::mem::take(&mut self.effects);
        let mut i = 0;
        while i < effects.len() {
            match std::mem::replace(&mut effects[i], Effect::SelfExiting) {
                Effect::Send { to, msg } => self.send(to, msg),
                Effect::Event(ev) => {
                    log_event(&ev);
                    // No subscriber is fine: the send then just reports nobody listened.
                    let _ = self.events.send(ev.clone());
                    if let ClusterEvent::MemberRemoved { member, .. } = &ev {
                        // Its writers and queues are of no further use; a new incarnation at
                        // the same address gets fresh ones when we next send to it.
                        self.transport.forget_peer(&member.addr.address);
                        self.user_sender.forget_peer(&member.addr.address);
                    }
                }
                Effect::Dropped { reason, kind } => {
                    metrics::counter!(m::DROPPED_MESSAGES_TOTAL, "reason" => reason.as_str())
                        .increment(1);
                    if reason == DropReason::PreparingForShutdown {
                        // An operator wants to know why a node does not get in; a joiner
                        // retries, and a stranger may send many, hence the limit.
                        if let Some(suppressed) = JOIN_REFUSED_PREPARING.check() {
                            info!(
                                suppressed,
                                kind, "join refused: the cluster is preparing for a full shutdown"
                            );
                        }
                    } else {
                        debug!(reason = reason.as_str(), kind, "membership message dropped");
                    }
                }
                Effect::PreparingForFullShutdown => {
                    info!(
                        event = "full-shutdown",
                        "the cluster is preparing for a full shutdown: no member is moved up, no node joins, no shard moves"
                    );
                    metrics::gauge!(m::CLUSTER_PREPARING_FOR_SHUTDOWN).set(1.0);
                }
                Effect::JoinIncompatible {
                    joiner,
                    via,
                    differences,
                    refused,
                } => log_join_incompatible(&joiner, via, &differences, refused),
                Effect::SeedsUnanswered {
                    seeds,
                    attempts,
                    waited,
                } => self.log_unanswered_seeds(&seeds, attempts, waited),
                Effect::CommandFailed(e) => {
                    warn!(error = %e, "command failed");
                    if let Some(f) = failed.as_deref_mut() {
                        *f = Some(e);
                    }
                }
                Effect::SelfExiting if self.exit_tasks.is_empty() => {
                    info!("this node is Exiting; no exit tasks");
                    let now = self.now();
                    self.core.exit_tasks_done(now, &mut effects);
                }
                Effect::SelfExiting => {
                    // However the leave was asked for, the exit tasks (shard hand-off) run
                    // before the exit is confirmed; gossip goes on meanwhile.
                    info!(tasks = ?self.exit_tasks.names(), "this node is Exiting: running exit tasks");
                    let (tasks, done) = (self.exit_tasks.clone(), self.exit_done.clone());
                    crate::task::spawn(async move {
                        tasks.run().await;
                        let _ = done.send(()).await;
                    });
                }
                Effect::Shutdown(reason) => stopped = Some(reason),
                Effect::Sbr(action) => self.sbr_lease.report(&action),
                Effect::SbrLease(request) => self.sbr_lease.call(request),
                Effect::SbrLeaseLost(reason) => self.sbr_lease.lost(reason),
            }
            i += 1;
        }
        effects.clear();
        self.effects = effects;
        stopped
    }

    fn send(&mut self, to: Address, msg: Message) {
        match &msg {
            Message::Heartbeat { .. } => metrics::counter!(m::HEARTBEATS_SENT_TOTAL).increment(1),
            Message::GossipEnvelope { .. } => {
                metrics::counter!(m::GOSSIP_SENT_TOTAL, "kind" => "full").increment(1)
            }
            Message::GossipStatus { .. } => {
                metrics::counter!(m::GOSSIP_SENT_TOTAL, "kind" => "status").increment(1)
            }
            _ => {}
        }
        if to == self.core.self_node().address {
            // Never dial ourselves (a self-join or a seed list that names us).
            return;
        }
        self.transport.send(&to, Outgoing::Membership(msg));
    }

    /// Publishes a new snapshot, and the view the kinds act on, when the state changed since
    /// the last one.
    fn publish(&mut self) {
        if let Some(view) = self.core.take_view() {
            self.view_tx.send_replace(Arc::new(view));
        }
        let g = self.core.gossip();
        if self
            .last_published
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, g))
        {
            return;
        }
        self.last_published = Some(Arc::clone(g));
        let snapshot = snapshot_of(self.core.membership());
        for status in MemberStatus::ALL {
            let n = snapshot
                .members
                .iter()
                .filter(|m| m.status == status)
                .count();
            metrics::gauge!(m::MEMBERS, "status" => status.as_str()).set(n as f64);
        }
        metrics::gauge!(m::UNREACHABLE_MEMBERS).set(snapshot.unreachable.len() as f64);
        // Who may send user traffic (and who is out of the transport's non-member pool).
        self.transport
            .members()
            .set(snapshot.members.iter().map(|m| m.addr.clone()));
        let now = self.now();
        let fd = self.core.membership().heartbeat_state().fd();
        for (node, _) in fd.iter() {
            let phi = fd.phi(node, now);
            metrics::gauge!(m::PHI, "node" => node.address.to_string()).set(phi);
        }
        let _ = self.snapshot_tx.send(Arc::new(snapshot));
    }
}

impl Driver {
    /// Says which of the node core's deadlines passed (the core has acted on it already).
    fn log_overdue(&self, overdue: Option<Overdue>) {
        let timeout = self.core.leave_timeout();
        match overdue {
            Some(Overdue::Leave) => {
                warn!(
                    ?timeout,
                    "graceful leave did not complete in time; stopping"
                )
            }
            Some(Overdue::ExitTasks) => warn!(
                ?timeout,
                "exit tasks did not finish within the leave timeout; confirming Exiting anyway"
            ),
            None => {}
        }
    }

    /// This node has not got in through its seeds after `waited`: say so, with why each seed
    /// did not let it in as far as the transport knows (the core repeats it with back-off).
    fn log_unanswered_seeds(&self, seeds: &[Address], attempts: u32, waited: Duration) {
        let me = &self.transport.identity().address;
        let seeds: Vec<String> = seeds
            .iter()
            .filter(|s| *s != me)
            .map(|s| match self.transport.last_connect_error(s) {
                Some(error) => format!("{s}: {error}"),
                None => format!("{s}: reached, but it did not let this node in"),
            })
            .collect();
        warn!(
            attempts,
            ?waited,
            "couldn't join seed nodes after {attempts} attempts; still trying. Check \
             cluster.seed-nodes, that the seeds run with the same cluster.name and that this \
             node can reach them: {}",
            seeds.join("; ")
        );
        // For `wait_until_up_within`, whose caller sees no log. The next snapshot built from
        // a new state (this node joined) has none.
        self.snapshot_tx
            .send_modify(|s| Arc::make_mut(s).unanswered_seeds = seeds);
    }
}

/// Counts and logs (WARN, at most one line per outcome per 10 s: anyone can send a `Join`) a
/// joiner whose configuration differs from this member's.
fn log_join_incompatible(
    joiner: &UniqueAddress,
    via: &'static str,
    differences: &[String],
    refused: bool,
) {
    static LIMITS: LogLimits = LogLimits::every_10s();
    let outcome = if refused { "refused" } else { "let-in" };
    metrics::counter!(m::JOIN_INCOMPATIBLE_TOTAL, "outcome" => outcome).increment(1);
    let Some(suppressed) = LIMITS.check(outcome) else {
        return;
    };
    let differences = differences.join("; ");
    if refused {
        warn!(
            %joiner, via, suppressed,
            "refused a joiner whose configuration differs from this member's: {differences}"
        );
    } else {
        warn!(
            %joiner, via, suppressed,
            "let in a joiner whose configuration differs from this member's, because \
             cluster.configuration-compatibility-check.enforce-on-join is off: {differences}"
        );
    }
}

/// The management view of a core's state.
pub fn snapshot_of(core: &Membership) -> MembershipSnapshot {
    let g = core.gossip();
    let me = core.self_node();
    let mut observers: BTreeMap<UniqueAddress, Vec<UniqueAddress>> = BTreeMap::new();
    for (o, s, _) in g.reachability.records() {
        if g.has_member(s) && !g.is_reachable(s) {
            observers.entry(s.clone()).or_default().push(o.clone());
        }
    }
    let oldest_per_role = g
        .all_roles()
        .into_iter()
        .filter_map(|r| g.oldest(Some(&r)).map(|m| (r, m.addr.clone())))
        .collect();
    MembershipSnapshot {
        self_node: me.clone(),
        self_status: core.self_status(),
        leader: core.leader(),
        oldest: g.oldest(None).map(|m| m.addr.clone()),
        oldest_per_role,
        members: g.members.values().cloned().collect(),
        unreachable: observers
            .into_iter()
            .map(|(node, observed_by)| UnreachableMember { node, observed_by })
            .collect(),
        converged: core.is_converged(),
        stopped: None,
        unanswered_seeds: Vec::new(),
    }
}

/// Joins refused because the cluster prepares for a full shutdown: one INFO line per 10 s.
static JOIN_REFUSED_PREPARING: LogLimit = LogLimit::every_10s();

/// One log line per cluster change, in a form a person can follow.
fn log_event(ev: &ClusterEvent) {
    match ev {
        ClusterEvent::MemberJoined(m)
        | ClusterEvent::MemberWeaklyUp(m)
        | ClusterEvent::MemberUp(m)
        | ClusterEvent::MemberLeft(m)
        | ClusterEvent::MemberExited(m)
        | ClusterEvent::MemberDowned(m)
        | ClusterEvent::MemberPreparingForShutdown(m)
        | ClusterEvent::MemberReadyForShutdown(m) => {
            info!(event = "member", member = %m.addr.address, status = m.status.as_str(), "member {} is {}", m.addr.address, m.status)
        }
        ClusterEvent::MemberRemoved { member, previous } => {
            info!(event = "member", member = %member.addr.address, status = "Removed", "member {} is Removed (was {previous})", member.addr.address)
        }
        ClusterEvent::UnreachableMember(m) => {
            warn!(event = "reachability", member = %m.addr.address, status = "Unreachable", "member {} is unreachable", m.addr.address)
        }
        ClusterEvent::ReachableMember(m) => {
            info!(event = "reachability", member = %m.addr.address, status = "Reachable", "member {} is reachable again", m.addr.address)
        }
        ClusterEvent::LeaderChanged(l) => {
            let leader = l
                .as_ref()
                .map_or("none".to_string(), |a| a.address.to_string());
            info!(event = "leader", leader = %leader, "leader is {leader}")
        }
        ClusterEvent::RoleLeaderChanged { role, leader } => {
            let leader = leader
                .as_ref()
                .map_or("none".to_string(), |a| a.address.to_string());
            info!(event = "role-leader", role = %role, leader = %leader, "leader of role {role} is {leader}")
        }
        // The enum is open to new events (`#[non_exhaustive]`); one not named above still
        // gets a line.
        other => info!(event = "cluster", "{other:?}"),
    }
}

/// Whether `host` (an address's host part) is a loopback address or `localhost`, which only
/// this machine can reach.
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The transport settings implied by the node settings (without TLS: `TlsContext::from_settings`
/// needs the whole settings; see `cluster_node`).
pub fn transport_config(t: &shardik_config::TransportSettings) -> TransportConfig {
    TransportConfig {
        maximum_frame_size: t.maximum_frame_size,
        outbound_control_queue_size: t.outbound_control_queue_size,
        outbound_user_queue_size: t.outbound_user_queue_size,
        connect_timeout: t.connect_timeout,
        handshake_timeout: t.handshake_timeout,
        idle_timeout: t.idle_timeout,
        frame_read_timeout: t.frame_read_timeout,
        maximum_inbound_connections: t.maximum_inbound_connections,
        maximum_unauthenticated_connections: t.maximum_unauthenticated_connections,
        maximum_non_member_connections: t.maximum_non_member_connections,
        reconnect_backoff_min: t.reconnect_backoff_min,
        reconnect_backoff_max: t.reconnect_backoff_max,
        decode_limits: DecodeLimits {
            max_gossip_bytes: t.maximum_gossip_decompressed_size,
        },
        inbound_queue_size: TransportConfig::default().inbound_queue_size,
        inbound_user_queue_size: TransportConfig::default().inbound_user_queue_size,
        maximum_peers: TransportConfig::default().maximum_peers,
        tls: None,
    }
}
