//! The tokio runtime of shardik: the driver that feeds the I/O-free protocol cores, cluster
//! sharding, configuration, the management HTTP API and metrics, over the TCP transport and
//! TLS of `shardik-transport` (re-exported as [`transport`] and [`tls`]).
//!
//! # Example: a sharded counter
//!
//! An entity is a plain Rust value with a typed command and reply; the cluster creates it on its
//! first message, runs it on exactly one node, and moves it when nodes join or leave.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use serde::{Deserialize, Serialize};
//! use shardik_runtime::Node;
//! use shardik_runtime::config::Settings;
//! use shardik_runtime::sharding::{Entity, EntityContext, EntityKind, EntityTypeKey, ReplyTo};
//!
//! #[derive(Serialize, Deserialize)]
//! enum Cmd {
//!     Add(u64),
//!     Get(ReplyTo<u64>),
//! }
//!
//! #[derive(Default)]
//! struct Counter(u64);
//!
//! const COUNTER: EntityTypeKey<Counter> = EntityTypeKey::new("counter");
//!
//! impl Entity for Counter {
//!     type Command = Cmd;
//!     async fn handle(&mut self, cmd: Cmd, _ctx: &mut EntityContext<Self>) {
//!         match cmd {
//!             Cmd::Add(n) => self.0 += n,
//!             Cmd::Get(reply_to) => reply_to.send(self.0),
//!         }
//!     }
//! }
//!
//! # async fn run() -> anyhow::Result<()> {
//! // Configuration: built-in defaults, then an optional file, then SHARDIK_* variables.
//! let settings = Settings::load(None)?;
//! // A node with sharding, joined through its seed nodes (the first seed forms the cluster).
//! let node = Node::builder(settings)
//!     .bind("127.0.0.1:2552".parse()?)
//!     .seeds(["127.0.0.1:2552".parse()?])
//!     .start()
//!     .await?;
//! // A region on nodes with the kind's role, a proxy elsewhere.
//! node.sharding().init(EntityKind::for_key(COUNTER, |_id| Counter::default()))?;
//! // From anywhere that has the node's sharding: a reference by typed key and id.
//! let counter = node.sharding().entity_ref_for(COUNTER, "counter-42")?;
//! counter.tell(Cmd::Add(2)).await?;
//! let value = counter.ask(Cmd::Get, Duration::from_secs(5)).await?;
//! assert_eq!(value, 2);
//! // Hand every shard off, leave the cluster, and wait until the node is out.
//! node.leave().await;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "management")]
pub mod bootstrap;
mod cbor;
mod cluster_node;
pub mod delivery;
pub mod discovery;
pub mod facade;
// The sharding health check the management API serves (`/ready`).
#[cfg(feature = "management")]
mod health;
#[cfg(feature = "management")]
pub mod http;
pub mod lease;
#[cfg(feature = "logging")]
pub mod logging;
// The management API's JSON bodies, shared by its routes (`http`) and bootstrap's probes.
#[cfg(feature = "management")]
mod management_json;
pub mod metrics;
pub mod node;
pub mod persistence;
pub mod sbr_lease;
pub mod sharding;
mod task;
pub mod testkit;
pub mod transport;

// Rate-limited logging and TLS between nodes, where they always were (`shardik_runtime::tls`,
// `shardik_runtime::log_limit`): shardik-transport's, whose readers and writers use them first.
pub use shardik_transport::{log_limit, tls};

/// The node's configuration (`shardik-config`), where it always was: `shardik_runtime::config`.
pub use shardik_config as config;

#[cfg(feature = "management")]
pub use cluster_node::NoManagementApi;
pub use cluster_node::{Node, NodeBuilder};
pub use node::member_up::{NotUp, StoppedBeforeUp};

pub use node::handle::{
    ControlCommand, ControlError, MembershipSnapshot, NodeHandle, UnreachableMember,
};
// The node's modules, where they always were (`shardik_runtime::handle`, ...).
pub use node::{exit, handle, member_up, process};
