//! [`Sharding`], a node's handle on its sharding: attaching it to a running node, looking up
//! kinds and entities, asking a kind's region for its state, and the graceful shutdown that
//! hands every shard off. Registering a kind is `init.rs`; statistics over the cluster are
//! `cluster_stats.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::ShardId;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::api::{Entity, EntityTypeKey, ShardingError};
use super::config::ShardingConfig;
use super::entity_ref::{EntityRef, EntityRegion};
use super::held_back::HeldBackKind;
use super::inbound;
use super::init_error::StartError;
use super::inner::Inner;
use super::messages::{Control, RegionState};
use super::pending::{PendingAsks, ReplyEndpoint};
use super::resolve;
use crate::node::RunningNode;
use crate::node::handle::NodeHandle;
use shardik_transport::{InboundUser, UserInbound, UserSender};

/// Sharding on one node: registers entity kinds and routes their traffic.
#[derive(Clone)]
pub struct Sharding {
    pub(super) inner: Arc<Inner>,
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
    /// Fails if sharding (or anything else) already took that traffic on this node. Hidden:
    /// [`NodeBuilder::start`](crate::cluster_node::NodeBuilder::start) does this for an application; the
    /// runtime's tests and the benchmark program wire the parts themselves.
    #[doc(hidden)]
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
            kind_tasks: Mutex::new(Vec::new()),
            pending,
            replies,
            stats_waiters: Mutex::new(HashMap::new()),
            lease_health: Arc::default(),
            held_back: Arc::default(),
            next_stats_request: std::sync::atomic::AtomicU64::new(1),
            // Sharding starts inside the node's start, in its span.
            span: tracing::Span::current(),
        });
        // Answers to this node's asks may hold entity references: they decode through its
        // regions.
        let resolver: resolve::Resolver = Arc::downgrade(&inner) as _;
        inner.pending.set_decoding_context(Box::new(move |decode| {
            resolve::decoding_with(&resolver, decode)
        }));
        // Frames are dispatched by the connections' readers from now on; what the queue
        // holds already (sent before sharding started) is dispatched by a task of its own.
        let sink = inbound::InboundSink {
            inner: Arc::downgrade(&inner),
            pending: inner.pending.clone(),
        };
        user_inbound.install(Arc::new(sink));
        crate::task::spawn(inbound::drain_queue(
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
        self.inner.query(kind, Control::State, timeout).await
    }

    /// This node's region statistics of `kind`: each hosted shard with its live entity count,
    /// or `None` if the kind is not registered here or did not answer within `timeout`.
    pub async fn region_stats(
        &self,
        kind: &str,
        timeout: Duration,
    ) -> Option<Vec<(ShardId, usize)>> {
        self.inner
            .query(kind, Control::Stats, timeout)
            .await
            .map(|counts| counts.shards)
    }

    /// Waits until the task of every kind registered on this node has ended, which each does
    /// once the node has stopped: its entities stopped, its coordinator (if it ran here)
    /// stopped, and its leases given back to the store (each release bounded by
    /// `lease-operation-timeout`). [`Node::wait`](crate::cluster_node::Node::wait) and the calls built on it
    /// wait for this; a program that drives the node's stop itself
    /// ([`Node::into_parts`](crate::cluster_node::Node::into_parts)) awaits it after the node's
    /// `finished`, before the process ends, so that the next node to take a lease this one
    /// held is not kept waiting for its time-to-live. Only the first call waits; later ones
    /// return at once.
    pub async fn stopped(&self) {
        let tasks = std::mem::take(
            &mut *self
                .inner
                .kind_tasks
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for task in tasks {
            // A kind task that panicked has stopped too.
            let _ = task.await;
        }
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
