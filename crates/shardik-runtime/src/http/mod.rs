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
//!
//! This file is the module's map. `api.rs` ([`ManagementApi`]) lays the routes out,
//! `handlers.rs` answers them, `answer.rs` words the `{"message": ...}` answers every part
//! gives; the JSON bodies live in the crate's `management_json`, which bootstrap's probes read
//! too.

mod answer;
mod api;
mod client_certificate;
mod guard;
mod handlers;
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
pub use api::{ManagementApi, router};
pub use client_certificate::ClientCertificate;
pub use guard::{GuardRefusal, MIN_TOKEN_LENGTH, WriteGuard};
pub use handlers::PROMETHEUS_CONTENT_TYPE;
pub(crate) use management_server::{BoundManagement, ManagementServer};
pub use observe::{REFUSAL_LOG_INTERVAL, Refusal, UNMATCHED_ROUTE};
pub use reserve::HEALTH_CHECK_RESERVE;
pub use serve::{
    ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN, HEALTH_CHECK_HEAD_TIMEOUT, HttpLimits, serve,
    serve_https, serve_with,
};
