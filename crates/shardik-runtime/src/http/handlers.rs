//! The route handlers: what each route of the management API reads from or asks of the
//! node (its handle, sharding, metrics), the forms the state-changing routes take, and the
//! refusals they answer with (Akka Management's wording and status codes). Which route runs
//! which handler is `api.rs`; the JSON bodies are the crate's `management_json`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use shardik_core::membership::{Address, CommandError};

use super::answer::message;
use crate::health::ShardingHealthCheck;
use crate::management_json::{ClusterMember, ClusterMembers, SeedNodes};
use crate::metrics::MetricsHandle;
use crate::node::handle::{ControlError, NodeHandle};
use crate::sharding::Sharding;

/// The content type of the Prometheus text exposition format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// What every handler answers from, made once by [`ManagementApi::router`](super::ManagementApi::router).
#[derive(Clone)]
pub(super) struct AppState {
    pub(super) handle: NodeHandle,
    pub(super) metrics: Option<MetricsHandle>,
    pub(super) sharding: Option<Sharding>,
    pub(super) health: Arc<ShardingHealthCheck>,
    pub(super) query_timeout: Duration,
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

pub(super) async fn get_members(State(s): State<AppState>) -> Response {
    Json(ClusterMembers::from_snapshot(&s.handle.snapshot())).into_response()
}

pub(super) async fn get_member(State(s): State<AppState>, Path(raw): Path<String>) -> Response {
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

/// The form of `POST /cluster/members`.
#[derive(Debug, Deserialize)]
pub(super) struct JoinForm {
    address: Option<String>,
}

const JOIN_HELP: &str = "set the form field `address` to the host:port of a cluster member, \
     e.g. address=127.0.0.1:2552 (this node's own address starts a new cluster)";

/// `POST /cluster/members` (Akka Management's join route): joins the cluster through
/// `address`. Answers `Joining HOST:PORT` once the attempt has started (the node is a member
/// when `GET /cluster/members` lists it Up); 409 if this node already joined or is joining.
pub(super) async fn post_members(
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

/// The form of `PUT /cluster/members/{address}` and `PUT /cluster`.
#[derive(Debug, Deserialize)]
pub(super) struct OperationForm {
    operation: Option<String>,
}

#[derive(Clone, Copy, Debug)]
enum Operation {
    Leave,
    Down,
}

const OPERATION_HELP: &str = "set the form field `operation` to `Leave` or `Down`";

pub(super) async fn put_member(
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

pub(super) async fn delete_member(State(s): State<AppState>, Path(raw): Path<String>) -> Response {
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
pub(super) async fn put_cluster(
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
pub(super) async fn get_shards(
    State(s): State<AppState>,
    Path(entity_type): Path<String>,
) -> Response {
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
pub(super) async fn ready(State(s): State<AppState>) -> Response {
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
pub(super) async fn seed_nodes(State(s): State<AppState>) -> Response {
    Json(SeedNodes::from_snapshot(&s.handle.snapshot())).into_response()
}

pub(super) async fn alive() -> Response {
    Json(serde_json::json!({ "status": "alive" })).into_response()
}

pub(super) async fn metrics_route(State(s): State<AppState>) -> Response {
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
