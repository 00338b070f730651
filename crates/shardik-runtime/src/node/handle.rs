//! The handle through which the edges (management HTTP API, public API, tests) observe and
//! steer a running node without touching its driver task.
//!
//! The driver publishes a fresh [`MembershipSnapshot`] after every change on a watch channel
//! and serves [`ControlCommand`]s from a bounded queue, answering each on a oneshot channel.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shardik_core::membership::{
    Address, ClusterEvent, CommandError, Member, MemberStatus, ShutdownReason, UniqueAddress,
};
use shardik_core::node::ClusterView;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::exit::ExitTasks;

/// The cluster as one node sees it at one moment.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MembershipSnapshot {
    /// This node's incarnation.
    pub self_node: UniqueAddress,
    /// This node's status (`None` before it joined or after it was removed).
    pub self_status: Option<MemberStatus>,
    /// The leader, if any.
    pub leader: Option<UniqueAddress>,
    /// The oldest Up member, if any.
    pub oldest: Option<UniqueAddress>,
    /// The oldest member per role.
    pub oldest_per_role: BTreeMap<String, UniqueAddress>,
    /// All members, in address order.
    pub members: Vec<Member>,
    /// Unreachable members and who observes them so.
    pub unreachable: Vec<UnreachableMember>,
    /// Whether this node sees convergence.
    pub converged: bool,
    /// Why this node stopped, once it has: the last snapshot a stopped node publishes says
    /// so (a refused configuration names the keys that differ).
    pub stopped: Option<ShutdownReason>,
    /// While this node has not got in through its seeds for `cluster.seed-node-timeout`:
    /// each seed it could not join, with why as far as the transport knows
    /// (`127.0.0.1:2551: connection refused`). Empty once it joined.
    pub unanswered_seeds: Vec<String>,
}

/// One unreachable member and its observers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreachableMember {
    /// The member.
    pub node: UniqueAddress,
    /// The members that observe it as unreachable.
    pub observed_by: Vec<UniqueAddress>,
}

impl MembershipSnapshot {
    /// A snapshot of a node that has not joined yet.
    pub fn not_joined(self_node: UniqueAddress) -> Self {
        MembershipSnapshot {
            self_node,
            self_status: None,
            leader: None,
            oldest: None,
            oldest_per_role: BTreeMap::new(),
            members: Vec::new(),
            unreachable: Vec::new(),
            converged: false,
            stopped: None,
            unanswered_seeds: Vec::new(),
        }
    }

    /// The member at `address`, if any.
    pub fn member_at(&self, address: &Address) -> Option<&Member> {
        self.members.iter().find(|m| &m.addr.address == address)
    }

    /// Whether the node is ready for traffic: Up or WeaklyUp.
    pub fn is_ready(&self) -> bool {
        matches!(
            self.self_status,
            Some(MemberStatus::Up | MemberStatus::WeaklyUp)
        )
    }
}

/// A membership change requested through the handle.
#[derive(Debug)]
pub enum ControlCommand {
    /// Join the cluster through the node at this address (this node's own address starts a
    /// new cluster).
    Join(Address, oneshot::Sender<Result<(), CommandError>>),
    /// Join through these seed nodes (the core's `JoinSeedNodes`: the first that answers is
    /// joined; a first seed that is this node may form a new cluster).
    JoinSeedNodes(Vec<Address>, oneshot::Sender<Result<(), CommandError>>),
    /// Mark the member at this address Leaving.
    Leave(Address, oneshot::Sender<Result<(), CommandError>>),
    /// Mark the member at this address Down.
    Down(Address, oneshot::Sender<Result<(), CommandError>>),
    /// Prepare the whole cluster for a full shutdown (the core's
    /// `PrepareForFullClusterShutdown`).
    PrepareForFullClusterShutdown(oneshot::Sender<Result<(), CommandError>>),
}

/// Why a control request did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The core refused it; the inner error says why.
    #[error(transparent)]
    Refused(#[from] CommandError),
    /// The node is shutting down and no longer takes commands.
    #[error("the node is shutting down")]
    NodeStopped,
    /// The node did not answer in time (it is overloaded or stuck).
    #[error("the node did not answer within {0:?}")]
    Timeout(Duration),
}

/// A cheap, cloneable handle to a running node.
#[derive(Clone, Debug)]
pub struct NodeHandle {
    snapshot: watch::Receiver<Arc<MembershipSnapshot>>,
    commands: mpsc::Sender<ControlCommand>,
    exit_tasks: ExitTasks,
    events: broadcast::Sender<ClusterEvent>,
    /// The membership the entity kinds act on, as the node core gives it.
    view: watch::Receiver<Arc<ClusterView>>,
}

/// Cluster events kept for a subscriber that reads slowly.
pub const EVENT_BUFFER: usize = 1024;

impl NodeHandle {
    /// A handle from the driver's channels (with no entity-kind view: for an edge that serves
    /// only the snapshot and the commands, such as the management API in tests). Hidden: a
    /// seam for the runtime's own tests, outside the facade's promise.
    #[doc(hidden)]
    pub fn new(
        snapshot: watch::Receiver<Arc<MembershipSnapshot>>,
        commands: mpsc::Sender<ControlCommand>,
    ) -> Self {
        Self::with_view(snapshot, commands, watch::channel(Arc::default()).1)
    }

    /// A handle from the driver's channels, with the view the kinds act on.
    pub(crate) fn with_view(
        snapshot: watch::Receiver<Arc<MembershipSnapshot>>,
        commands: mpsc::Sender<ControlCommand>,
        view: watch::Receiver<Arc<ClusterView>>,
    ) -> Self {
        NodeHandle {
            snapshot,
            commands,
            exit_tasks: ExitTasks::default(),
            events: broadcast::channel(EVENT_BUFFER).0,
            view,
        }
    }

    /// Subscribes to this node's cluster events (member joined, weakly up, up, left, exited,
    /// downed, removed; unreachable and reachable again; leader changes), in the order the
    /// node saw them, like Akka's `Cluster.subscribe`. Events published before the call are
    /// not replayed: read [`snapshot`](Self::snapshot) for the state at the start. A
    /// subscriber that falls more than [`EVENT_BUFFER`] events behind is told how many it
    /// missed (`RecvError::Lagged`) and goes on from the oldest kept.
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.events.subscribe()
    }

    /// Where the node's driver publishes its cluster events.
    pub(crate) fn events(&self) -> &broadcast::Sender<ClusterEvent> {
        &self.events
    }

    /// The node's exit tasks: what runs between this node becoming Exiting and its confirming
    /// it, on every way of leaving (see [`super::exit`]).
    pub(crate) fn exit_tasks(&self) -> &ExitTasks {
        &self.exit_tasks
    }

    /// A receiver of the membership the entity kinds act on
    /// ([`NodeCore::take_view`](shardik_core::node::NodeCore::take_view)); it wakes on every
    /// change, and reports an error once the node has stopped.
    pub(crate) fn cluster_view(&self) -> watch::Receiver<Arc<ClusterView>> {
        self.view.clone()
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<MembershipSnapshot> {
        self.snapshot.borrow().clone()
    }

    /// A receiver that wakes on every new snapshot.
    pub fn watch(&self) -> watch::Receiver<Arc<MembershipSnapshot>> {
        self.snapshot.clone()
    }

    /// Joins the cluster through the node at `address`, or starts a new cluster when it is
    /// this node's own address. `Ok` means the attempt started; the node is a member once the
    /// snapshot shows it. Refused with `AlreadyJoining` when it already joined or is joining.
    pub async fn join(&self, address: Address) -> Result<(), ControlError> {
        self.request(|tx| ControlCommand::Join(address, tx)).await
    }

    /// Joins through `seeds`: the first that accepts is joined (cluster bootstrap joins an
    /// existing cluster this way). Refused with `AlreadyJoining` as [`join`](Self::join).
    pub async fn join_seed_nodes(&self, seeds: Vec<Address>) -> Result<(), ControlError> {
        self.request(|tx| ControlCommand::JoinSeedNodes(seeds, tx))
            .await
    }

    /// Asks the member at `address` to leave.
    pub async fn leave(&self, address: Address) -> Result<(), ControlError> {
        self.request(|tx| ControlCommand::Leave(address, tx)).await
    }

    /// Marks the member at `address` Down.
    pub async fn down(&self, address: Address) -> Result<(), ControlError> {
        self.request(|tx| ControlCommand::Down(address, tx)).await
    }

    /// Prepares the whole cluster for a full shutdown (Akka's
    /// `prepareForFullClusterShutdown`): every Up member becomes PreparingForShutdown, then
    /// ReadyForShutdown once all have seen it. From then on no member is moved Up, no node
    /// joins, and no shard moves: when the nodes are then stopped (each leaves as usual), their
    /// shards stop where they are instead of being handed to the nodes that remain. Refused
    /// ([`CommandError::NotAMember`]) on a node that is not a member.
    pub async fn prepare_for_full_cluster_shutdown(&self) -> Result<(), ControlError> {
        self.request(ControlCommand::PrepareForFullClusterShutdown)
            .await
    }

    async fn request(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<(), CommandError>>) -> ControlCommand,
    ) -> Result<(), ControlError> {
        const LIMIT: Duration = Duration::from_secs(5);
        let (tx, rx) = oneshot::channel();
        let send = self.commands.send_timeout(make(tx), LIMIT).await;
        if send.is_err() {
            return Err(ControlError::NodeStopped);
        }
        match tokio::time::timeout(LIMIT, rx).await {
            Ok(Ok(result)) => result.map_err(ControlError::from),
            Ok(Err(_)) => Err(ControlError::NodeStopped),
            Err(_) => Err(ControlError::Timeout(LIMIT)),
        }
    }
}
