//! Metrics: the names shardik emits and a Prometheus recorder rendered by `GET /metrics`.
//!
//! The names the transport and TLS emit are `shardik-transport`'s (defined where they are
//! emitted), re-exported here; this module lists every name ([`ALL_NAMES`]) and describes them
//! all ([`describe_all`]), the runtime's and the transport's alike.
//!
//! The runtime records through the `metrics` facade (`metrics::counter!(GOSSIP_RECEIVED_TOTAL)`),
//! so recording costs nothing when no recorder is installed. The exporter is
//! metrics-exporter-prometheus without its own HTTP server: our management API serves it.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

use metrics::Unit;
#[cfg(feature = "metrics")]
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

// The names the transport and TLS emit are defined where they are emitted, in
// shardik-transport; here they stand beside the runtime's own, in `ALL_NAMES` and described.
pub use shardik_transport::metrics::{
    DROPPED_MESSAGES_TOTAL, GOSSIP_BYTES_TOTAL, GOSSIP_RECEIVED_TOTAL, HEARTBEAT_BYTES_TOTAL,
    OUTBOUND_QUEUE_OVERFLOW_TOTAL, TLS_RELOAD_FAILURES_TOTAL, TLS_RELOADS_TOTAL,
    TRANSPORT_BYTES_TOTAL, TRANSPORT_CONNECTIONS, TRANSPORT_FRAMES_TOTAL, TRANSPORT_REFUSED_TOTAL,
    TRANSPORT_TLS_FAILURES_TOTAL, TRANSPORT_TLS_HANDSHAKES_TOTAL,
};

/// Members by status (gauge; label `status` = `Up`, `Joining`, …).
pub const MEMBERS: &str = "shardik_members";
/// Worker threads of the async runtime the node runs on (gauge).
pub const RUNTIME_WORKER_THREADS: &str = "shardik_runtime_worker_threads";
/// Members this node sees as unreachable (gauge).
pub const UNREACHABLE_MEMBERS: &str = "shardik_unreachable_members";
/// 1 once this node has seen the cluster prepare for a full shutdown (gauge; absent before).
pub const CLUSTER_PREPARING_FOR_SHUTDOWN: &str = "shardik_cluster_preparing_for_shutdown";
/// Gossip messages sent (counter; label `kind` = `status` | `full`).
pub const GOSSIP_SENT_TOTAL: &str = "shardik_gossip_sent_total";
/// Heartbeats sent (counter).
pub const HEARTBEATS_SENT_TOTAL: &str = "shardik_heartbeats_sent_total";
/// Current phi of each monitored node (gauge; label `node` = `host:port`).
pub const PHI: &str = "shardik_phi";
/// Joiners whose configuration differed from this member's (counter; label `outcome` =
/// `refused` with `enforce-on-join` on, `let-in` with it off). Each is logged at WARN with the
/// differences (at most one line per outcome per 10 s).
pub const JOIN_INCOMPATIBLE_TOTAL: &str = "shardik_join_incompatible_total";
/// Sharding messages not delivered, by entity kind and reason (counter; labels `kind`,
/// `reason`: `buffer-full`, `hand-off`, `region-stopped`, `send-failed`, `decode-failed`,
/// `unknown-kind`, …).
pub const SHARDING_DROPPED_TOTAL: &str = "shardik_sharding_dropped_total";
/// Sharding messages delivered to entities on this node (counter; label `kind`).
pub const SHARDING_DELIVERED_TOTAL: &str = "shardik_sharding_delivered_total";
/// Handlers of entities on this node run on the kind's lanes rather than in its own task
/// (counter; label `kind`): non-zero once a kind's handlers are long enough to spread over the
/// worker threads.
pub const SHARDING_LANE_HANDLERS_TOTAL: &str = "shardik_sharding_lane_handlers_total";
/// Entities alive on this node (gauge; label `kind`).
pub const SHARDING_ENTITIES: &str = "shardik_sharding_entities";
/// Shards hosted on this node (gauge; label `kind`).
pub const SHARDING_SHARDS: &str = "shardik_sharding_shards";
/// Messages waiting for a shard home in this node's region (gauge; label `kind`).
pub const SHARDING_BUFFERED: &str = "shardik_sharding_buffered";
/// Members a coordinator on this node has waited for longer than
/// `cluster.sharding.unheard-region-warning-after`: neither registered nor said their node has
/// not started the kind, so no new shard of the kind is allocated (gauge; label `kind`).
pub const SHARDING_UNHEARD_REGIONS: &str = "shardik_sharding_unheard_regions";
/// Answers this node sent saying it has not started an entity kind that a peer's coordinator
/// or region asked about (counter; label `kind`).
pub const SHARDING_KIND_NOT_STARTED_ANSWERS_TOTAL: &str =
    "shardik_sharding_kind_not_started_answers_total";
/// Entity handlers that panicked or failed (a durable entity's refused or lost write) (counter).
pub const ENTITY_FAILURES_TOTAL: &str = "shardik_entity_failures_total";

/// Journal writes committed or refused, over all entities of this node (counter).
pub const JOURNAL_WRITES_TOTAL: &str = "shardik_journal_writes_total";
/// Journal batches sent to the store (counter); writes / batches is the mean batch size.
pub const JOURNAL_BATCHES_TOTAL: &str = "shardik_journal_batches_total";

/// Leases taken by this node (counter): each grant of an acquisition (made while the lease was
/// not held here: a holder that still counts on its lease answers without asking the store).
pub const LEASE_ACQUISITIONS_TOTAL: &str = "shardik_lease_acquisitions_total";
/// Leases this node held and lost (counter; label `reason` = `refused`: the store says it is no
/// longer ours, `expired`: no renewal succeeded before it would expire).
pub const LEASE_LOSSES_TOTAL: &str = "shardik_lease_losses_total";
/// Shards this node's coordinator took from a silent member because the store said their
/// leases had lapsed, before the member was downed (counter).
pub const SHARDS_TAKEN_OVER_TOTAL: &str = "shardik_sharding_shards_taken_over_total";
/// Renewals of held leases that failed (store error or timeout) (counter). A lease is lost
/// only when renewals keep failing until it would expire.
pub const LEASE_RENEWAL_FAILURES_TOTAL: &str = "shardik_lease_renewal_failures_total";

/// Times a kind's region stopped its shards because this node had not seen a majority for
/// the split-brain resolver's decision time (self-fence) (counter).
pub const SELF_FENCES_TOTAL: &str = "shardik_sharding_self_fences_total";

/// Decisions of the split-brain resolver this node acted on (counter; label `decision` =
/// `down-unreachable`, `down-reachable`, `down-all`, `down-indirectly-connected`,
/// `reverse-down-indirectly-connected`).
pub const SBR_DECISIONS_TOTAL: &str = "shardik_sbr_decisions_total";
/// Lease-majority's acquisitions of its lease that went to the store (counter; label `result` =
/// `granted`, `refused`: another node holds it, `failed`: the store failed or did not answer in
/// time). A request the node's holder answers itself, while it holds the lease, is not counted.
pub const SBR_LEASE_REQUESTS_TOTAL: &str = "shardik_sbr_lease_requests_total";

/// Management API requests answered (counter; labels `route` = the matched route template such
/// as `/cluster/members/{address}`, or `unmatched`; `method` = `GET`, `POST`, …, or `other`;
/// `status` = the status code).
pub const HTTP_REQUESTS_TOTAL: &str = "shardik_http_requests_total";
/// Time to answer a management API request, in seconds (summary; labels `route`, `method`).
pub const HTTP_REQUEST_DURATION_SECONDS: &str = "shardik_http_request_duration_seconds";
/// Connections and requests the management port refused (counter; label `reason` =
/// `read-only`, `unauthorized`, `no-client-certificate`, `body-too-large`, `header-timeout`,
/// `connection-limit`, `accept-failed`, and with `management.http.tls` `tls-<reason>` for a
/// failed TLS handshake as in [`TRANSPORT_REFUSED_TOTAL`], `tls-not-tls` being a plain HTTP
/// request).
pub const HTTP_REFUSED_TOTAL: &str = "shardik_http_refused_total";

/// Cluster bootstrap's probes of contact points (counter; label `result` = `seed-nodes` (the
/// contact point is in a cluster), `no-seed-nodes`, or why it failed: `unresolved`,
/// `connect-failed`, `tls-failed`, `http-failed`, `bad-status`, `too-large`, `malformed`,
/// `timeout`).
pub const BOOTSTRAP_PROBES_TOTAL: &str = "shardik_bootstrap_probes_total";
/// Cluster bootstrap's discovery lookups (counter; label `result` = `ok` | `failed`).
pub const BOOTSTRAP_LOOKUPS_TOTAL: &str = "shardik_bootstrap_lookups_total";
/// Contact points the last successful lookup found (gauge).
pub const BOOTSTRAP_CONTACT_POINTS: &str = "shardik_bootstrap_contact_points";

/// Every metric name above, for tests and documentation.
pub const ALL_NAMES: [&str; 44] = [
    MEMBERS,
    UNREACHABLE_MEMBERS,
    CLUSTER_PREPARING_FOR_SHUTDOWN,
    GOSSIP_SENT_TOTAL,
    GOSSIP_RECEIVED_TOTAL,
    GOSSIP_BYTES_TOTAL,
    HEARTBEATS_SENT_TOTAL,
    HEARTBEAT_BYTES_TOTAL,
    PHI,
    DROPPED_MESSAGES_TOTAL,
    JOIN_INCOMPATIBLE_TOTAL,
    TRANSPORT_FRAMES_TOTAL,
    TRANSPORT_BYTES_TOTAL,
    TRANSPORT_CONNECTIONS,
    TRANSPORT_REFUSED_TOTAL,
    TRANSPORT_TLS_FAILURES_TOTAL,
    TRANSPORT_TLS_HANDSHAKES_TOTAL,
    TLS_RELOADS_TOTAL,
    TLS_RELOAD_FAILURES_TOTAL,
    OUTBOUND_QUEUE_OVERFLOW_TOTAL,
    SHARDING_DROPPED_TOTAL,
    SHARDING_DELIVERED_TOTAL,
    SHARDING_LANE_HANDLERS_TOTAL,
    SHARDING_ENTITIES,
    SHARDING_SHARDS,
    SHARDING_BUFFERED,
    SHARDING_UNHEARD_REGIONS,
    SHARDING_KIND_NOT_STARTED_ANSWERS_TOTAL,
    ENTITY_FAILURES_TOTAL,
    JOURNAL_WRITES_TOTAL,
    JOURNAL_BATCHES_TOTAL,
    LEASE_ACQUISITIONS_TOTAL,
    LEASE_LOSSES_TOTAL,
    LEASE_RENEWAL_FAILURES_TOTAL,
    SHARDS_TAKEN_OVER_TOTAL,
    SELF_FENCES_TOTAL,
    SBR_DECISIONS_TOTAL,
    SBR_LEASE_REQUESTS_TOTAL,
    HTTP_REQUESTS_TOTAL,
    HTTP_REQUEST_DURATION_SECONDS,
    HTTP_REFUSED_TOTAL,
    BOOTSTRAP_PROBES_TOTAL,
    BOOTSTRAP_LOOKUPS_TOTAL,
    BOOTSTRAP_CONTACT_POINTS,
];

/// Why the recorder could not be installed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum MetricsError {
    /// Another (non-shardik) metrics recorder owns the process-wide slot.
    #[error(
        "another metrics recorder is already installed in this process ({0}); shardik's \
         /metrics route needs its Prometheus recorder: do not install a different one, or run \
         without the metrics handle"
    )]
    OtherRecorderInstalled(String),
}

/// Entry point for installing the process-wide recorder.
#[cfg(feature = "metrics")]
pub struct Metrics;

/// The outcome of the one installation attempt per process. `metrics` allows a single global
/// recorder for the life of the process, so every later call (a second node in a test, say)
/// shares the first one's recorder instead of failing.
#[cfg(feature = "metrics")]
static INSTALLED: OnceLock<Result<MetricsHandle, MetricsError>> = OnceLock::new();

#[cfg(feature = "metrics")]
impl Metrics {
    /// Installs the Prometheus recorder as the process-wide recorder (once; later calls return
    /// a handle to the same recorder) and registers the metric descriptions.
    pub fn install() -> Result<MetricsHandle, MetricsError> {
        INSTALLED
            .get_or_init(|| {
                let recorder = PrometheusBuilder::new().build_recorder();
                let handle = MetricsHandle {
                    inner: recorder.handle(),
                };
                metrics::set_global_recorder(recorder)
                    .map_err(|e| MetricsError::OtherRecorderInstalled(e.to_string()))?;
                describe_all();
                Ok(handle)
            })
            .clone()
    }
}

/// A handle that renders the installed recorder's metrics.
#[cfg(feature = "metrics")]
#[derive(Clone, Debug)]
pub struct MetricsHandle {
    inner: PrometheusHandle,
}

/// Without the `metrics` feature there is no recorder to render, so no handle can exist: the
/// management API's `/metrics` then answers that metrics are not recorded.
#[cfg(not(feature = "metrics"))]
#[derive(Clone, Debug)]
pub enum MetricsHandle {}

impl MetricsHandle {
    /// The current metrics in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        #[cfg(feature = "metrics")]
        return self.inner.render();
        #[cfg(not(feature = "metrics"))]
        match *self {}
    }
}

/// Registers help text and units for every metric shardik emits (shown as `# HELP` lines).
pub fn describe_all() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        MEMBERS,
        Unit::Count,
        "Cluster members by status, as this node sees them."
    );
    describe_gauge!(
        RUNTIME_WORKER_THREADS,
        Unit::Count,
        "Worker threads of the async runtime this node runs on (runtime.worker-threads)."
    );
    describe_gauge!(
        UNREACHABLE_MEMBERS,
        Unit::Count,
        "Members this node considers unreachable."
    );
    describe_gauge!(
        CLUSTER_PREPARING_FOR_SHUTDOWN,
        Unit::Count,
        "1 once this node has seen the cluster prepare for a full shutdown."
    );
    describe_counter!(
        GOSSIP_SENT_TOTAL,
        Unit::Count,
        "Gossip messages sent, by kind (status or full)."
    );
    describe_counter!(
        GOSSIP_RECEIVED_TOTAL,
        Unit::Count,
        "Gossip messages received."
    );
    describe_counter!(
        GOSSIP_BYTES_TOTAL,
        Unit::Bytes,
        "Gossip bytes sent and received, by direction."
    );
    describe_counter!(
        HEARTBEATS_SENT_TOTAL,
        Unit::Count,
        "Failure-detector heartbeats sent."
    );
    describe_counter!(
        HEARTBEAT_BYTES_TOTAL,
        Unit::Bytes,
        "Heartbeat bytes sent and received, by direction."
    );
    describe_gauge!(PHI, "Phi-accrual suspicion level of each monitored node.");
    describe_counter!(
        DROPPED_MESSAGES_TOTAL,
        Unit::Count,
        "Messages dropped, by reason. Every drop is counted here and logged."
    );
    describe_counter!(
        JOIN_INCOMPATIBLE_TOTAL,
        Unit::Count,
        "Joiners whose configuration differed from this member's, refused or let in."
    );
    describe_counter!(
        TRANSPORT_FRAMES_TOTAL,
        Unit::Count,
        "Transport frames, by direction and lane (control or user)."
    );
    describe_counter!(
        TRANSPORT_BYTES_TOTAL,
        Unit::Bytes,
        "Transport bytes, by direction and lane (control or user)."
    );
    describe_gauge!(
        TRANSPORT_CONNECTIONS,
        Unit::Count,
        "Open transport connections."
    );
    describe_counter!(
        TRANSPORT_REFUSED_TOTAL,
        Unit::Count,
        "Transport connections refused or closed for misbehaving, by reason."
    );
    describe_counter!(
        TRANSPORT_TLS_FAILURES_TOTAL,
        Unit::Count,
        "Failed TLS handshakes between nodes, by direction and reason."
    );
    describe_counter!(
        TRANSPORT_TLS_HANDSHAKES_TOTAL,
        Unit::Count,
        "TLS sessions established between nodes, by direction."
    );
    describe_counter!(
        TLS_RELOADS_TOTAL,
        Unit::Count,
        "Changed TLS certificate, key or CA files loaded for new connections."
    );
    describe_counter!(
        TLS_RELOAD_FAILURES_TOTAL,
        Unit::Count,
        "Changed TLS files that could not be loaded (the previous ones stay in use), once per change."
    );
    describe_counter!(
        OUTBOUND_QUEUE_OVERFLOW_TOTAL,
        Unit::Count,
        "Outbound messages dropped because the lane's queue was full."
    );
    describe_counter!(
        LEASE_ACQUISITIONS_TOTAL,
        Unit::Count,
        "Leases this node took."
    );
    describe_counter!(
        LEASE_LOSSES_TOTAL,
        Unit::Count,
        "Leases this node held and lost, by reason (refused by the store, or expired)."
    );
    describe_counter!(
        SHARDS_TAKEN_OVER_TOTAL,
        Unit::Count,
        "Shards taken from a silent member once the store said their leases had lapsed."
    );
    describe_counter!(
        LEASE_RENEWAL_FAILURES_TOTAL,
        Unit::Count,
        "Lease renewals that failed (store error or timeout)."
    );
    describe_counter!(
        SELF_FENCES_TOTAL,
        Unit::Count,
        "Times a region stopped its shards for want of a majority (self-fence)."
    );
    describe_counter!(
        SBR_DECISIONS_TOTAL,
        Unit::Count,
        "Split-brain resolver decisions this node acted on, by decision."
    );
    describe_counter!(
        SBR_LEASE_REQUESTS_TOTAL,
        Unit::Count,
        "Lease-majority lease requests, by result (granted, refused, failed)."
    );
    describe_counter!(
        HTTP_REQUESTS_TOTAL,
        Unit::Count,
        "Management API requests answered, by route template, method and status."
    );
    describe_histogram!(
        HTTP_REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time to answer a management API request, by route template and method."
    );
    describe_counter!(
        HTTP_REFUSED_TOTAL,
        Unit::Count,
        "Connections and requests the management port refused, by reason."
    );
    describe_counter!(
        BOOTSTRAP_PROBES_TOTAL,
        Unit::Count,
        "Cluster bootstrap's probes of contact points, by result."
    );
    describe_counter!(
        BOOTSTRAP_LOOKUPS_TOTAL,
        Unit::Count,
        "Cluster bootstrap's discovery lookups, by result (ok or failed)."
    );
    describe_gauge!(
        BOOTSTRAP_CONTACT_POINTS,
        Unit::Count,
        "Contact points cluster bootstrap's last successful lookup found."
    );
}
