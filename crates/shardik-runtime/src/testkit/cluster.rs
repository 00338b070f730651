//! [`TestCluster`]: N nodes in this process, up and agreed, in one call.

use std::time::Duration;

use shardik_config::Settings;
use shardik_core::membership::{Address, MemberStatus};

use crate::cluster_node::{Node, NodeBuilder};
use crate::node::StartError;
use crate::node::handle::ControlError;
use crate::node::member_up::NotUp;
use crate::sharding::{Codec, Entity, EntityKind, InitError, NotHosted};

/// How long a test cluster waits for its nodes to become Up and agree, and for a kind to be
/// hosted on every node: generous, because a test machine under load is slow, and a test
/// that fails says why rather than hanging.
const WAIT: Duration = Duration::from_secs(30);

/// N nodes in this process, each on a loopback port the OS picks, with
/// [`Settings::with_test_timings`]: the first forms the cluster (and is its oldest member,
/// where the kinds' coordinators run), the others join it, and [`start`](Self::start)
/// returns once every node sees every other Up.
///
/// ```
/// # use shardik_runtime::facade as shardik;
/// use serde::{Deserialize, Serialize};
/// use shardik::{Entity, EntityContext, EntityKind, EntityTypeKey, ReplyTo, Settings};
/// use shardik::testkit::TestCluster;
///
/// #[derive(Serialize, Deserialize)]
/// enum Cmd {
///     Add(u64),
///     Get(ReplyTo<u64>),
/// }
///
/// #[derive(Default)]
/// struct Counter(u64);
///
/// impl Entity for Counter {
///     type Command = Cmd;
///     async fn handle(&mut self, cmd: Cmd, _ctx: &mut EntityContext<Self>) {
///         match cmd {
///             Cmd::Add(n) => self.0 += n,
///             Cmd::Get(reply_to) => reply_to.send(self.0),
///         }
///     }
/// }
///
/// const COUNTER: EntityTypeKey<Counter> = EntityTypeKey::new("counter");
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cluster = TestCluster::start(3, Settings::reference()).await?;
/// // The kind on every node, and every node ready to host its shards.
/// cluster
///     .init(|| EntityKind::for_key(COUNTER, |_| Counter::default()))
///     .await?;
/// let timeout = std::time::Duration::from_secs(5);
/// let counter = cluster.node(0).sharding().entity_ref_for(COUNTER, "c-1")?;
/// counter.tell(Cmd::Add(2)).await?;
/// // One sender's messages arrive in order: the tell is handled before this ask.
/// assert_eq!(counter.ask(Cmd::Get, timeout).await?, 2);
/// // Asked through another node, answered by the one copy wherever it lives. (Had it been
/// // asked before the first ask returned, it could have overtaken the tell: messages of
/// // different senders have no order among them.)
/// let again = cluster.node(2).sharding().entity_ref_for(COUNTER, "c-1")?;
/// assert_eq!(again.ask(Cmd::Get, timeout).await?, 2);
/// cluster.leave().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct TestCluster {
    nodes: Vec<Node>,
}

/// Why a [`TestCluster`] did not come up, or a kind did not start on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestClusterError {
    /// A node did not start (its settings, its port, its store).
    #[error("a node of the test cluster did not start: {0}")]
    Start(#[from] StartError),
    /// The first node could not be asked to form the cluster.
    #[error("the test cluster's first node could not form the cluster: {0}")]
    Form(#[from] ControlError),
    /// A node was not Up in time, or stopped first.
    #[error("a node of the test cluster is not Up: {0}")]
    NotUp(#[from] NotUp),
    /// The nodes did not all see each other Up in time.
    #[error("the test cluster's nodes did not all see each other Up within {0:?}")]
    NotAgreed(Duration),
    /// A kind could not be initialized on a node.
    #[error("the kind could not start on a node of the test cluster: {0}")]
    Init(#[from] InitError),
    /// A kind was not hosted on every node in time.
    #[error(transparent)]
    NotHosted(#[from] NotHosted),
}

impl TestCluster {
    /// Starts `n` nodes (at least one) with `settings` and test timings, and waits until
    /// each sees all `n` Up.
    pub async fn start(n: usize, settings: Settings) -> Result<TestCluster, TestClusterError> {
        TestCluster::start_with(n, settings, |_, builder| builder).await
    }

    /// As [`start`](Self::start), with each node's builder changed by `configure` (given the
    /// node's index), for stores, roles, management APIs and the like.
    pub async fn start_with(
        n: usize,
        settings: Settings,
        configure: impl Fn(usize, NodeBuilder) -> NodeBuilder,
    ) -> Result<TestCluster, TestClusterError> {
        let settings = settings.with_test_timings();
        let any_port = Address::new("127.0.0.1", 0);
        let first = configure(0, Node::builder(settings.clone()).bind(any_port.clone()))
            .seeds([])
            .start()
            .await?;
        // The first node's address is known only once it has bound: it forms the cluster by
        // joining itself, and the others join through it once it is Up, so that it is the
        // oldest member (where the kinds' coordinators run), as the node order promises.
        let seed = first.self_node().address.clone();
        first.handle().join(seed.clone()).await?;
        first.wait_until_up_within(WAIT).await?;
        let mut nodes = vec![first];
        for i in 1..n.max(1) {
            let node = configure(i, Node::builder(settings.clone()).bind(any_port.clone()))
                .seeds([seed.clone()])
                .start()
                .await?;
            nodes.push(node);
        }
        for node in &nodes {
            node.wait_until_up_within(WAIT).await?;
        }
        let cluster = TestCluster { nodes };
        cluster.until_all_see_all_up().await?;
        Ok(cluster)
    }

    /// Waits until every node sees every node Up.
    async fn until_all_see_all_up(&self) -> Result<(), TestClusterError> {
        let n = self.nodes.len();
        let all_up = |node: &Node| {
            let snapshot = node.handle().snapshot();
            snapshot.members.len() == n
                && snapshot
                    .members
                    .iter()
                    .all(|m| m.status == MemberStatus::Up)
        };
        let wait = async {
            for node in &self.nodes {
                let mut watch = node.handle().watch();
                while !all_up(node) {
                    if watch.changed().await.is_err() {
                        return false;
                    }
                }
            }
            true
        };
        match tokio::time::timeout(WAIT, wait).await {
            Ok(true) => Ok(()),
            _ => Err(TestClusterError::NotAgreed(WAIT)),
        }
    }

    /// Initializes the kind `make` builds on every node, and waits until every node can host
    /// its shards ([`Sharding::wait_until_hosted`](crate::sharding::Sharding::wait_until_hosted)),
    /// so that the shards of the first messages spread over the whole cluster.
    pub async fn init<E: Entity, C: Codec>(
        &self,
        make: impl Fn() -> EntityKind<E, C>,
    ) -> Result<(), TestClusterError> {
        let mut name = String::new();
        for node in &self.nodes {
            let kind = make();
            name = kind.name().to_owned();
            node.sharding().init(kind)?;
        }
        for node in &self.nodes {
            node.sharding().wait_until_hosted(&name, WAIT).await?;
        }
        Ok(())
    }

    /// The node at `index`, in the order they started (0 formed the cluster).
    ///
    /// # Panics
    /// When there is no node at `index`.
    pub fn node(&self, index: usize) -> &Node {
        &self.nodes[index]
    }

    /// Every node, in the order they started.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The nodes, in the order they started, for a test that stops them its own way (one
    /// at a time, several at once, or by dropping them).
    pub fn into_nodes(self) -> Vec<Node> {
        self.nodes
    }

    /// Every node leaves the cluster gracefully, the last started first, so that the first
    /// (the oldest, which runs the coordinators) hands over last.
    pub async fn leave(self) {
        for node in self.nodes.into_iter().rev() {
            node.leave().await;
        }
    }
}
