//! Cluster sharding on a running node: entity kinds, regions, entity refs.
//!
//! [`Sharding::start`] attaches sharding to a [`RunningNode`](crate::node::RunningNode): it
//! takes the node's inbound user traffic and dispatches it to the entity kinds registered
//! with [`Sharding::init`]. Each kind runs in one task per node (see `kind.rs`), which drives
//! the core's `KindNode` (region, coordinator while hosted here) and owns the kind's entities.
//!
//! Module dependencies run one way only (each file uses only those listed before it):
//! `strategy` → `api` → `messages`, `pending` → `resolve` → `reply_to`, `remember` → `handlers` →
//! `allocation` → `kind` → `mod.rs` → `keepalive` → `singleton`, `daemon`. `api` (what users
//! write against) needs only the strategy types, never the kind's task; the messages the task
//! receives live in `messages` so that senders need not know the task. What runs when among a
//! kind's entities is the core's (`shardik_core::sharding::entities`); `handlers` runs it.
//! The singleton and the daemon process are built on the public sharding API of this file, like
//! a user's code would be.

mod allocation;
mod api;
mod daemon;
mod handlers;
mod held_back;
mod inbound;
mod keepalive;
mod kind;
mod leases;
mod local_queue;
mod messages;
mod outgoing;
mod pending;
mod remember;
mod remember_settings;
mod reply_to;
mod resolve;
mod singleton;
mod strategy;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardik_core::membership::UniqueAddress;
use shardik_core::membership::sbr::Strategy;
use shardik_core::sharding::{
    AllocationSettings, CoordinatorSettings, HandOffMode, LeaseTiming, RegionSettings,
    entities::EntitySettings, shard_number_for,
};
use shardik_passivation::{IdleCheck, ResolvedStrategy};
use shardik_wire::ShardingBody;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

pub(crate) use api::reply_or_panic;
pub use api::{
    Cbor, Codec, CodecError, Entity, EntityContext, EntityFailure, EntityKind, EntityTypeKey,
    Postcard, ShardExtractor, ShardingError, StatusReply, SyncEntity, TellError,
};
pub use daemon::{DaemonSettings, ShardedDaemonProcess, WorkerRef};
pub use held_back::HeldBackKind;
pub use keepalive::{ManagedInitError, ManagedRef};
pub use messages::RegionState;
pub use remember_settings::EntityRecovery;
use remember_settings::{RememberChoice, RememberSettings};
pub use reply_to::ReplyTo;
pub use shardik_core::sharding::{
    AllocationSnapshot, EntityId, RegionEntry, ShardAllocationStrategy, ShardId,
};
pub use singleton::{ClusterSingleton, OldestUpStrategy, SingletonRef, SingletonSettings};
pub use strategy::{AsyncShardAllocationStrategy, StrategyFuture};

use crate::handle::NodeHandle;
use crate::node::RunningNode;
use crate::transport::{InboundUser, UserInbound, UserSender};
use kind::{KindSettings, KindTask};
pub use leases::LeaseHealth;
use messages::{Control, LocalMsg, LocalReply};
use pending::{PendingAsks, ReplyEndpoint};

/// Sharding settings of a node (`cluster.sharding`).
#[derive(Clone, Debug)]
pub struct ShardingConfig {
    /// Shards per kind; every node must agree.
    pub number_of_shards: u32,
    /// Role whose nodes host shards (`None`: all).
    pub role: Option<String>,
    /// Region settings.
    pub region: RegionSettings,
    /// Coordinator settings.
    pub coordinator: CoordinatorSettings,
    /// Allocation strategy settings.
    pub allocation: AllocationSettings,
    /// How long a crashed member counts as possibly alive after its removal.
    pub down_removal_margin: Duration,
    /// How entities are passivated when their kind does not say
    /// (`cluster.sharding.passivation`; by default those idle for 120 s).
    pub passivation: ResolvedStrategy,
    /// How long a graceful shutdown of all regions may take.
    pub shutdown_timeout: Duration,
    /// This node's roles (decides region or proxy before the node has joined).
    pub self_roles: std::collections::BTreeSet<String>,
    /// How long a region answering another node's statistics request waits for its own
    /// shards (`shard-region-query-timeout`).
    pub query_timeout: Duration,
    /// How long after a remembered entity failed its shard starts it again without a message
    /// (`entity-restart-backoff`; only for kinds that remember their entities).
    pub entity_restart_backoff: Duration,
    /// Whether kinds remember their entities when their code does not say
    /// (`remember-entities`), and then how a shard starts them (`entity-recovery-strategy`).
    pub remember_entities: Option<EntityRecovery>,
    /// The coordinator's lease (`coordinator-singleton.use-lease`), with its timing; the
    /// shards' leases are `region.lease` (`use-lease`).
    pub coordinator_lease: Option<LeaseTiming>,
    /// The cluster's name, the prefix of lease names.
    pub cluster_name: Arc<str>,
    /// Self-fencing: a node that has not seen a majority for this long stops running shards
    /// and its coordinator on its own. Set to the split-brain resolver's stable-after when it
    /// decides by majority (keep-majority, lease-majority); `None` otherwise.
    pub self_fence_after: Option<Duration>,
}

impl Default for ShardingConfig {
    fn default() -> Self {
        ShardingConfig {
            number_of_shards: 1000,
            role: None,
            region: RegionSettings::default(),
            coordinator: CoordinatorSettings::default(),
            allocation: AllocationSettings::default(),
            down_removal_margin: Duration::from_secs(20),
            passivation: ResolvedStrategy::Idle(IdleCheck::new(Duration::from_secs(120))),
            shutdown_timeout: Duration::from_secs(60),
            self_roles: Default::default(),
            query_timeout: Duration::from_secs(3),
            entity_restart_backoff: Duration::from_secs(10),
            remember_entities: None,
            coordinator_lease: None,
            cluster_name: "shardik".into(),
            self_fence_after: None,
        }
    }
}

impl ShardingConfig {
    /// The sharding settings of a node's configuration (`cluster.sharding.*`, with
    /// `cluster.down-removal-margin`, `cluster.roles` and the min-nr-of-members settings).
    pub fn from_settings(s: &crate::config::Settings) -> Self {
        let sh = &s.cluster.sharding;
        let mode = match sh.handoff_mode {
            crate::config::HandOffModeSetting::Forward => HandOffMode::Forward,
            crate::config::HandOffModeSetting::Drop => HandOffMode::Drop,
        };
        let membership = s.membership_config();
        let min_members = match sh.host_role() {
            Some(role) => membership
                .role_min_nr_of_members
                .get(role)
                .copied()
                .unwrap_or(1),
            None => membership.min_nr_of_members,
        };
        ShardingConfig {
            number_of_shards: sh.number_of_shards,
            role: sh.host_role().map(str::to_string),
            region: RegionSettings {
                buffer_size: sh.buffer_size,
                retry_interval: sh.retry_interval,
                handoff_timeout: sh.handoff_timeout,
                handoff_mode: mode,
                lease: sh.use_lease.is_on().then(|| lease_timing(s)),
            },
            coordinator: CoordinatorSettings {
                rebalance_interval: sh.rebalance_interval,
                handoff_timeout: sh.handoff_timeout,
                shard_start_timeout: sh.shard_start_timeout,
                min_members,
                forward_handoff: mode == HandOffMode::Forward,
                unheard_warning_after: sh.unheard_region_warning_after,
            },
            allocation: sh.allocation_settings(),
            down_removal_margin: s.cluster.effective_down_removal_margin(),
            // A loaded configuration has been validated; settings built in code with a bad
            // strategy fall back to the reference default, loudly.
            passivation: sh.passivation_strategy().unwrap_or_else(|e| {
                tracing::error!(error = %e, "invalid passivation settings; using default-idle-strategy");
                ResolvedStrategy::Idle(IdleCheck::new(Duration::from_secs(120)))
            }),
            // The reference gives the region's shutdown phase 10 s; a hand-off may take up to
            // handoff-timeout, so allow that.
            shutdown_timeout: sh.handoff_timeout,
            self_roles: membership.roles.clone(),
            query_timeout: sh.shard_region_query_timeout,
            entity_restart_backoff: sh.entity_restart_backoff,
            remember_entities: sh.remember_entities.then(|| sh.entity_recovery()),
            coordinator_lease: sh
                .coordinator_singleton
                .use_lease
                .is_on()
                .then(|| lease_timing(s)),
            cluster_name: s.cluster.name.as_str().into(),
            self_fence_after: membership
                .downing
                .as_ref()
                .filter(|d| {
                    matches!(
                        d.strategy,
                        Strategy::KeepMajority { .. } | Strategy::LeaseMajority { .. }
                    )
                })
                .map(|d| d.stable_after),
        }
    }

    /// Sets the hand-off mode in both the region and coordinator settings.
    pub fn with_handoff_mode(mut self, mode: HandOffMode) -> Self {
        self.region.handoff_mode = mode;
        self.coordinator.forward_handoff = mode == HandOffMode::Forward;
        self
    }
}

/// The timing of sharding's leases: `coordination.lease.*` and `lease-retry-interval`.
fn lease_timing(s: &crate::config::Settings) -> LeaseTiming {
    let l = &s.coordination.lease;
    LeaseTiming {
        ttl: l.heartbeat_timeout,
        renew_interval: l.heartbeat_interval,
        operation_timeout: l.lease_operation_timeout,
        retry_interval: s.cluster.sharding.lease_retry_interval,
    }
}

/// Why sharding could not start on a node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The node's user traffic is already served (sharding was started on it before).
    #[error("sharding is already started on this node")]
    AlreadyStarted,
}

/// Why an entity kind could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// A kind of that name is already registered on this node.
    #[error("entity kind {0:?} is already registered on this node")]
    AlreadyRegistered(String),
    /// The name is empty or too long.
    #[error("invalid entity kind name {0:?}: it must be 1 to 255 bytes")]
    InvalidName(String),
    /// Leases are configured (`cluster.sharding.use-lease` or
    /// `coordinator-singleton.use-lease`) but the kind has no store to keep them in.
    #[error(
        "entity kind {0:?}: leases are configured (cluster.sharding.use-lease or \
         coordinator-singleton.use-lease) but the kind has no lease store; give it one with \
         EntityKind::with_lease_store (durable kinds use their own store)"
    )]
    NoLeaseStore(String),
    /// `cluster.sharding.remember-entities` is on but the kind has no store to remember its
    /// entities in.
    #[error(
        "entity kind {0:?}: cluster.sharding.remember-entities is on but the kind has no \
         store; give it one with EntityKind::with_remember_entities (or \
         EntityKind::with_lease_store), or opt out with EntityKind::without_remember_entities \
         (durable kinds use their own store)"
    )]
    NoRememberStore(String),
}

struct KindEntry {
    control: mpsc::Sender<Control>,
    /// The role whose members host this kind (the kind's own, else the configured one).
    role: Option<String>,
    /// The kind's `EntityRegion<E>`, for typed look-ups by key.
    region: Box<dyn std::any::Any + Send + Sync>,
}

struct Inner {
    /// Leases whose store is failing on this node (for `/ready`).
    lease_health: Arc<LeaseHealth>,
    /// Kinds whose coordinator here waits for silent members (for `/ready`).
    held_back: Arc<held_back::HeldBack>,
    node: NodeHandle,
    self_node: UniqueAddress,
    sender: UserSender,
    config: ShardingConfig,
    kinds: Mutex<HashMap<Arc<str>, KindEntry>>,
    pending: PendingAsks,
    replies: Arc<ReplyEndpoint>,
    stats_waiters: Mutex<HashMap<u64, mpsc::UnboundedSender<StatsAnswer>>>,
    next_stats_request: std::sync::atomic::AtomicU64,
}

impl resolve::RegionResolver for Inner {
    fn with_region(
        &self,
        kind: &str,
        f: &mut dyn FnMut(Option<&(dyn std::any::Any + Send + Sync)>),
    ) {
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        f(kinds.get(kind).map(|k| &*k.region));
    }

    fn reply_endpoint(&self) -> Arc<ReplyEndpoint> {
        Arc::clone(&self.replies)
    }
}

/// One region's answer to a stats request: its node and each hosted shard's entity count.
type StatsAnswer = (UniqueAddress, Vec<(ShardId, u32)>);

/// Entities per shard per region over the cluster, for one entity kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterShardingStats {
    /// Each region that answered (by node `host:port`) with its shards and entity counts.
    pub regions: std::collections::BTreeMap<String, Vec<(ShardId, u32)>>,
    /// Nodes expected to host the kind that did not answer in time.
    pub failed: Vec<String>,
}

/// Sharding on one node: registers entity kinds and routes their traffic.
#[derive(Clone)]
pub struct Sharding {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sharding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharding")
            .field("node", &self.inner.self_node)
            .finish_non_exhaustive()
    }
}

impl Sharding {
    /// The leases (`use-lease`) this node wants or holds whose store is failing, by lease name,
    /// with the last error: a node reports itself not ready while any is.
    pub fn failing_leases(&self) -> std::collections::BTreeMap<String, String> {
        self.inner.lease_health.failing()
    }

    /// The entity kinds whose coordinator runs on this node and allocates no new shard because
    /// some members have been silent longer than `cluster.sharding.unheard-region-warning-after`
    /// (neither registered a region of the kind nor said that they never started it), each
    /// with those members: what `/ready`'s body lists under `allocationHeldBack`.
    pub fn allocation_held_back(&self) -> Vec<HeldBackKind> {
        self.inner.held_back.snapshot()
    }

    /// Attaches sharding to a running node: from now on it serves the node's user traffic.
    /// Fails if sharding (or anything else) already took that traffic on this node.
    pub fn start(node: &RunningNode, config: ShardingConfig) -> Result<Sharding, StartError> {
        let user_messages = node
            .take_user_messages()
            .ok_or(StartError::AlreadyStarted)?;
        Ok(Self::attach(
            node.handle.clone(),
            node.self_node.clone(),
            user_messages,
            node.user_sender.clone(),
            &node.user_inbound,
            config,
        ))
    }

    fn attach(
        node: NodeHandle,
        self_node: UniqueAddress,
        user_messages: mpsc::Receiver<InboundUser>,
        sender: UserSender,
        user_inbound: &UserInbound,
        config: ShardingConfig,
    ) -> Sharding {
        let pending = PendingAsks::default();
        let replies = Arc::new(ReplyEndpoint::new(
            self_node.clone(),
            pending.clone(),
            sender.clone(),
        ));
        let inner = Arc::new(Inner {
            node,
            self_node,
            sender,
            config,
            kinds: Mutex::new(HashMap::new()),
            pending,
            replies,
            stats_waiters: Mutex::new(HashMap::new()),
            lease_health: Arc::default(),
            held_back: Arc::default(),
            next_stats_request: std::sync::atomic::AtomicU64::new(1),
        });
        // Frames are dispatched by the connections' readers from now on; what the queue
        // holds already (sent before sharding started) is dispatched by a task of its own.
        let sink = inbound::InboundSink {
            inner: Arc::downgrade(&inner),
            pending: inner.pending.clone(),
        };
        user_inbound.install(Arc::new(sink));
        tokio::spawn(inbound::drain_queue(
            inbound::Dispatcher::new(Arc::downgrade(&inner), inner.pending.clone()),
            user_messages,
        ));
        // Every way of leaving hands the shards off before the exit is confirmed. The regions
        // start on their own when they see this node Leaving; this task waits for them. Weak,
        // so that the node's task list does not keep sharding alive.
        let weak = Arc::downgrade(&inner);
        inner
            .node
            .exit_tasks()
            .register("cluster-sharding-shutdown-region", move || {
                let weak = weak.clone();
                Box::pin(async move {
                    let Some(inner) = weak.upgrade() else { return };
                    if !(Sharding { inner }).shutdown().await {
                        warn!("shard hand-off did not finish in time; exiting anyway");
                    }
                })
            });
        Sharding { inner }
    }

    /// This node.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.inner.self_node
    }

    /// Registers an entity kind and returns its region: a full region when this node has the
    /// kind's role, a proxy that only routes otherwise.
    pub fn init<E: Entity, C: Codec>(
        &self,
        kind: EntityKind<E, C>,
    ) -> Result<EntityRegion<E>, InitError> {
        if kind.name.is_empty() || kind.name.len() > 255 {
            return Err(InitError::InvalidName(kind.name.to_string()));
        }
        let cfg = &self.inner.config;
        let role = kind.role.clone().or_else(|| cfg.role.clone());
        let snapshot = self.inner.node.snapshot();
        let self_roles = snapshot
            .members
            .iter()
            .find(|m| m.addr == self.inner.self_node)
            .map(|m| m.roles.clone());
        // Before the node joined, its roles are not in the snapshot yet; the node's own
        // configured roles decide, which the caller passes via the membership config. A node
        // that lacks the role runs a proxy.
        let proxy = match (&role, self_roles) {
            (None, _) => false,
            (Some(r), Some(roles)) => !roles.contains(r),
            (Some(r), None) => !cfg.self_roles.contains(r),
        };
        let uses_leases = cfg.region.lease.is_some() || cfg.coordinator_lease.is_some();
        let remember = match &kind.remember {
            RememberChoice::On(settings) => Some(settings.clone()),
            RememberChoice::Off => None,
            RememberChoice::Configured => match (cfg.remember_entities, &kind.own_store) {
                (None, _) => None,
                (Some(recovery), Some(store)) => Some(RememberSettings {
                    store: Arc::clone(store),
                    recovery,
                }),
                // A proxy hosts no entity: it needs no store.
                (Some(_), None) if proxy => None,
                (Some(_), None) => return Err(InitError::NoRememberStore(kind.name.to_string())),
            },
        };
        let leases = match (&kind.own_store, uses_leases && !proxy) {
            (_, false) => None,
            (None, true) => return Err(InitError::NoLeaseStore(kind.name.to_string())),
            (Some(store), true) => {
                let timing = cfg.region.lease.or(cfg.coordinator_lease);
                let timing = timing.expect("one of the leases is on");
                Some(leases::KindLeases::new(
                    Arc::clone(store),
                    &cfg.cluster_name,
                    &kind.name,
                    &self.inner.self_node,
                    timing.operation_timeout,
                    timing.ttl,
                    Arc::clone(&self.inner.lease_health),
                ))
            }
        };
        let (local_tx, local_rx) = local_queue::channel(cfg.region.buffer_size.clamp(1, 1 << 20));
        let (control_tx, control_rx) = mpsc::channel(4096);
        let region = EntityRegion::<E> {
            name: kind.name.clone(),
            local: local_tx,
            control: control_tx.clone(),
            shards: ShardIds::new(cfg.number_of_shards, kind.extractor.clone()),
            replies: Arc::clone(&self.inner.replies),
        };
        {
            let mut kinds = self.inner.kinds.lock().unwrap_or_else(|e| e.into_inner());
            if kinds.contains_key(&kind.name) {
                return Err(InitError::AlreadyRegistered(kind.name.to_string()));
            }
            kinds.insert(
                kind.name.clone(),
                KindEntry {
                    control: control_tx.clone(),
                    role: role.clone(),
                    region: Box::new(region.clone()),
                },
            );
        }
        // How the kind's entities live; the core's lifecycle applies the rules (a plain idle
        // timeout is a scan of last-use times, limit strategies keep their own bookkeeping,
        // remembered entities are never passivated automatically).
        let entity_settings = EntitySettings {
            passivation: kind.effective_passivation(&cfg.passivation),
            remember: remember.is_some(),
            restart_backoff: cfg.entity_restart_backoff,
        };
        let task = KindTask {
            name: kind.name.clone(),
            me: self.inner.self_node.clone(),
            codec: Arc::clone(&kind.codec),
            settings: KindSettings {
                region: RegionSettings {
                    // A proxy never hosts a shard, so it never takes a lease.
                    lease: cfg.region.lease.filter(|_| !proxy),
                    ..cfg.region.clone()
                },
                coordinator_lease: cfg.coordinator_lease.filter(|_| !proxy),
                self_fence_after: cfg.self_fence_after,
                coordinator: cfg.coordinator.clone(),
                allocation: cfg.allocation,
                down_removal_margin: cfg.down_removal_margin,
                shutdown_timeout: cfg.shutdown_timeout,
                proxy,
                role,
            },
            entities: handlers::Entities::new(
                &entity_settings,
                Arc::clone(&kind.factory),
                kind.stop_message.clone(),
                shardik_core::Instant::ZERO,
            ),
            handlers: handlers::Handlers::new(self.inner.self_node.clone()),
            sender: self.inner.sender.clone(),
            pending: self.inner.pending.clone(),
            local: local_rx,
            control: control_rx,
            membership: self.inner.node.watch(),
            allocation: kind.allocation.clone(),
            control_back: control_tx.downgrade(),
            resolver: {
                let weak: resolve::Resolver = Arc::downgrade(&self.inner) as _;
                weak
            },
            remember,
            leases,
            held_back: Arc::clone(&self.inner.held_back),
        };
        tokio::spawn(task.run());
        Ok(region)
    }

    /// A reference to entity `id` of the kind `key` names (Akka's `entityRefFor`), from
    /// anywhere that has this node's sharding. The kind must have been registered on this node
    /// (as a region or a proxy) with the same entity type.
    pub fn entity_ref_for<E: Entity>(
        &self,
        key: EntityTypeKey<E>,
        id: &str,
    ) -> Result<EntityRef<E>, ShardingError> {
        let kinds = self.inner.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let entry = kinds
            .get(key.name())
            .ok_or_else(|| ShardingError::NotInitialized(key.name().to_string()))?;
        let region = entry
            .region
            .downcast_ref::<EntityRegion<E>>()
            .ok_or_else(|| ShardingError::WrongEntityType(key.name().to_string()))?;
        Ok(region.entity_ref(id))
    }

    /// Names of the entity kinds registered on this node.
    pub fn kinds(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .inner
            .kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .map(|k| k.to_string())
            .collect();
        v.sort();
        v
    }

    /// The state of this node's region of `kind` (shards and entity ids), or `None` if the
    /// kind is not registered here or did not answer within `timeout`.
    pub async fn region_state(&self, kind: &str, timeout: Duration) -> Option<RegionState> {
        self.query(kind, Control::State, timeout).await
    }

    /// This node's region statistics of `kind`: each hosted shard with its live entity count,
    /// or `None` if the kind is not registered here or did not answer within `timeout`.
    pub async fn region_stats(
        &self,
        kind: &str,
        timeout: Duration,
    ) -> Option<Vec<(ShardId, usize)>> {
        self.query(kind, Control::Stats, timeout).await
    }

    /// Asks `kind`'s task one question and waits at most `timeout` for the answer.
    async fn query<T>(
        &self,
        kind: &str,
        ask: impl FnOnce(oneshot::Sender<T>) -> Control,
        timeout: Duration,
    ) -> Option<T> {
        let control = self
            .inner
            .kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(kind)?
            .control
            .clone();
        let (tx, rx) = oneshot::channel();
        control.send(ask(tx)).await.ok()?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }

    /// Entities per shard per region of `kind` over the whole cluster: every member that may
    /// host the kind (Up, WeaklyUp or Leaving, with the kind's role) is asked; those that do
    /// not answer within `timeout` are listed in `failed`, never silently left out.
    pub async fn cluster_stats(
        &self,
        kind: &str,
        timeout: Duration,
    ) -> Option<ClusterShardingStats> {
        let role = self
            .inner
            .kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(kind)?
            .role
            .clone();
        // Which members hold the kind's shards is the sharding view's decision (with the
        // kind's own role), not this function's.
        let snapshot = self.inner.node.snapshot();
        let mut view = shardik_core::sharding::ShardingView::new(
            self.inner.self_node.clone(),
            role,
            Duration::ZERO,
        );
        view.update(
            shardik_core::Instant::ZERO,
            snapshot.members.iter().cloned(),
            snapshot
                .unreachable
                .iter()
                .map(|u| u.node.clone())
                .collect(),
        );
        let targets: Vec<UniqueAddress> = view.members_holding_shards().cloned().collect();
        let id = self
            .inner
            .next_stats_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request_id = std::num::NonZeroU64::new(id).unwrap_or(std::num::NonZeroU64::MIN);
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.inner
            .stats_waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let mut out = ClusterShardingStats::default();
        let mut waiting: std::collections::BTreeSet<UniqueAddress> =
            std::collections::BTreeSet::new();
        for t in &targets {
            if *t == self.inner.self_node {
                continue;
            }
            let frame = shardik_wire::ShardingFrame {
                kind: kind.into(),
                body: ShardingBody::StatsRequest { request_id },
            };
            if self
                .inner
                .sender
                .send(&t.address, shardik_wire::encode_sharding(&frame))
                .await
            {
                waiting.insert(t.clone());
            } else {
                out.failed.push(t.address.to_string());
            }
        }
        let deadline = tokio::time::Instant::now() + timeout;
        if targets.contains(&self.inner.self_node) {
            match self.region_stats(kind, timeout).await {
                Some(shards) => {
                    out.regions.insert(
                        self.inner.self_node.address.to_string(),
                        shards
                            .into_iter()
                            .map(|(s, n)| (s, u32::try_from(n).unwrap_or(u32::MAX)))
                            .collect(),
                    );
                }
                None => out.failed.push(self.inner.self_node.address.to_string()),
            }
        }
        while !waiting.is_empty() {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((from, shards))) => {
                    if waiting.remove(&from) {
                        out.regions.insert(from.address.to_string(), shards);
                    }
                }
                _ => break,
            }
        }
        self.inner
            .stats_waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        out.failed
            .extend(waiting.into_iter().map(|n| n.address.to_string()));
        out.failed.sort();
        Some(out)
    }

    /// Hands off every shard of every kind on this node (graceful shutdown), waiting at most
    /// the configured `shutdown_timeout`. Returns whether every region finished in time.
    pub async fn shutdown(&self) -> bool {
        let controls: Vec<mpsc::Sender<Control>> = self
            .inner
            .kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|k| k.control.clone())
            .collect();
        let mut waits = Vec::new();
        for c in controls {
            let (tx, rx) = oneshot::channel();
            if c.send(Control::Shutdown(tx)).await.is_ok() {
                waits.push(rx);
            }
        }
        let all = async {
            for w in waits {
                let _ = w.await;
            }
        };
        tokio::time::timeout(self.inner.config.shutdown_timeout, all)
            .await
            .is_ok()
    }
}

/// Shard ids for entity ids: the fixed hash (with the decimal ids pre-rendered, so routing
/// does not allocate) or a custom extractor.
#[derive(Clone)]
struct ShardIds {
    number_of_shards: std::num::NonZeroU32,
    rendered: Arc<[ShardId]>,
    extractor: Option<ShardExtractor>,
}

impl ShardIds {
    fn new(number_of_shards: u32, extractor: Option<ShardExtractor>) -> Self {
        let n = std::num::NonZeroU32::new(number_of_shards).unwrap_or(std::num::NonZeroU32::MIN);
        // Pre-render up to 65 536 ids; beyond that, render per message.
        let rendered: Arc<[ShardId]> = if extractor.is_none() && n.get() <= 65_536 {
            (0..n.get()).map(|i| ShardId::from(i.to_string())).collect()
        } else {
            Arc::from(Vec::new())
        };
        ShardIds {
            number_of_shards: n,
            rendered,
            extractor,
        }
    }

    fn shard_of(&self, entity: &str) -> ShardId {
        if let Some(x) = &self.extractor {
            return x(entity);
        }
        let i = shard_number_for(entity, self.number_of_shards) as usize;
        match self.rendered.get(i) {
            Some(s) => s.clone(),
            None => ShardId::from(i.to_string()),
        }
    }
}

/// A node's region (or proxy) for one entity kind: the way to reach its entities.
pub struct EntityRegion<E: Entity> {
    name: Arc<str>,
    local: local_queue::Sender<LocalMsg<E>>,
    control: mpsc::Sender<Control>,
    shards: ShardIds,
    /// The node's asks and answers, for `ask_with`.
    replies: Arc<ReplyEndpoint>,
}

impl<E: Entity> Clone for EntityRegion<E> {
    fn clone(&self) -> Self {
        EntityRegion {
            name: self.name.clone(),
            local: self.local.clone(),
            control: self.control.clone(),
            shards: self.shards.clone(),
            replies: Arc::clone(&self.replies),
        }
    }
}

impl<E: Entity> std::fmt::Debug for EntityRegion<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityRegion")
            .field("kind", &self.name)
            .finish_non_exhaustive()
    }
}

impl<E: Entity> EntityRegion<E> {
    /// The kind's name.
    pub fn kind(&self) -> &str {
        &self.name
    }

    /// A reference to the entity `id` (cheap; nothing is created until a message arrives).
    pub fn entity_ref(&self, id: &str) -> EntityRef<E> {
        EntityRef {
            region: self.clone(),
            ids: Arc::new(RefIds::new(self.shards.shard_of(id), id.into())),
        }
    }

    /// The shard of entity `id`.
    pub fn shard_of(&self, id: &str) -> ShardId {
        self.shards.shard_of(id)
    }

    /// Sends `cmd` to entity `id`, waiting while the region's queue is full.
    pub async fn tell(&self, id: &str, cmd: E::Command) -> Result<(), TellError> {
        self.entity_ref(id).tell(cmd).await
    }

    /// Sends `cmd` to entity `id`, failing at once when the region's queue is full.
    pub fn try_tell(&self, id: &str, cmd: E::Command) -> Result<(), TellError> {
        self.entity_ref(id).try_tell(cmd)
    }

    /// This node's region state: hosted shards and their entity ids.
    pub async fn state(&self, timeout: Duration) -> Option<RegionState> {
        let (tx, rx) = oneshot::channel();
        self.control.send(Control::State(tx)).await.ok()?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }
}

/// The address of one entity.
///
/// An `EntityRef` may travel inside a command or a reply, to an entity or an asker on any
/// node: it is encoded as its kind's name and the entity's id, and decoded into a reference
/// through the receiving node's region (or proxy) of that kind, so it is usable there at once
/// (`tell`, `ask`). The receiving node must have registered the kind with the same entity type;
/// otherwise, or when decoded outside a node's sharding (by hand, say), decoding fails with a
/// codec error, and the message is dropped as undecodable.
pub struct EntityRef<E: Entity> {
    region: EntityRegion<E>,
    ids: Arc<RefIds>,
}

/// An entity reference's ids, shared behind one more pointer so that a message carries them
/// with one reference count of their own: the sender's thread then never writes to the ids'
/// own counts, which share a cache line with their text, so the kind's thread, which hashes
/// that text for every message, does not lose the line to the sender's thread each time.
///
/// The ids are also kept off the cache line of this value's own counts, which the sender
/// writes for every message: the 48 bytes before them fill that line with the 16 bytes of the
/// counts whatever the allocation's place in its line, so the kind's thread reads the ids
/// without waiting for a line the sender's thread has just written. Measured (`bench sharding
/// local`, retry mode): 7.1–7.95 M tells/s against 5.2–7.7 M without, and steadier. Padding
/// rather than `align(64)`: an over-aligned allocation takes the allocator's slow aligned path
/// for every reference made, and fragmented the heap of a node creating a million entities;
/// padding after the ids as well measured within the noise of this, and cost another 48 bytes
/// per reference (`bench sharding memory`, which makes one reference per entity, rose from
/// 148 to 151 bytes per entity; 141.5 without padding).
#[repr(C)]
pub(crate) struct RefIds {
    _apart_from_counts: [u64; 6],
    pub shard: ShardId,
    pub id: EntityId,
}

impl RefIds {
    fn new(shard: ShardId, id: EntityId) -> Self {
        RefIds {
            _apart_from_counts: [0; 6],
            shard,
            id,
        }
    }
}

impl<E: Entity> Clone for EntityRef<E> {
    fn clone(&self) -> Self {
        EntityRef {
            region: self.region.clone(),
            ids: Arc::clone(&self.ids),
        }
    }
}

impl<E: Entity> std::fmt::Debug for EntityRef<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityRef")
            .field("kind", &self.region.name)
            .field("id", &self.ids.id)
            .finish()
    }
}

impl<E: Entity> serde::Serialize for EntityRef<E> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (&*self.region.name, &*self.ids.id).serialize(serializer)
    }
}

impl<'de, E: Entity> serde::Deserialize<'de> for EntityRef<E> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (kind, id): (String, String) = serde::Deserialize::deserialize(deserializer)?;
        resolve::resolve(&kind, |region| {
            region
                .downcast_ref::<EntityRegion<E>>()
                .map(|r| r.entity_ref(&id))
        })
        .map_err(|e| match e {
            resolve::ResolveError::NoSharding => D::Error::custom(format!(
                "EntityRef to {kind:?}/{id:?}: an EntityRef can only be decoded by a node's sharding"
            )),
            resolve::ResolveError::UnknownKind => D::Error::custom(format!(
                "EntityRef to {kind:?}/{id:?}: {}",
                ShardingError::NotInitialized(kind.clone())
            )),
            resolve::ResolveError::WrongType => D::Error::custom(format!(
                "EntityRef to {kind:?}/{id:?}: entity kind {kind:?} is registered here with another entity type"
            )),
        })
    }
}

impl<E: Entity> EntityRef<E> {
    /// The entity's kind.
    pub fn kind(&self) -> &str {
        &self.region.name
    }

    /// The entity's id.
    pub fn id(&self) -> &str {
        &self.ids.id
    }

    fn msg(&self, cmd: E::Command, reply: Option<LocalReply<E::Reply>>) -> LocalMsg<E> {
        LocalMsg {
            ids: Arc::clone(&self.ids),
            cmd,
            reply,
        }
    }

    /// Sends `cmd` without waiting for an answer. Fails at once with
    /// [`TellError::BufferFull`] when the region's queue is full.
    pub fn try_tell(&self, cmd: E::Command) -> Result<(), TellError> {
        self.region
            .local
            .try_send(self.msg(cmd, None))
            .map_err(|e| match e {
                local_queue::TrySendError::Full(_) => TellError::BufferFull,
                local_queue::TrySendError::Closed(_) => TellError::RegionStopped,
            })
    }

    /// Sends `cmd` without waiting for an answer, but waiting while the region's queue is
    /// full: the back-pressure a steady sender wants. It fails only when the
    /// region has stopped.
    pub async fn tell(&self, cmd: E::Command) -> Result<(), TellError> {
        self.region
            .local
            .send(self.msg(cmd, None))
            .await
            .map_err(|_| TellError::RegionStopped)
    }

    /// As [`ask`](Self::ask), for an entity that answers with a [`StatusReply`] (Akka's
    /// `askWithStatus`): a success gives its value, a refusal is
    /// [`ShardingError::Refused`].
    pub async fn ask_status<T>(
        &self,
        cmd: E::Command,
        timeout: Duration,
    ) -> Result<T, ShardingError>
    where
        E: Entity<Reply = StatusReply<T>>,
    {
        self.ask(cmd, timeout)
            .await?
            .into_result()
            .map_err(ShardingError::Refused)
    }

    /// Sends the command `make` builds around a [`ReplyTo`] and waits at most `timeout` for
    /// the answer the entity sends through it (Akka's `ask(replyTo => Cmd(.., replyTo))`): each
    /// command can have its own reply type. The command goes as a tell, so the entity's own
    /// `Reply` is not used for it; an entity that never answers, or fails while handling the
    /// command, makes the ask time out.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use shardik_runtime::sharding::{Entity, EntityContext, EntityRef, ReplyTo};
    /// # #[derive(Serialize, Deserialize)]
    /// # enum AccountCmd { Balance(ReplyTo<u64>) }
    /// # struct Account;
    /// # impl Entity for Account {
    /// #     type Command = AccountCmd;
    /// #     type Reply = ();
    /// #     async fn handle(&mut self, cmd: AccountCmd, _: &mut EntityContext<Self>) {}
    /// # }
    /// # async fn example(account: EntityRef<Account>) -> Result<(), shardik_runtime::sharding::ShardingError> {
    /// let balance: u64 = account
    ///     .ask_with(AccountCmd::Balance, Duration::from_secs(5))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ask_with<R, C>(
        &self,
        make: impl FnOnce(ReplyTo<R, C>) -> E::Command,
        timeout: Duration,
    ) -> Result<R, ShardingError>
    where
        R: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
        C: Codec + Default,
    {
        if timeout.is_zero() {
            return Err(ShardingError::InvalidTimeout);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let (tx, rx) = oneshot::channel();
        let slot: reply_to::AnswerSlot<R> = Arc::new(Mutex::new(Some(tx)));
        // Registered with the node's waiting asks in case the command, and the ReplyTo inside
        // it, travel to another node: the answer then comes back encoded, by ask id.
        let remote_slot = Arc::clone(&slot);
        let ask_id = self
            .region
            .replies
            .pending()
            .register(deadline, move |answer| {
                let answer = answer.and_then(|bytes| Ok(C::default().decode::<R>(&bytes)?));
                reply_to::fill(&remote_slot, answer);
            });
        let reply_to = ReplyTo::local(
            Arc::clone(&self.region.name),
            ask_id,
            slot,
            Arc::clone(&self.region.replies),
        );
        let sent = tokio::time::timeout_at(
            deadline,
            self.region.local.send(self.msg(make(reply_to), None)),
        )
        .await;
        let outcome = match sent {
            Ok(Ok(())) => match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(answer)) => answer,
                // No answer in time (the slot also closes when the expired entry is swept).
                Ok(Err(_)) | Err(_) => Err(ShardingError::Timeout(timeout)),
            },
            Ok(Err(_)) => Err(ShardingError::RegionStopped),
            Err(_) => Err(ShardingError::Timeout(timeout)),
        };
        self.region.replies.pending().forget(ask_id.get());
        outcome
    }

    /// Sends `cmd` and waits at most `timeout` for the entity's reply.
    pub async fn ask(&self, cmd: E::Command, timeout: Duration) -> Result<E::Reply, ShardingError> {
        if timeout.is_zero() {
            return Err(ShardingError::InvalidTimeout);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let (tx, rx) = oneshot::channel();
        let msg = self.msg(cmd, Some(LocalReply { tx, deadline }));
        // Usually the region's queue has room: no timer is needed to wait for it.
        match self.region.local.try_send(msg) {
            Ok(()) => {}
            Err(local_queue::TrySendError::Closed(_)) => return Err(ShardingError::RegionStopped),
            Err(local_queue::TrySendError::Full(msg)) => {
                match tokio::time::timeout_at(deadline, self.region.local.send(msg)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Err(ShardingError::RegionStopped),
                    Err(_) => return Err(ShardingError::Timeout(timeout)),
                }
            }
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ShardingError::ShardUnavailable(
                "the request was lost with its shard (node failure or force stop)".into(),
            )),
            Err(_) => Err(ShardingError::Timeout(timeout)),
        }
    }
}

#[cfg(test)]
mod ref_ids_tests {
    use super::RefIds;

    #[test]
    fn the_ids_start_a_full_cache_line_after_the_reference_counts() {
        // An `Arc`'s two counts take the allocation's first 16 bytes; with 48 more before the
        // ids, the ids begin 64 bytes in, so never on the counts' line.
        assert_eq!(std::mem::offset_of!(RefIds, shard), 48);
        assert!(std::mem::offset_of!(RefIds, id) > std::mem::offset_of!(RefIds, shard));
        assert_eq!(
            std::mem::align_of::<RefIds>(),
            8,
            "no over-aligned allocation"
        );
    }
}

#[cfg(test)]
mod not_initialized_tests {
    use std::sync::Arc;

    use super::resolve::{RegionResolver, Resolver, decoding_with};
    use super::*;

    /// A node on which no kind was ever initialised.
    struct NoKinds;

    impl RegionResolver for NoKinds {
        fn with_region(
            &self,
            _kind: &str,
            f: &mut dyn FnMut(Option<&(dyn std::any::Any + Send + Sync)>),
        ) {
            f(None)
        }

        fn reply_endpoint(&self) -> Arc<ReplyEndpoint> {
            unreachable!("decoding an EntityRef never answers an ask")
        }
    }

    struct Ponger;

    impl Entity for Ponger {
        type Command = u32;
        type Reply = u32;
        async fn handle(&mut self, cmd: u32, _: &mut EntityContext<Self>) -> u32 {
            cmd
        }
    }

    #[test]
    fn an_entity_ref_to_a_kind_never_initialised_here_says_to_call_init() {
        let node: Arc<dyn RegionResolver> = Arc::new(NoKinds);
        let resolver: Resolver = Arc::downgrade(&node);
        let err = decoding_with(&resolver, || {
            serde_json::from_str::<EntityRef<Ponger>>(r#"["ponger","p-1"]"#)
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("EntityRef to \"ponger\"/\"p-1\"")
                && err.contains("never initialised on this node")
                && err.contains("sharding().init(EntityKind::new(\"ponger\""),
            "{err}"
        );
    }
}
