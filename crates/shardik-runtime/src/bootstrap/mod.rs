//! Cluster bootstrap (Akka Management's Cluster Bootstrap): a node started without seed nodes
//! finds its peers through discovery and either joins the cluster they belong to or, when
//! there is none yet, forms it if its own contact point has the lowest address.
//!
//! One task per node, from start until the node joins (by bootstrap or any other way) or
//! stops. Each round it looks the service up (every `contact-point-discovery.interval`,
//! backing off after failures), probes every contact point's `GET /bootstrap/seed-nodes` in
//! parallel (`probe.rs`, each bounded), and hands what it knows to the pure decision
//! (`decide.rs`): join through the seed nodes a contact point listed, form a new cluster,
//! or keep probing. Decisions are logged at INFO (a waiting reason once per change),
//! failed lookups and probes at WARN with their cause (at most one line per reason per 10 s),
//! and counted in `/metrics` (`shardik_bootstrap_*`).

pub mod contact_point;
pub mod decide;
pub mod probe;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use shardik_config::Settings;
use shardik_core::membership::{Address, CommandError};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::discovery::{Lookup, ServiceDiscovery};
use crate::metrics as m;
use crate::node::handle::{ControlError, NodeHandle};
use shardik_transport::log_limit::{LogLimit, LogLimits};
use shardik_transport::tls::TlsError;

use contact_point::{ContactPoint, Selection, SelfContact};
use decide::{Decision, Discovered, Observation, Rules, Waiting, decide};
use probe::Prober;

// Defined beside the node's `StartError`, which wraps it (see there why).
pub use crate::node::start_error::BootstrapError;

/// The HTTPS client that probes other management ports, when they speak HTTPS
/// (`management.http.tls.enabled`): it trusts the CA file of `management.http.tls` (or the
/// transport's).
#[cfg(feature = "tls")]
fn https_client(settings: &Settings) -> Result<Option<probe::HttpsClient>, TlsError> {
    let http = &settings.management.http;
    if !http.tls.enabled {
        return Ok(None);
    }
    let (key, path) = http.tls.ca_cert_file_or(&settings.transport.tls);
    let file = shardik_transport::tls::PemFile::new(key, path);
    let config = shardik_transport::tls::https_client_config(&file, None)?;
    Ok(Some(std::sync::Arc::new(config)))
}

/// Without the `tls` feature: none, or an error naming the key that asks for HTTPS.
#[cfg(not(feature = "tls"))]
fn https_client(settings: &Settings) -> Result<Option<probe::HttpsClient>, TlsError> {
    if settings.management.http.tls.enabled {
        return Err(TlsError::NotBuilt {
            key: "management.http.tls.enabled",
        });
    }
    Ok(None)
}

/// Cluster bootstrap, set up and ready to start on a node.
pub struct ClusterBootstrap {
    runner: Runner,
}

impl std::fmt::Debug for ClusterBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBootstrap")
            .field("lookup", &self.runner.lookup)
            .field("discovery", &self.runner.discovery)
            .finish_non_exhaustive()
    }
}

impl ClusterBootstrap {
    /// Bootstrap for the node at cluster address `self_node` when `settings` ask for it
    /// ([`Settings::bootstrap_enabled`]: a discovery method, and no seed nodes), `None`
    /// otherwise. Fails when discovery or the HTTPS client for the probes cannot be set up,
    /// so that the node stops before it starts.
    pub fn from_settings(
        settings: &Settings,
        self_node: Address,
    ) -> Result<Option<Self>, BootstrapError> {
        if !settings.bootstrap_enabled() {
            if settings.discovery.method != shardik_config::DiscoveryMethod::Off {
                info!(
                    seed_nodes = ?settings.cluster.seed_nodes,
                    "cluster bootstrap does not run: cluster.seed-nodes is set, and configured \
                     seed nodes win over discovery"
                );
            }
            return Ok(None);
        }
        let Some(discovery) = ServiceDiscovery::from_settings(settings)? else {
            return Ok(None);
        };
        Ok(Some(ClusterBootstrap {
            runner: Runner::new(self_node, settings, discovery)?,
        }))
    }

    /// Runs bootstrap for the node behind `handle` in a task of its own, which ends once the
    /// node joined a cluster (through bootstrap or otherwise) or stopped.
    pub fn start(self, handle: NodeHandle) -> JoinHandle<()> {
        crate::task::spawn(self.runner.run(handle))
    }
}

/// Intervals of the rounds.
#[derive(Clone, Debug)]
struct Timing {
    interval: Duration,
    backoff_max: Duration,
    backoff_random_factor: f64,
    resolve_timeout: Duration,
    probe_interval: Duration,
    probe_jitter: f64,
}

impl Timing {
    /// The pause before the next lookup after `failures` failed ones in a row (Akka's
    /// exponential back-off with a random share on top).
    fn lookup_pause(&self, failures: u32) -> Duration {
        let base = self
            .interval
            .saturating_mul(1u32 << failures.min(16))
            .min(self.backoff_max);
        jittered(base, self.backoff_random_factor)
    }
}

/// `d` plus a random share of up to `factor` of it.
fn jittered(d: Duration, factor: f64) -> Duration {
    d.mul_f64(1.0 + rand::random::<f64>() * factor)
}

/// The bootstrap task's state.
struct Runner {
    self_node: Address,
    discovery: ServiceDiscovery,
    lookup: Lookup,
    prober: Prober,
    selection: Selection,
    rules: Rules,
    self_contact: SelfContact,
    /// The management API listens on every address (`0.0.0.0`, `::`): a contact point whose
    /// address this machine owns is this node.
    management_on_any_address: bool,
    timing: Timing,
    discovered: Option<Discovered>,
    self_points: BTreeSet<ContactPoint>,
    observations: BTreeMap<ContactPoint, Observation>,
    lookup_failures: u32,
    next_lookup: Instant,
    last_waiting: Option<&'static str>,
}

static LOOKUP_FAILED: LogLimit = LogLimit::every_10s();
static PROBE_FAILED: LogLimits = LogLimits::every_10s();
static CONTACT_POINTS_DROPPED: LogLimit = LogLimit::every_10s();

impl Runner {
    fn new(
        self_node: Address,
        settings: &Settings,
        discovery: ServiceDiscovery,
    ) -> Result<Self, BootstrapError> {
        let b = &settings.management.cluster.bootstrap;
        let d = &b.contact_point_discovery;
        let c = &b.contact_point;
        let http = &settings.management.http;
        let tls = https_client(settings)?;
        let management_host = http.hostname.trim_start_matches('[').trim_end_matches(']');
        let management_on_any_address = management_host
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        let self_host = self_node.host.to_string();
        Ok(Runner {
            self_contact: SelfContact::new(http.port, [management_host, self_host.as_str()]),
            management_on_any_address,
            rules: Rules {
                required_contact_point_nr: d.required_contact_point_nr,
                stable_margin: d.stable_margin,
                contact_with_all_contact_points: d.contact_with_all_contact_points,
                new_cluster_enabled: b.new_cluster_enabled,
                probing_failure_timeout: c.probing_failure_timeout,
                self_address: self_node.clone(),
            },
            self_node,
            discovery,
            lookup: Lookup::from_settings(settings),
            prober: Prober::new(tls, c.probe_timeout, c.max_response_size),
            selection: Selection {
                fallback_port: settings.bootstrap_fallback_port(),
                // Akka filters only when no port name picks the port.
                filter_on_fallback_port: c.filter_on_fallback_port && d.port_name.trim().is_empty(),
                max_contact_points: d.max_contact_points,
            },
            timing: Timing {
                interval: d.interval,
                backoff_max: d.exponential_backoff_max,
                backoff_random_factor: d.exponential_backoff_random_factor,
                resolve_timeout: d.resolve_timeout,
                probe_interval: c.probe_interval,
                probe_jitter: c.probe_interval_jitter,
            },
            discovered: None,
            self_points: BTreeSet::new(),
            observations: BTreeMap::new(),
            lookup_failures: 0,
            next_lookup: Instant::now(),
            last_waiting: None,
        })
    }

    async fn run(mut self, handle: NodeHandle) {
        info!(
            lookup = %self.lookup,
            discovery = ?self.discovery,
            required_contact_point_nr = self.rules.required_contact_point_nr,
            stable_margin = ?self.rules.stable_margin,
            new_cluster_enabled = self.rules.new_cluster_enabled,
            "cluster bootstrap: looking for contact points"
        );
        let mut watch = handle.watch();
        loop {
            if handle.snapshot().self_status.is_some() {
                info!("cluster bootstrap: this node is a member (joined by other means); done");
                return;
            }
            if Instant::now() >= self.next_lookup {
                self.lookup_round().await;
            }
            self.probe_round().await;
            let decision = decide(
                &self.rules,
                Instant::now(),
                self.discovered.as_ref(),
                &self.observations,
                &self.self_points,
            );
            if self.act(&handle, decision).await {
                return;
            }
            let pause = jittered(self.timing.probe_interval, self.timing.probe_jitter);
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                changed = watch.changed() => {
                    if changed.is_err() {
                        debug!("cluster bootstrap: the node stopped");
                        return;
                    }
                }
            }
        }
    }

    /// Looks the service up and keeps what changed.
    async fn lookup_round(&mut self) {
        let result = self
            .discovery
            .lookup(&self.lookup, self.timing.resolve_timeout)
            .await;
        let now = Instant::now();
        match result {
            Ok(targets) => {
                metrics::counter!(m::BOOTSTRAP_LOOKUPS_TOTAL, "result" => "ok").increment(1);
                self.lookup_failures = 0;
                self.next_lookup = now + self.timing.lookup_pause(0);
                let (points, dropped) = contact_point::select(targets, &self.selection);
                if dropped > 0
                    && let Some(suppressed) = CONTACT_POINTS_DROPPED.check()
                {
                    warn!(
                        dropped,
                        kept = points.len(),
                        suppressed,
                        "cluster bootstrap: discovery found more contact points than \
                         contact-point-discovery.max-contact-points; the lowest are kept"
                    );
                }
                self.update_discovered(points, now);
            }
            Err(e) => {
                metrics::counter!(m::BOOTSTRAP_LOOKUPS_TOTAL, "result" => "failed").increment(1);
                self.lookup_failures = self.lookup_failures.saturating_add(1);
                let pause = self.timing.lookup_pause(self.lookup_failures);
                self.next_lookup = now + pause;
                // Akka forgets the contact points until a lookup succeeds again: no decision
                // is taken on an answer that may be out of date.
                self.discovered = None;
                if let Some(suppressed) = LOOKUP_FAILED.check() {
                    warn!(
                        lookup = %self.lookup,
                        error = %e,
                        failures_in_a_row = self.lookup_failures,
                        next_in = ?pause,
                        suppressed,
                        "cluster bootstrap: discovery failed"
                    );
                }
            }
        }
    }

    fn update_discovered(&mut self, points: BTreeSet<ContactPoint>, now: Instant) {
        metrics::gauge!(m::BOOTSTRAP_CONTACT_POINTS).set(points.len() as f64);
        let unchanged = self
            .discovered
            .as_ref()
            .is_some_and(|d| d.contact_points == points);
        if unchanged {
            return;
        }
        let any = self.management_on_any_address;
        self.self_points = points
            .iter()
            .filter(|cp| {
                self.self_contact
                    .matches(cp, |ip| any && is_local_address(ip))
            })
            .cloned()
            .collect();
        let shown: Vec<String> = points.iter().map(ToString::to_string).collect();
        let me: Vec<String> = self.self_points.iter().map(ToString::to_string).collect();
        info!(
            lookup = %self.lookup,
            contact_points = ?shown,
            this_node = ?me,
            "cluster bootstrap: discovered contact points changed"
        );
        self.observations.retain(|cp, _| points.contains(cp));
        // A cluster address of our own in the list is the cluster port, not a management
        // API: probing it would be a misconfiguration's symptom, say so.
        for cp in &points {
            let ip = cp.address.or_else(|| cp.host_ip());
            if cp.port == self.self_node.port
                && (ip.is_some_and(|ip| ip.to_string() == self.self_node.host.to_string())
                    || cp.host == self.self_node.host.to_string())
            {
                warn!(
                    contact_point = %cp,
                    "cluster bootstrap: a contact point is this node's cluster address, not its \
                     management API; check the discovered ports (SRV records, \
                     contact-point.fallback-port)"
                );
            }
        }
        self.discovered = Some(Discovered {
            contact_points: points,
            changed_at: now,
        });
    }

    /// Probes every discovered contact point once, in parallel.
    async fn probe_round(&mut self) {
        let Some(discovered) = &self.discovered else {
            return;
        };
        let points: Vec<ContactPoint> = discovered.contact_points.iter().cloned().collect();
        let prober = &self.prober;
        let answers = join_all(points.iter().map(|cp| prober.probe(cp))).await;
        let now = Instant::now();
        for (cp, answer) in points.into_iter().zip(answers) {
            match answer {
                Ok(answer) => {
                    let result = if answer.seed_nodes.is_empty() {
                        "no-seed-nodes"
                    } else {
                        "seed-nodes"
                    };
                    metrics::counter!(m::BOOTSTRAP_PROBES_TOTAL, "result" => result).increment(1);
                    debug!(contact_point = %cp, self_node = %answer.self_node,
                        seed_nodes = ?answer.seed_nodes, "cluster bootstrap: probe answered");
                    self.observations.insert(
                        cp,
                        Observation {
                            observed_at: now,
                            seed_nodes: answer.seed_nodes,
                        },
                    );
                }
                Err(e) => {
                    let reason = e.reason();
                    metrics::counter!(m::BOOTSTRAP_PROBES_TOTAL, "result" => reason).increment(1);
                    if let Some(suppressed) = PROBE_FAILED.check(reason) {
                        warn!(
                            contact_point = %cp,
                            error = %e,
                            suppressed,
                            "cluster bootstrap: probing a contact point failed (it may not \
                             have started yet; probing again)"
                        );
                    }
                }
            }
        }
    }

    /// Carries out a decision; `true` once bootstrap is over.
    async fn act(&mut self, handle: &NodeHandle, decision: Decision) -> bool {
        match decision {
            Decision::KeepProbing(waiting) => {
                self.log_waiting(&waiting);
                false
            }
            Decision::JoinExisting {
                contact_point,
                seed_nodes,
            } => {
                info!(
                    contact_point = %contact_point,
                    seed_nodes = ?seed_nodes.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "cluster bootstrap: joining the existing cluster a contact point belongs \
                     to, through its seed nodes"
                );
                let result = handle.join_seed_nodes(seed_nodes).await;
                self.joined(result)
            }
            Decision::FormNewCluster { contact_points } => {
                info!(
                    contact_points = ?contact_points.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    node = %self.self_node,
                    "cluster bootstrap: forming a new cluster (joining itself): no contact point \
                     belongs to a cluster, and this node has the lowest of their addresses; the \
                     others will find it and join"
                );
                let result = handle.join(self.self_node.clone()).await;
                self.joined(result)
            }
        }
    }

    fn joined(&self, result: Result<(), ControlError>) -> bool {
        match result {
            Ok(()) => true,
            Err(ControlError::Refused(CommandError::AlreadyJoining)) => {
                info!("cluster bootstrap: this node is already joining (by other means); done");
                true
            }
            Err(ControlError::NodeStopped) => true,
            Err(e) => {
                warn!(error = %e, "cluster bootstrap: the join was not started; trying again next round");
                false
            }
        }
    }

    fn log_waiting(&mut self, waiting: &Waiting) {
        if self.last_waiting == Some(waiting.kind()) {
            debug!(reason = %waiting, "cluster bootstrap: still waiting");
            return;
        }
        self.last_waiting = Some(waiting.kind());
        if matches!(waiting, Waiting::NewClusterDisabled { .. }) {
            warn!(reason = %waiting, "cluster bootstrap: not forming a cluster");
        } else {
            info!(reason = %waiting, "cluster bootstrap: waiting");
        }
    }
}

/// Whether this machine owns `ip` (binding a socket to it works only then).
fn is_local_address(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}
