//! [`ManagementApi`]: the management API of one node, built step by step, and the table of
//! its routes (which handler answers which path and method, and which of them the write
//! guard protects); [`router`] builds it in one call with the reference settings.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{delete, get, post, put};
use shardik_config::{Settings, ShardingHealthCheckSettings};

use super::answer::{method_not_allowed, not_found};
use super::guard::WriteGuard;
use super::handlers::{
    AppState, alive, delete_member, get_member, get_members, get_shards, metrics_route,
    post_members, put_cluster, put_member, ready, seed_nodes,
};
use crate::health::ShardingHealthCheck;
use crate::metrics::MetricsHandle;
use crate::node::handle::NodeHandle;
use crate::sharding::Sharding;

/// The management API of one node, built step by step: what it answers from (the node's
/// handle, metrics, sharding) and the settings that shape its answers. Without
/// [`settings`](Self::settings), the reference defaults apply.
///
/// ```no_run
/// # fn f(handle: shardik_runtime::NodeHandle, settings: &shardik_runtime::config::Settings,
/// #      sharding: shardik_runtime::sharding::Sharding) {
/// let router = shardik_runtime::http::ManagementApi::new(handle)
///     .settings(settings)
///     .sharding(sharding)
///     .router();
/// # }
/// ```
pub struct ManagementApi {
    handle: NodeHandle,
    metrics: Option<MetricsHandle>,
    guard: WriteGuard,
    sharding: Option<Sharding>,
    health_check: ShardingHealthCheckSettings,
    query_timeout: Duration,
}

impl ManagementApi {
    /// The API over `handle`, with the reference settings (read-only), no metrics and no
    /// sharding.
    pub fn new(handle: NodeHandle) -> Self {
        let reference = Settings::reference();
        let sharding = reference.cluster.sharding;
        ManagementApi {
            handle,
            metrics: None,
            guard: WriteGuard::read_only(),
            sharding: None,
            health_check: sharding.healthcheck,
            query_timeout: sharding.shard_region_query_timeout,
        }
    }

    /// Takes the write guard (`management.http.route-providers-read-only` and
    /// `auth-token-file`, whose file is read here), `cluster.sharding.healthcheck` and
    /// `cluster.sharding.shard-region-query-timeout` from `settings`.
    ///
    /// This cannot fail: a token file that cannot be used leaves every state-changing route
    /// refused (403) and logs why. To stop at start instead, build the guard with
    /// [`WriteGuard::from_settings`] first and pass it to [`write_guard`](Self::write_guard),
    /// as `shardik node` does.
    pub fn settings(mut self, settings: &Settings) -> Self {
        self.guard = match WriteGuard::from_settings(&settings.management.http) {
            Ok(guard) => guard,
            Err(e) => {
                tracing::error!(error = %e, "management API: state-changing routes refused");
                WriteGuard::read_only()
            }
        };
        self.health_check = settings.cluster.sharding.healthcheck.clone();
        self.query_timeout = settings.cluster.sharding.shard_region_query_timeout;
        self
    }

    /// Serves `/metrics` from `metrics` (404 without).
    pub fn metrics(mut self, metrics: Option<MetricsHandle>) -> Self {
        self.metrics = metrics;
        self
    }

    /// With `true`, the state-changing routes answer 403; with `false`, they are open to
    /// anyone who can connect, without a token (see [`write_guard`](Self::write_guard) for
    /// one).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.guard = if read_only {
            WriteGuard::read_only()
        } else {
            WriteGuard::open()
        };
        self
    }

    /// Who may use the state-changing routes.
    pub fn write_guard(mut self, guard: WriteGuard) -> Self {
        self.guard = guard;
        self
    }

    /// Answers `/cluster/shards/{type}` and the sharding part of `/ready` from `sharding`.
    pub fn sharding(mut self, sharding: Sharding) -> Self {
        self.sharding = Some(sharding);
        self
    }

    /// The sharding part of `/ready` (`cluster.sharding.healthcheck`).
    pub fn sharding_health_check(mut self, settings: ShardingHealthCheckSettings) -> Self {
        self.health_check = settings;
        self
    }

    /// How long `/cluster/shards/{type}` waits for this node's region and for each other
    /// region's statistics (`cluster.sharding.shard-region-query-timeout`).
    pub fn shard_region_query_timeout(mut self, timeout: Duration) -> Self {
        self.query_timeout = timeout;
        self
    }

    /// The routes.
    pub fn router(self) -> Router {
        let guard = self.guard;
        let state = AppState {
            handle: self.handle,
            metrics: self.metrics,
            sharding: self.sharding,
            health: Arc::new(ShardingHealthCheck::new(self.health_check)),
            query_timeout: self.query_timeout,
        };
        Router::new()
            .route(
                "/cluster/members",
                get(get_members).merge(guard.protect(post(post_members))),
            )
            .route(
                "/cluster/members/{address}",
                get(get_member).merge(guard.protect(put(put_member).merge(delete(delete_member)))),
            )
            .route("/cluster", guard.protect(put(put_cluster)))
            .route("/cluster/shards/{type}", get(get_shards))
            .route("/ready", get(ready))
            .route("/bootstrap/seed-nodes", get(seed_nodes))
            .route("/alive", get(alive))
            .route("/metrics", get(metrics_route))
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .with_state(state)
    }
}

/// The management routes over `handle`, with the reference settings otherwise (see
/// [`ManagementApi`] to pass the node's settings). `/metrics` answers 404 without a metrics
/// handle; with `read_only` the state-changing routes answer 403 (without, they are open to
/// anyone who can connect); `/cluster/shards/{type}`
/// answers from `sharding` (404 for every type without it).
pub fn router(
    handle: NodeHandle,
    metrics: Option<MetricsHandle>,
    read_only: bool,
    sharding: Option<Sharding>,
) -> Router {
    let api = ManagementApi::new(handle)
        .metrics(metrics)
        .read_only(read_only);
    match sharding {
        Some(sharding) => api.sharding(sharding),
        None => api,
    }
    .router()
}
