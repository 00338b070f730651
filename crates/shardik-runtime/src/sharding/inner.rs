//! The state every [`Sharding`](super::Sharding) handle of a node shares: the registered kinds,
//! the node's waiting asks and statistics requests, lease and allocation health. Inbound
//! traffic and decoded entity references reach it weakly, so that nothing but the handles
//! keeps it alive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::ShardId;
use tokio::sync::{mpsc, oneshot};

use super::config::ShardingConfig;
use super::held_back;
use super::leases::LeaseHealth;
use super::messages::Control;
use super::pending::{PendingAsks, ReplyEndpoint};
use super::resolve;
use crate::node::handle::NodeHandle;
use shardik_transport::UserSender;

/// One registered entity kind: how to reach its task, and its region for typed look-ups.
pub(super) struct KindEntry {
    pub(super) control: mpsc::Sender<Control>,
    /// The role whose members host this kind (the kind's own, else the configured one).
    pub(super) role: Option<String>,
    /// The kind's `EntityRegion<E>`, for typed look-ups by key.
    pub(super) region: Box<dyn std::any::Any + Send + Sync>,
}

/// What every [`Sharding`](super::Sharding) handle of one node shares.
pub(super) struct Inner {
    /// Leases whose store is failing on this node (for `/ready`).
    pub(super) lease_health: Arc<LeaseHealth>,
    /// Kinds whose coordinator here waits for silent members (for `/ready`).
    pub(super) held_back: Arc<held_back::HeldBack>,
    pub(super) node: NodeHandle,
    pub(super) self_node: UniqueAddress,
    pub(super) sender: UserSender,
    pub(super) config: ShardingConfig,
    pub(super) kinds: Mutex<HashMap<Arc<str>, KindEntry>>,
    /// The kinds' tasks, for [`Sharding::stopped`](super::Sharding::stopped) to wait for.
    pub(super) kind_tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    pub(super) pending: PendingAsks,
    pub(super) replies: Arc<ReplyEndpoint>,
    pub(super) stats_waiters: Mutex<HashMap<u64, mpsc::UnboundedSender<StatsAnswer>>>,
    pub(super) next_stats_request: std::sync::atomic::AtomicU64,
    /// The node's span (`node{node=...}`), entered where the application calls in (`init`),
    /// so that the tasks spawned there log under the node's name as well.
    pub(super) span: tracing::Span,
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

/// One region's answer to a stats request: its node, each hosted shard's entity count, and
/// whether it is registered with its coordinator.
pub(super) type StatsAnswer = (UniqueAddress, Vec<(ShardId, u32)>, bool);

impl Inner {
    /// Asks `kind`'s task one question and waits at most `timeout` for the answer.
    pub(super) async fn query<T>(
        &self,
        kind: &str,
        ask: impl FnOnce(oneshot::Sender<T>) -> Control,
        timeout: Duration,
    ) -> Option<T> {
        let control = self
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
}
