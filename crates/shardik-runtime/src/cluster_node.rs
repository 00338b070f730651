//! [`Node`]: a cluster node with sharding, started in one call from the settings.
//!
//! This is the front door for applications: `Node::builder(settings).bind(addr).start()`
//! binds the transport, joins through the configured seed nodes, and attaches sharding with
//! the settings' `cluster.sharding.*`; entity kinds are then registered on
//! [`Node::sharding`]. The lower-level pieces ([`node::start`](crate::node::start),
//! [`Sharding::start`]) stay available for programs that wire them differently.

use std::sync::Arc;
use std::time::Duration;

use shardik_config::Settings;
use shardik_core::membership::{
    Address, ClusterEvent, JoinConfigCompatChecker, SameStore, ShutdownReason, UniqueAddress,
};
use shardik_core::node::NodeSettings;
use shardik_persistence::{Store, StoreError};
use tokio::sync::broadcast;
use tracing::Instrument;

#[cfg(feature = "management")]
use crate::http::ManagementServer;
#[cfg(feature = "management")]
use crate::http::WriteGuard;
use crate::node::handle::NodeHandle;
use crate::node::member_up::{NotUp, StoppedBeforeUp};
use crate::node::{self, NodeOptions, RunningNode, StartError, StopRequest};
use crate::persistence::Persistence;
use crate::sbr_lease::SbrLeaseOptions;
use crate::sharding::Sharding;
use shardik_transport::TransportConfig;

/// A running cluster node with sharding attached.
pub struct Node {
    running: RunningNode,
    sharding: Sharding,
    /// Where the node's entities are kept: the builder's store, or `persistence.store` opened
    /// on first use.
    persistence: NodePersistence,
    /// Served when the builder asked for it (`NodeBuilder::management`).
    #[cfg(feature = "management")]
    management: Option<ManagementServer>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("self_node", &self.running.self_node)
            .finish_non_exhaustive()
    }
}

/// The node's store, opened once: given to the builder, or opened from the configuration the
/// first time it is needed (a node whose entities persist nothing never opens a file).
struct NodePersistence {
    settings: Settings,
    opened: tokio::sync::OnceCell<Persistence>,
    /// Set once the node has asked to join: a store opened after that was not compared with
    /// the cluster's (see `membership::same_store`).
    joined: std::sync::atomic::AtomicBool,
}

impl NodePersistence {
    async fn get(&self) -> Result<Persistence, StoreError> {
        self.opened
            .get_or_try_init(|| async {
                let persistence = Persistence::from_settings(&self.settings).await?;
                if self.joined.load(std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(
                        store = %persistence.store().location(),
                        "the node's store was opened after the node joined, so the cluster \
                         could not check that every node uses this same store (durable \
                         entities that move between nodes on different stores lose their \
                         history): build the node with NodeBuilder::persistence() to open it \
                         before joining"
                    );
                }
                Ok(persistence)
            })
            .await
            .cloned()
    }

    /// The join check of the node's store ([`SameStore`]), when it is open before the node
    /// joins; and a warning when it is a store of this process only.
    fn same_store_check(&self) -> Option<SameStore> {
        let store = self.opened.get()?.store();
        if !store.is_shared() {
            tracing::warn!(
                store = %store.location(),
                "the node's store keeps everything in this process: it is for tests, since \
                 durable entities lose their history when the process ends or they move to \
                 another node, and its leases keep no other process out; give a cluster of \
                 several processes one SQLite file (one machine) or one PostgreSQL server"
            );
        }
        Some(SameStore::new(store.identity(), store.location()))
    }
}

/// Builds a [`Node`] over [`Settings`].
pub struct NodeBuilder {
    settings: Settings,
    bind: Option<Address>,
    advertise: Option<Address>,
    seeds: Option<Vec<Address>>,
    leave_timeout: Duration,
    store: Option<Arc<dyn Store>>,
    open_store_at_start: bool,
    join_checkers: Vec<Arc<dyn JoinConfigCompatChecker>>,
    #[cfg(feature = "management")]
    management: bool,
    #[cfg(feature = "metrics")]
    metrics: bool,
    #[cfg(feature = "logging")]
    logging: bool,
}

impl std::fmt::Debug for NodeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("bind", &self.bind)
            .field("advertise", &self.advertise)
            .field("seeds", &self.seeds)
            .field("leave_timeout", &self.leave_timeout)
            .field("store", &self.store.as_ref().map(|_| "given"))
            .field("join_checkers", &self.join_checkers)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A builder over `settings` (usually [`Settings::load`]).
    pub fn builder(settings: Settings) -> NodeBuilder {
        NodeBuilder {
            settings,
            bind: None,
            advertise: None,
            seeds: None,
            leave_timeout: shardik_core::node::DEFAULT_LEAVE_TIMEOUT,
            store: None,
            open_store_at_start: false,
            join_checkers: Vec::new(),
            #[cfg(feature = "management")]
            management: false,
            #[cfg(feature = "metrics")]
            metrics: false,
            #[cfg(feature = "logging")]
            logging: false,
        }
    }

    /// Observe and steer the node (membership snapshots, leave and down commands).
    pub fn handle(&self) -> &NodeHandle {
        &self.running.handle
    }

    /// This incarnation of the node.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.running.self_node
    }

    /// Sharding on this node: register entity kinds, look up entity references.
    pub fn sharding(&self) -> &Sharding {
        &self.sharding
    }

    /// The node's persistence: where its durable entities (event sourced, durable state) and
    /// remembered entities are kept unless the code hands a kind another one. It is the store
    /// given to [`NodeBuilder::store`], or else the one `persistence.store` names (by default
    /// `sqlite:{persistence.data-dir}/shardik.db`, creating `data-dir` if missing), opened on
    /// the first call; later calls share it (one store, one journal writer per node).
    ///
    /// Errors when the configured store cannot be opened (a path in a directory that does not
    /// exist, a server that does not answer, a store whose feature was left out); a later call
    /// tries again.
    pub async fn persistence(&self) -> Result<Persistence, StoreError> {
        self.persistence.get().await
    }

    /// Resolves once this node is Up, or fails when it stops (or starts leaving, or is
    /// downed) before it ever was: see [`NodeHandle::wait_until_up`]. `start()` returns as
    /// soon as the node is bound and asked to join; await this before serving traffic that
    /// needs the cluster.
    pub async fn wait_until_up(&self) -> Result<(), StoppedBeforeUp> {
        self.running.handle.wait_until_up().await
    }

    /// As [`wait_until_up`](Self::wait_until_up), for at most `timeout`; on timeout the
    /// error names the seeds that did not let this node in, and why: see
    /// [`NodeHandle::wait_until_up_within`].
    pub async fn wait_until_up_within(&self, timeout: Duration) -> Result<(), NotUp> {
        self.running.handle.wait_until_up_within(timeout).await
    }

    /// Runs `callback` once, when this node becomes Up, and never if it stops before (Akka's
    /// `registerOnMemberUp`): see [`NodeHandle::on_member_up`].
    pub fn on_member_up(&self, callback: impl FnOnce() + Send + 'static) {
        self.running.handle.on_member_up(callback)
    }

    /// This node's cluster events, as [`NodeHandle::subscribe`] describes.
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.running.subscribe()
    }

    /// Leaves the cluster gracefully and waits until the node has stopped: its shards are
    /// handed off first, then it becomes Exiting and is removed. A node that never joined
    /// stops at once.
    pub async fn leave(self) -> ShutdownReason {
        let _ = self.running.stop.send(StopRequest::Leave).await;
        self.wait().await
    }

    /// Waits until the node has stopped (it left, or was downed or removed) and its entity
    /// kinds have stopped after it, giving back the leases they held ([`Sharding::stopped`]);
    /// then stops its management API, if it serves one.
    pub async fn wait(self) -> ShutdownReason {
        let reason = self.running.finished.await.unwrap_or(ShutdownReason::Left);
        stop_sharding(&self.sharding).await;
        #[cfg(feature = "management")]
        if let Some(management) = self.management {
            management.shut_down().await;
        }
        reason
    }

    /// Runs until the node stops, as a process's main task does: the first SIGTERM or SIGINT
    /// makes it leave gracefully (shards handed off first); a second one makes this return at
    /// once with [`ShutdownReason::Interrupted`], without waiting for the leave to end. Logs
    /// why it stopped (at WARN unless it left) and stops the management API; end the process
    /// with [`ShutdownReason::exit_code`] (130 after a second signal). It never ends the
    /// process itself. After `Interrupted`, return from `main` at once; a program that built
    /// its Tokio runtime by hand ends it with `Runtime::shutdown_background`, so that tasks
    /// still leaving do not hold the process.
    ///
    /// ```no_run
    /// # use shardik_runtime::facade as shardik;
    /// # async fn run(settings: shardik::Settings) -> Result<std::process::ExitCode, shardik::StartError> {
    /// let node = shardik::Node::builder(settings)
    ///     .logging()
    ///     .metrics()
    ///     .management()
    ///     .start()
    ///     .await?;
    /// // node.sharding().init(...) for each entity kind, node.merge_routes(...) for the
    /// // application's own HTTP routes.
    /// let reason = node.run_until_signal().await;
    /// Ok(std::process::ExitCode::from(reason.exit_code()))
    /// # }
    /// ```
    pub async fn run_until_signal(self) -> ShutdownReason {
        let finished = async { self.running.finished.await.unwrap_or(ShutdownReason::Left) };
        let reason =
            crate::node::process::until_signal_or_stop(self.running.stop.clone(), finished).await;
        crate::node::process::log_shutdown(&reason);
        if reason == ShutdownReason::Interrupted {
            // Asked twice: nothing more is waited for.
            return reason;
        }
        stop_sharding(&self.sharding).await;
        #[cfg(feature = "management")]
        if let Some(management) = self.management {
            management.shut_down().await;
        }
        reason
    }

    /// Serves `routes` (the application's own HTTP API, already given its state) on the
    /// management port beside Akka Management's routes, which win where both have a path.
    /// Routes may be added at any time; they answer from then on. Errors when the builder did
    /// not ask for [`management`](NodeBuilder::management).
    ///
    /// # Panics
    /// As [`axum::Router::merge`] does: when `routes` has a fallback of its own after an earlier
    /// call's routes had one, or names a path and method an earlier call already gave. This is
    /// the program's own wiring, checked once at start, never anything from the network.
    #[cfg(feature = "management")]
    pub fn merge_routes(&self, routes: axum::Router) -> Result<(), NoManagementApi> {
        let management = self.management.as_ref().ok_or(NoManagementApi)?;
        management.app_routes.merge(routes);
        Ok(())
    }

    /// Who may use state-changing routes on the management port (its token and client
    /// certificate rules), for the application's own routes to apply the same rules
    /// ([`WriteGuard::protect`](crate::http::WriteGuard::protect)); `None` without
    /// [`NodeBuilder::management`].
    #[cfg(feature = "management")]
    pub fn write_guard(&self) -> Option<&WriteGuard> {
        self.management.as_ref().map(|m| &m.guard)
    }

    /// The parts, for programs that drive the node's stop themselves. A management API the
    /// builder started keeps serving until the process ends. Hidden: the runtime's tests and
    /// the benchmark program use it; an application stops its node with [`leave`](Self::leave)
    /// or [`wait`](Self::wait), and the parts are outside the facade's promise.
    #[doc(hidden)]
    pub fn into_parts(self) -> (RunningNode, Sharding) {
        (self.running, self.sharding)
    }
}

/// The longest a stopped node waits for its kinds' tasks to end (they give their leases back,
/// each release bounded by `lease-operation-timeout`, 1.5 s by default): a store that hangs
/// must not keep the process from ending.
const SHARDING_STOP_LIMIT: Duration = Duration::from_secs(10);

/// Waits, within [`SHARDING_STOP_LIMIT`], for sharding to have stopped after the node did.
async fn stop_sharding(sharding: &Sharding) {
    if tokio::time::timeout(SHARDING_STOP_LIMIT, sharding.stopped())
        .await
        .is_err()
    {
        tracing::warn!(
            limit = ?SHARDING_STOP_LIMIT,
            "sharding did not stop in time after the node stopped: leases it held expire on their own"
        );
    }
}

/// [`Node::merge_routes`] on a node built without [`NodeBuilder::management`].
#[cfg(feature = "management")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this node serves no management API: call NodeBuilder::management() to serve routes on \
     its port"
)]
pub struct NoManagementApi;

impl NodeBuilder {
    /// `HOST:PORT` to listen on, instead of `cluster.bind-address`; also the node's address
    /// in the cluster unless [`advertise`](Self::advertise) or `cluster.canonical-address`
    /// says otherwise. One of this, `cluster.bind-address` or `cluster.canonical-address` is
    /// required. Port 0 lets the OS pick a free port, which is then the node's address
    /// ([`Node::self_node`]) unless one is advertised.
    pub fn bind(mut self, address: Address) -> Self {
        self.bind = Some(address);
        self
    }

    /// The node's address in the cluster, its identity, instead of
    /// `cluster.canonical-address`: what peers dial (a DNS name, the address NAT forwards),
    /// when it is not the address it listens on (`0.0.0.0:2552`, say).
    pub fn advertise(mut self, address: Address) -> Self {
        self.advertise = Some(address);
        self
    }

    /// Seed nodes to join through, instead of `cluster.seed-nodes` (empty: wait to be joined).
    pub fn seeds(mut self, seeds: impl IntoIterator<Item = Address>) -> Self {
        self.seeds = Some(seeds.into_iter().collect());
        self
    }

    /// The longest a graceful leave may take before the node stops anyway (default 60 s).
    pub fn leave_timeout(mut self, timeout: Duration) -> Self {
        self.leave_timeout = timeout;
        self
    }

    /// The node's store, instead of the one `persistence.store` names: where
    /// [`Node::persistence`] keeps the node's entities, and the split-brain resolver's lease
    /// under lease-majority.
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Opens the node's store ([`Node::persistence`]) when the node starts, before it joins,
    /// so that a store that cannot be opened stops the node with [`StartError::Store`] instead
    /// of failing the first entity after the node became a member (a node that joined and then
    /// stopped makes the cluster move shards twice for nothing).
    ///
    /// A store open before the node joins (this, [`store`](Self::store), or lease-majority's
    /// lease) is also compared with the cluster's: its identity travels with the join, and a
    /// member on another store refuses the node, naming both stores
    /// ([`SameStore`](shardik_core::membership::SameStore)). Every node with durable entities
    /// should open its store this way.
    pub fn persistence(mut self) -> Self {
        self.open_store_at_start = true;
        self
    }

    /// Adds a join-compatibility check of the application's own (Akka's
    /// `JoinConfigCompatChecker`): its keys and this node's values travel with every join
    /// this node sends, and when this node accepts a join it runs the check over the
    /// joiner's values. A joiner it finds incompatible is refused (or, with
    /// `cluster.configuration-compatibility-check.enforce-on-join` off, let in with a WARN),
    /// exactly as for the built-in keys (`Settings::join_compat`). Give every node the same
    /// checks: a node without one sends none of its keys.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use shardik_core::membership::{MustMatch, WhenMissing};
    /// use shardik_runtime::{Node, config::Settings};
    ///
    /// // Every node must run the same version of the event schema.
    /// let builder = Node::builder(Settings::reference()).join_config_compat_checker(Arc::new(
    ///     MustMatch::new("app.event-schema", "7", WhenMissing::Refuse),
    /// ));
    /// # drop(builder);
    /// ```
    pub fn join_config_compat_checker(mut self, checker: Arc<dyn JoinConfigCompatChecker>) -> Self {
        self.join_checkers.push(checker);
        self
    }

    /// The lease-majority lease, when the settings ask for one: in the given store, or in
    /// `persistence.store` opened here.
    /// The split-brain resolver's lease, when `lease-majority` needs one: kept in the node's
    /// store, which is opened here if it was not given.
    async fn sbr_lease(
        &self,
        persistence: &NodePersistence,
    ) -> Result<Option<SbrLeaseOptions>, StartError> {
        if !self.settings.sbr_needs_lease() {
            return Ok(None);
        }
        let store = match persistence.opened.get() {
            Some(opened) => Arc::clone(opened.store()),
            None => {
                let url = self.settings.persistence.store_url();
                persistence.get().await.map_err(|e| {
                    let url = shardik_persistence::redact_store_url(&url);
                    StartError::SbrLease(format!(
                        "the store {url} (persistence.store), which keeps the lease of \
                         lease-majority, cannot be opened: {e}"
                    ))
                })?;
                Arc::clone(persistence.opened.get().expect("just opened").store())
            }
        };
        Ok(Some(SbrLeaseOptions::from_settings(&self.settings, store)))
    }

    /// Sets up logging from `logging.format` and `logging.level` when the node starts (to
    /// standard error; a subscriber the program installed already stays).
    #[cfg(feature = "logging")]
    pub fn logging(mut self) -> Self {
        self.logging = true;
        self
    }

    /// Records the node's metrics (Prometheus), served on `/metrics` by the management API.
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Serves the management API on `management.http.hostname:port` (over TLS with
    /// `management.http.tls.enabled`, writes guarded by `route-providers-read-only`,
    /// `auth-token-file` and client certificates): its port is bound before the node joins,
    /// so that an address in use or a bad token or TLS file stops it first, and it answers
    /// from the moment `start()` returns (readiness and liveness probes, cluster bootstrap's
    /// contact-point probes). Add the application's routes with [`Node::merge_routes`].
    #[cfg(feature = "management")]
    pub fn management(mut self) -> Self {
        self.management = true;
        self
    }

    /// Starts the node, joins the cluster through the seeds (or, without seeds and with a
    /// `discovery.method`, starts cluster bootstrap: see `crate::bootstrap`, feature
    /// `management`), and attaches sharding. Bootstrap needs the management API served (with
    /// its `/bootstrap/seed-nodes` route, which `http::ManagementApi` always has), since
    /// that is what the other nodes probe.
    pub async fn start(self) -> Result<Node, StartError> {
        // Settings changed in code since they were loaded are checked as loading checks them,
        // before anything starts.
        self.settings.validate().map_err(StartError::Settings)?;
        #[cfg(feature = "logging")]
        if self.logging {
            let logging = &self.settings.logging;
            crate::logging::init(logging.format, &logging.level)
                .map_err(|e| StartError::Observability(format!("cannot set up logging: {e}")))?;
        }
        // Every task of the node runs in this span (crate::task::spawn), so each log line names
        // its node, also with several nodes in one process. Made after the subscriber above
        // exists, and at ERROR level so that no filter that lets any line through drops it.
        let span = tracing::error_span!("node", node = tracing::field::Empty);
        self.start_in(span.clone()).instrument(span).await
    }

    async fn start_in(self, span: tracing::Span) -> Result<Node, StartError> {
        #[cfg(feature = "metrics")]
        let metrics =
            if self.metrics {
                Some(crate::metrics::Metrics::install().map_err(|e| {
                    StartError::Observability(format!("cannot record metrics: {e}"))
                })?)
            } else {
                None
            };
        #[cfg(not(feature = "metrics"))]
        let metrics = None;
        // Bound before the node joins: a node that joined and then stopped would make the
        // cluster move shards twice for nothing.
        #[cfg(feature = "management")]
        let management = if self.management {
            Some(crate::http::BoundManagement::bind(&self.settings).await?)
        } else {
            None
        };
        let mut cluster = self.settings.cluster.clone();
        if let Some(bind) = &self.bind {
            cluster.bind_address = Some(bind.clone());
        }
        if let Some(advertise) = &self.advertise {
            cluster.canonical_address = Some(advertise.clone());
        }
        let addresses = cluster.node_addresses()?;
        // This node's identity (where peers reach it, not where it listens): what its log lines
        // name, and what bootstrap compares and announces.
        let identity = addresses
            .advertise
            .clone()
            .unwrap_or_else(|| addresses.bind.clone());
        span.record("node", tracing::field::display(&identity));
        // Bad TLS files stop the node here, with the key and file in the message.
        let tls = shardik_transport::tls::TlsContext::from_settings(&self.settings)?;
        let persistence = NodePersistence {
            joined: std::sync::atomic::AtomicBool::new(false),
            settings: self.settings.clone(),
            opened: match &self.store {
                Some(store) => {
                    tokio::sync::OnceCell::new_with(Some(Persistence::new(Arc::clone(store))))
                }
                None => tokio::sync::OnceCell::new(),
            },
        };
        if self.open_store_at_start {
            persistence
                .get()
                .await
                .map_err(|source| StartError::Store {
                    store: shardik_persistence::redact_store_url(
                        &self.settings.persistence.store_url(),
                    ),
                    source,
                })?;
        }
        let sbr_lease = self.sbr_lease(&persistence).await?;
        let seeds = self
            .seeds
            .clone()
            .unwrap_or_else(|| self.settings.cluster.seed_nodes.clone());
        // Without seed nodes, with a discovery method: bootstrap finds the cluster (or forms
        // it). Set up before the node starts, so that a discovery or TLS setting that cannot
        // work stops it here; seeds given to the builder win over discovery as configured
        // ones do.
        let mut bootstrap_settings = self.settings.clone();
        bootstrap_settings.cluster.seed_nodes = seeds.clone();
        #[cfg(feature = "management")]
        let bootstrap =
            crate::bootstrap::ClusterBootstrap::from_settings(&bootstrap_settings, identity)?;
        #[cfg(not(feature = "management"))]
        refuse_bootstrap_without_management(&bootstrap_settings)?;
        // The one mapping from configuration to what the node runs with (the simulator's too).
        let NodeSettings {
            mut membership,
            sharding,
        } = self.settings.node_settings();
        membership
            .join_compat
            .checkers
            .extend(self.join_checkers.iter().cloned());
        // Every node on one store: a joiner on another is refused (see `SameStore`).
        if let Some(check) = persistence.same_store_check() {
            membership.join_compat.checkers.push(Arc::new(check));
        }
        persistence
            .joined
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let running = node::start_with_sbr_lease(
            NodeOptions {
                bind: addresses.bind.clone(),
                advertise: addresses.advertise.clone(),
                seeds: seeds.clone(),
                membership,
                transport: TransportConfig {
                    tls,
                    ..node::transport_config(&self.settings.transport)
                },
                leave_timeout: self.leave_timeout,
            },
            sbr_lease,
        )
        .await?;
        // Bound to port 0, the node's address has the port the OS picked only now.
        span.record("node", tracing::field::display(&running.self_node.address));
        // The task ends by itself once the node joined or stopped.
        #[cfg(feature = "management")]
        if let Some(bootstrap) = bootstrap {
            bootstrap.start(running.handle.clone());
        }
        let sharding = Sharding::start(&running, sharding)
            .expect("a node just started has its user traffic untaken");
        #[cfg(feature = "management")]
        let management =
            management.map(|bound| bound.serve(&self.settings, &running, &sharding, metrics));
        #[cfg(not(feature = "management"))]
        let _: Option<std::convert::Infallible> = metrics;
        Ok(Node {
            running,
            sharding,
            persistence,
            #[cfg(feature = "management")]
            management,
        })
    }
}

/// Cluster bootstrap finds its peers through their management APIs, which a build without the
/// `management` feature has none of: a node configured for it (a discovery method and no seed
/// nodes) stops at start, saying so, instead of waiting for peers it can never find.
#[cfg(not(feature = "management"))]
fn refuse_bootstrap_without_management(settings: &Settings) -> Result<(), StartError> {
    if settings.cluster.seed_nodes.is_empty()
        && settings.discovery.method != shardik_config::DiscoveryMethod::Off
    {
        return Err(StartError::FeatureMissing {
            what: "cluster bootstrap (discovery.method set, no seed nodes)",
            feature: "management",
        });
    }
    Ok(())
}
