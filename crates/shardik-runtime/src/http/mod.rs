//! The management HTTP API, following Akka Management's routes and JSON field names so that
//! existing habits and scripts carry over.
//!
//! | route | answer |
//! |---|---|
//! | `GET /cluster/members` | the membership as this node sees it |
//! | `POST /cluster/members` | form field `address=HOST:PORT`: join the cluster through it |
//! | `GET /cluster/members/{address}` | one member, or 404 |
//! | `PUT /cluster/members/{address}` | form field `operation=Leave\|Down` |
//! | `DELETE /cluster/members/{address}` | leave |
//! | `PUT /cluster` | form field `operation=PrepareForFullClusterShutdown`: prepare the whole cluster for a full shutdown |
//! | `GET /cluster/shards/{type}` | shard region state (404 until sharding exists) |
//! | `GET /ready` | 200 when this node is Up or WeaklyUp and sharding is ready, else 503 |
//! | `GET /alive` | 200 while the process serves HTTP |
//! | `GET /metrics` | Prometheus text |
//! | `GET /bootstrap/seed-nodes` | Cluster Bootstrap's contact point: this node's view of whom to join |
//!
//! Addresses are `host:port` (IPv6 hosts in brackets). Every error answer is JSON with a
//! `message` field, so scripts can rely on one shape.
//!
//! The state-changing routes (POST, PUT, DELETE) are behind a [`WriteGuard`]: 403 unless
//! `management.http.route-providers-read-only = false`, then 401 without the bearer token of
//! `management.http.auth-token-file` if one is set, unless the connection presented a client
//! certificate from the cluster's CA on a port serving TLS (see `guard`). [`serve_with`]
//! bounds the port (header-read timeout, connection cap with a reserve for `/alive` and
//! `/ready`, body limit; see `serve`) and records every request and refusal (see `observe`);
//! [`serve_https`] does the same over TLS (`management.http.tls.*`, see `https`), handing the
//! verified client certificate to the guard as a [`ClientCertificate`].
//!
//! [`router`] builds the routes from four arguments; [`ManagementApi`] also takes the
//! settings that shape the answers (`cluster.sharding.healthcheck` for `/ready`,
//! `cluster.sharding.shard-region-query-timeout` for `/cluster/shards/{type}`).

mod client_certificate;
mod guard;
#[cfg(feature = "tls")]
mod https;
mod management_server;
mod observe;
mod reserve;
mod serve;

pub use crate::management_json::{
    ClusterMember, ClusterMembers, ClusterUnreachableMember, MAX_EXPOSED_SEED_NODES, Message,
    SeedNodes,
};
pub use client_certificate::ClientCertificate;
pub use guard::{GuardRefusal, MIN_TOKEN_LENGTH, WriteGuard};
pub(crate) use management_server::{BoundManagement, ManagementServer};
pub use observe::{REFUSAL_LOG_INTERVAL, Refusal, UNMATCHED_ROUTE};
pub use reserve::HEALTH_CHECK_RESERVE;
pub use serve::{
    ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN, HEALTH_CHECK_HEAD_TIMEOUT, HttpLimits, serve,
    serve_https, serve_with,
};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use serde::Deserialize;
use shardik_config::{Settings, ShardingHealthCheckSettings};
use shardik_core::membership::{Address, CommandError};

use crate::health::ShardingHealthCheck;
use crate::metrics::MetricsHandle;
use crate::node::handle::{ControlError, NodeHandle};
use crate::sharding::Sharding;

/// The content type of the Prometheus text exposition format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

#[derive(Clone)]
struct AppState {
    handle: NodeHandle,
    metrics: Option<MetricsHandle>,
    sharding: Option<Sharding>,
    health: Arc<ShardingHealthCheck>,
    query_timeout: Duration,
}

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

/// A JSON `{"message": text}` answer with `status`.
pub(crate) fn message(status: StatusCode, text: impl Into<String>) -> Response {
    (
        status,
        Json(Message {
            message: text.into(),
        }),
    )
        .into_response()
}

/// A refusal: status plus message, turned into a JSON `{"message": ...}` answer. Small, so
/// that `Result<_, ApiError>` stays cheap (a whole `Response` is not).
struct ApiError {
    status: StatusCode,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        message(self.status, self.message)
    }
}

/// Parses the `{address}` path segment, or refuses with 400.
fn parse_address(raw: &str) -> Result<Address, ApiError> {
    raw.parse::<Address>().map_err(|e| ApiError {
        status: StatusCode::BAD_REQUEST,
        message: format!(
            "malformed member address [{raw}]: {e}; write it as host:port, e.g. \
             127.0.0.1:2552, as listed by GET /cluster/members"
        ),
    })
}

/// A form refused for its size: the 413 (`serve` words it) rather than a missing field.
fn body_too_large<T>(form: &Result<T, FormRejection>) -> Option<Response> {
    match form {
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            Some(StatusCode::PAYLOAD_TOO_LARGE.into_response())
        }
        _ => None,
    }
}

fn member_not_found(address: &Address) -> Response {
    message(
        StatusCode::NOT_FOUND,
        format!("Member [{address}] not found"),
    )
}

async fn get_members(State(s): State<AppState>) -> Response {
    Json(ClusterMembers::from_snapshot(&s.handle.snapshot())).into_response()
}

async fn get_member(State(s): State<AppState>, Path(raw): Path<String>) -> Response {
    let address = match parse_address(&raw) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let snapshot = s.handle.snapshot();
    match snapshot.member_at(&address) {
        Some(m) => Json(ClusterMember::from_member(m)).into_response(),
        None => member_not_found(&address),
    }
}

#[derive(Debug, Deserialize)]
struct JoinForm {
    address: Option<String>,
}

const JOIN_HELP: &str = "set the form field `address` to the host:port of a cluster member, \
     e.g. address=127.0.0.1:2552 (this node's own address starts a new cluster)";

/// `POST /cluster/members` (Akka Management's join route): joins the cluster through
/// `address`. Answers `Joining HOST:PORT` once the attempt has started (the node is a member
/// when `GET /cluster/members` lists it Up); 409 if this node already joined or is joining.
async fn post_members(
    State(s): State<AppState>,
    Query(query): Query<BTreeMap<String, String>>,
    form: Result<Form<JoinForm>, FormRejection>,
) -> Response {
    if let Some(refusal) = body_too_large(&form) {
        return refusal;
    }
    // The form body is the documented way; `?address=` is accepted too, as for PUT.
    let raw = match form {
        Ok(Form(JoinForm { address: Some(a) })) => a,
        _ => match query.get("address") {
            Some(a) => a.clone(),
            None => {
                return message(
                    StatusCode::BAD_REQUEST,
                    format!("missing form field `address`: {JOIN_HELP}"),
                );
            }
        },
    };
    let address = match raw.trim().parse::<Address>() {
        Ok(a) => a,
        Err(e) => {
            return message(
                StatusCode::BAD_REQUEST,
                format!("malformed address [{raw}]: {e}; {JOIN_HELP}"),
            );
        }
    };
    match s.handle.join(address.clone()).await {
        Ok(()) => message(StatusCode::OK, format!("Joining {address}")),
        Err(ControlError::Refused(CommandError::AlreadyJoining)) => {
            let status = s
                .handle
                .snapshot()
                .self_status
                .map_or("joining a cluster", |st| st.as_str());
            message(
                StatusCode::CONFLICT,
                format!(
                    "cannot join {address}: this node already joined a cluster or is joining \
                     one (it is {status}); a node joins once, so to move it to another \
                     cluster make it leave and start it again"
                ),
            )
        }
        Err(e) => control_error(&address, e),
    }
}

#[derive(Debug, Deserialize)]
struct OperationForm {
    operation: Option<String>,
}

#[derive(Clone, Copy, Debug)]
enum Operation {
    Leave,
    Down,
}

const OPERATION_HELP: &str = "set the form field `operation` to `Leave` or `Down`";

async fn put_member(
    State(s): State<AppState>,
    Path(raw): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    form: Result<Form<OperationForm>, FormRejection>,
) -> Response {
    if let Some(refusal) = body_too_large(&form) {
        return refusal;
    }
    let address = match parse_address(&raw) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    // The form body is the documented way; `?operation=` is accepted too, for clients that
    // cannot easily send a body with PUT.
    let operation = match form {
        Ok(Form(OperationForm {
            operation: Some(op),
        })) => Some(op),
        _ => query.get("operation").cloned(),
    };
    let operation = match operation.as_deref() {
        Some(op) if op.eq_ignore_ascii_case("leave") => Operation::Leave,
        Some(op) if op.eq_ignore_ascii_case("down") => Operation::Down,
        Some(other) => {
            return message(
                StatusCode::BAD_REQUEST,
                format!("unknown operation [{other}]: {OPERATION_HELP}"),
            );
        }
        None => {
            return message(
                StatusCode::BAD_REQUEST,
                format!("missing operation: {OPERATION_HELP}"),
            );
        }
    };
    change_member(&s, address, operation).await
}

async fn delete_member(State(s): State<AppState>, Path(raw): Path<String>) -> Response {
    match parse_address(&raw) {
        Ok(address) => change_member(&s, address, Operation::Leave).await,
        Err(e) => e.into_response(),
    }
}

async fn change_member(s: &AppState, address: Address, operation: Operation) -> Response {
    // Checked here as well as by the node, so that a typo gets Akka Management's answer
    // without a round trip through the driver.
    if s.handle.snapshot().member_at(&address).is_none() {
        return member_not_found(&address);
    }
    let (result, verb) = match operation {
        Operation::Leave => (s.handle.leave(address.clone()).await, "Leaving"),
        Operation::Down => (s.handle.down(address.clone()).await, "Downing"),
    };
    match result {
        Ok(()) => message(StatusCode::OK, format!("{verb} {address}")),
        Err(e) => control_error(&address, e),
    }
}

fn control_error(address: &Address, error: ControlError) -> Response {
    match error {
        ControlError::Refused(CommandError::UnknownMember(_)) => member_not_found(address),
        ControlError::Refused(e) => message(
            StatusCode::CONFLICT,
            format!("the node refused the request for {address}: {e}"),
        ),
        ControlError::NodeStopped => message(
            StatusCode::SERVICE_UNAVAILABLE,
            "the node is shutting down and no longer takes membership changes",
        ),
        e @ ControlError::Timeout(_) => message(
            StatusCode::GATEWAY_TIMEOUT,
            format!("{e}; it may be overloaded, try again"),
        ),
    }
}

/// What `PUT /cluster` can be asked to do (Akka Management's cluster-wide operations).
const CLUSTER_OPERATION_HELP: &str = "set the form field `operation` to `PrepareForFullClusterShutdown`, the only operation on /cluster";

/// `PUT /cluster` with `operation=PrepareForFullClusterShutdown` (Akka Management's route):
/// every Up member prepares for a full cluster shutdown (see
/// [`NodeHandle::prepare_for_full_cluster_shutdown`]). Asking again changes nothing and
/// answers the same.
async fn put_cluster(
    State(s): State<AppState>,
    Query(query): Query<BTreeMap<String, String>>,
    form: Result<Form<OperationForm>, FormRejection>,
) -> Response {
    if let Some(refusal) = body_too_large(&form) {
        return refusal;
    }
    let operation = match form {
        Ok(Form(OperationForm {
            operation: Some(op),
        })) => Some(op),
        _ => query.get("operation").cloned(),
    };
    match operation.as_deref() {
        Some(op) if op.eq_ignore_ascii_case("PrepareForFullClusterShutdown") => {}
        Some(other) => {
            return message(
                StatusCode::BAD_REQUEST,
                format!("unknown operation [{other}]: {CLUSTER_OPERATION_HELP}"),
            );
        }
        None => {
            return message(
                StatusCode::BAD_REQUEST,
                format!("missing operation: {CLUSTER_OPERATION_HELP}"),
            );
        }
    }
    match s.handle.prepare_for_full_cluster_shutdown().await {
        Ok(()) => message(StatusCode::OK, "Preparing for full cluster shutdown"),
        Err(ControlError::Refused(e)) => message(
            StatusCode::CONFLICT,
            format!("the node refused to prepare for a full cluster shutdown: {e}"),
        ),
        Err(ControlError::NodeStopped) => message(
            StatusCode::SERVICE_UNAVAILABLE,
            "the node is shutting down and no longer takes membership changes",
        ),
        Err(e @ ControlError::Timeout(_)) => message(
            StatusCode::GATEWAY_TIMEOUT,
            format!("{e}; it may be overloaded, try again"),
        ),
    }
}

/// `GET /cluster/shards/{type}`: Akka Management's answer for this node's region
/// (`regions`: each shard with `shardId` and `numEntities`), plus `selfNode`, the entity ids
/// per shard (`shards`), whether the region is registered with its coordinator, and the
/// cluster-wide statistics (`cluster.regions` per node, `cluster.failed` for nodes that did not
/// answer in time).
async fn get_shards(State(s): State<AppState>, Path(entity_type): Path<String>) -> Response {
    let not_found = || {
        message(
            StatusCode::NOT_FOUND,
            format!(
                "no shard region for entity type [{entity_type}] on this node: the application \
                 never called sharding().init for it here"
            ),
        )
    };
    let Some(sharding) = &s.sharding else {
        return not_found();
    };
    if !sharding.kinds().contains(&entity_type) {
        return not_found();
    }
    let Some(state) = sharding.region_state(&entity_type, s.query_timeout).await else {
        return message(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the shard region for [{entity_type}] did not answer within {} \
                 (`cluster.sharding.shard-region-query-timeout`)",
                humantime::format_duration(s.query_timeout)
            ),
        );
    };
    let regions: Vec<serde_json::Value> = state
        .shards
        .iter()
        .map(|(shard, ids)| serde_json::json!({"shardId": shard.to_string(), "numEntities": ids.len()}))
        .collect();
    let shards: Vec<serde_json::Value> = state
        .shards
        .iter()
        .map(|(shard, ids)| {
            serde_json::json!({
                "shardId": shard.to_string(),
                "entityIds": ids.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let cluster = sharding
        .cluster_stats(&entity_type, s.query_timeout)
        .await
        .unwrap_or_default();
    let cluster_regions: Vec<serde_json::Value> = cluster
        .regions
        .iter()
        .map(|(node, shards)| {
            serde_json::json!({
                "node": node,
                "shards": shards
                    .iter()
                    .map(|(s, n)| serde_json::json!({"shardId": s.to_string(), "numEntities": n}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    Json(serde_json::json!({
        "selfNode": sharding.self_node().address.to_string(),
        "regions": regions,
        "shards": shards,
        "registered": state.registered,
        "buffered": state.buffered,
        "cluster": {"regions": cluster_regions, "failed": cluster.failed},
    }))
    .into_response()
}

/// `GET /ready`: the membership check (Up or WeaklyUp), then the sharding check
/// (`cluster.sharding.healthcheck`, see [`ShardingHealthCheck`]). A 503 says what is missing;
/// for sharding, `notReadyKinds` lists each kind with the reason. Either way,
/// `allocationHeldBack` lists the kinds whose coordinator on this node waits for silent
/// members (see [`Sharding::allocation_held_back`]).
async fn ready(State(s): State<AppState>) -> Response {
    let snapshot = s.handle.snapshot();
    if !snapshot.is_ready() {
        let status = snapshot
            .self_status
            .map(|st| st.as_str())
            .unwrap_or("not a member");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({
                "status": "not-ready",
                "message": format!("this node is {status}; it is ready once Up or WeaklyUp"),
            })),
        )
            .into_response();
    }
    let failing_leases = s
        .sharding
        .as_ref()
        .map(|sh| sh.failing_leases())
        .unwrap_or_default();
    if !failing_leases.is_empty() {
        // A shard whose lease cannot be taken or renewed refuses commands (or will, at its
        // deadline): traffic is better sent to nodes that can run it.
        let first = failing_leases
            .iter()
            .next()
            .map(|(lease, error)| format!("{lease}: {error}"))
            .unwrap_or_default();
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({
                "status": "not-ready",
                "message": format!(
                    "the store of {} lease(s) this node holds or wants is failing (first: {first})",
                    failing_leases.len()
                ),
                "failingLeases": failing_leases,
            })),
        )
            .into_response();
    }
    // Not a reason to take this node out of service (the wait is cluster-wide, and the shards
    // already placed keep working), but worth seeing wherever readiness is looked at.
    let held_back = s
        .sharding
        .as_ref()
        .map(|sh| sh.allocation_held_back())
        .unwrap_or_default();
    let with_held_back = |mut body: serde_json::Value| {
        if !held_back.is_empty() {
            body["allocationHeldBack"] = serde_json::json!(held_back);
        }
        body
    };
    match s.health.check(&snapshot, s.sharding.as_ref()).await {
        Ok(()) => Json(with_held_back(serde_json::json!({ "status": "ready" }))).into_response(),
        Err(kinds) => {
            let list = kinds
                .iter()
                .map(|k| format!("[{}]: {}", k.kind, k.reason))
                .collect::<Vec<_>>()
                .join("; ");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(with_held_back(serde_json::json!({
                    "status": "not-ready",
                    "message": format!(
                        "sharding is not ready for {} of the kinds named in \
                         `cluster.sharding.healthcheck.names`: {list}",
                        kinds.len()
                    ),
                    "notReadyKinds": kinds,
                }))),
            )
                .into_response()
        }
    }
}

/// `GET /bootstrap/seed-nodes`: read-only, open like `/ready` (it says no more than
/// `/cluster/members`).
async fn seed_nodes(State(s): State<AppState>) -> Response {
    Json(SeedNodes::from_snapshot(&s.handle.snapshot())).into_response()
}

async fn alive() -> Response {
    Json(serde_json::json!({ "status": "alive" })).into_response()
}

async fn metrics_route(State(s): State<AppState>) -> Response {
    match &s.metrics {
        Some(m) => (
            [(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)],
            m.render(),
        )
            .into_response(),
        None => message(
            StatusCode::NOT_FOUND,
            "metrics are not enabled on this node",
        ),
    }
}

pub(crate) async fn not_found(uri: axum::http::Uri) -> Response {
    message(
        StatusCode::NOT_FOUND,
        format!(
            "no route for {}; the routes are /cluster/members, /cluster/members/{{address}}, \
             /cluster/shards/{{type}}, /ready, /alive, /metrics and /bootstrap/seed-nodes",
            uri.path()
        ),
    )
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    message(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
}
