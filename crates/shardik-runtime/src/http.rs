//! The management HTTP API, following Akka Management's routes and JSON field names so that
//! existing habits and scripts carry over.
//!
//! | route | answer |
//! |---|---|
//! | `GET /cluster/members` | the membership as this node sees it |
//! | `GET /cluster/members/{address}` | one member, or 404 |
//! | `PUT /cluster/members/{address}` | form field `operation=Leave\|Down` |
//! | `DELETE /cluster/members/{address}` | leave |
//! | `GET /cluster/shards/{type}` | shard region state (404 until sharding exists) |
//! | `GET /ready` | 200 when this node is Up or WeaklyUp, else 503 |
//! | `GET /alive` | 200 while the process serves HTTP |
//! | `GET /metrics` | Prometheus text |
//!
//! Addresses are `host:port` (IPv6 hosts in brackets). Every error answer is JSON with a
//! `message` field, so scripts can rely on one shape.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;

use axum::Json;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use shardik_core::membership::{Address, CommandError, Member, UniqueAddress};

use crate::handle::{ControlError, MembershipSnapshot, NodeHandle};
use crate::metrics::MetricsHandle;
use crate::sharding::Sharding;

/// The content type of the Prometheus text exposition format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// `GET /cluster/members` (Akka Management's `ClusterMembers`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMembers {
    /// This node, `host:port`.
    pub self_node: String,
    /// All members.
    pub members: Vec<ClusterMember>,
    /// Unreachable members and their observers.
    pub unreachable: Vec<ClusterUnreachableMember>,
    /// The leader, if any.
    pub leader: Option<String>,
    /// The oldest member, if any.
    pub oldest: Option<String>,
    /// The oldest member per role.
    pub oldest_per_role: BTreeMap<String, String>,
}

/// One member (Akka Management's `ClusterMember`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMember {
    /// `host:port`.
    pub node: String,
    /// The incarnation uid, as a decimal string (a JSON number would lose precision above
    /// 2^53 in JavaScript and many JSON tools).
    pub node_uid: String,
    /// `Joining`, `WeaklyUp`, `Up`, `Leaving`, `Exiting`, `Down`, …
    pub status: String,
    /// The member's roles.
    pub roles: Vec<String>,
}

/// One unreachable member (Akka Management's `ClusterUnreachableMember`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUnreachableMember {
    /// `host:port`.
    pub node: String,
    /// The members that observe it as unreachable, `host:port`.
    pub observed_by: Vec<String>,
}

/// A JSON answer that is only a message (all error answers have this shape).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// What happened, or what went wrong and what to do.
    pub message: String,
}

impl ClusterMember {
    fn from_member(m: &Member) -> Self {
        ClusterMember {
            node: m.addr.address.to_string(),
            node_uid: m.addr.uid.to_string(),
            status: m.status.as_str().to_string(),
            roles: m.roles.iter().cloned().collect(),
        }
    }
}

impl ClusterMembers {
    /// The JSON view of a snapshot.
    pub fn from_snapshot(s: &MembershipSnapshot) -> Self {
        let node = |u: &UniqueAddress| u.address.to_string();
        ClusterMembers {
            self_node: node(&s.self_node),
            members: s.members.iter().map(ClusterMember::from_member).collect(),
            unreachable: s
                .unreachable
                .iter()
                .map(|u| ClusterUnreachableMember {
                    node: node(&u.node),
                    observed_by: u.observed_by.iter().map(node).collect(),
                })
                .collect(),
            leader: s.leader.as_ref().map(node),
            oldest: s.oldest.as_ref().map(node),
            oldest_per_role: s
                .oldest_per_role
                .iter()
                .map(|(role, u)| (role.clone(), node(u)))
                .collect(),
        }
    }
}

#[derive(Clone)]
struct AppState {
    handle: NodeHandle,
    metrics: Option<MetricsHandle>,
    read_only: bool,
    sharding: Option<Sharding>,
}

/// The management routes over `handle`. `/metrics` answers 404 without a metrics handle;
/// with `read_only` the state-changing routes answer 405; `/cluster/shards/{type}` answers
/// from `sharding` (404 for every type without it).
pub fn router(
    handle: NodeHandle,
    metrics: Option<MetricsHandle>,
    read_only: bool,
    sharding: Option<Sharding>,
) -> Router {
    let state = AppState {
        handle,
        metrics,
        read_only,
        sharding,
    };
    Router::new()
        .route("/cluster/members", get(get_members))
        .route(
            "/cluster/members/{address}",
            get(get_member).put(put_member).delete(delete_member),
        )
        .route("/cluster/shards/{type}", get(get_shards))
        .route("/ready", get(ready))
        .route("/alive", get(alive))
        .route("/metrics", get(metrics_route))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` completes, then finishes the requests in
/// flight and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

fn message(status: StatusCode, text: impl Into<String>) -> Response {
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
    if s.read_only {
        return read_only_refusal();
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
    if s.read_only {
        return read_only_refusal();
    }
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

fn read_only_refusal() -> Response {
    let mut response = message(
        StatusCode::METHOD_NOT_ALLOWED,
        "state-changing routes are disabled by `management.http.route-providers-read-only = \
         true`; set it to false to leave or down members through this API",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET"));
    response
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
            format!("no shard region for entity type [{entity_type}] on this node"),
        )
    };
    let Some(sharding) = &s.sharding else {
        return not_found();
    };
    if !sharding.kinds().contains(&entity_type) {
        return not_found();
    }
    let Some(state) = sharding
        .region_state(&entity_type, std::time::Duration::from_secs(3))
        .await
    else {
        return message(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the shard region for [{entity_type}] did not answer within 3 s"),
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
        .cluster_stats(&entity_type, std::time::Duration::from_secs(3))
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

async fn ready(State(s): State<AppState>) -> Response {
    let snapshot = s.handle.snapshot();
    if snapshot.is_ready() {
        return Json(serde_json::json!({ "status": "ready" })).into_response();
    }
    let status = snapshot
        .self_status
        .map(|st| st.as_str())
        .unwrap_or("not a member");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(serde_json::json!({
            "status": "not-ready",
            "message": format!("this node is {status}; it is ready once Up or WeaklyUp"),
        })),
    )
        .into_response()
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

async fn not_found(uri: axum::http::Uri) -> Response {
    message(
        StatusCode::NOT_FOUND,
        format!(
            "no route for {}; the routes are /cluster/members, /cluster/members/{{address}}, \
             /cluster/shards/{{type}}, /ready, /alive and /metrics",
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
