//! The tokio runtime of shardik: TCP transport between nodes, the driver that feeds the
//! I/O-free protocol cores, cluster sharding, configuration, the management HTTP API and
//! metrics.
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
//! use shardik_runtime::config::Settings;
//! use shardik_runtime::node::{self, NodeOptions};
//! use shardik_runtime::sharding::{Entity, EntityContext, EntityKind, Sharding, ShardingConfig};
//!
//! #[derive(Serialize, Deserialize)]
//! enum Cmd {
//!     Add(u64),
//!     Get,
//! }
//!
//! #[derive(Default)]
//! struct Counter(u64);
//!
//! impl Entity for Counter {
//!     type Command = Cmd;
//!     type Reply = u64;
//!     async fn handle(&mut self, cmd: Cmd, _ctx: &mut EntityContext) -> u64 {
//!         if let Cmd::Add(n) = cmd {
//!             self.0 += n;
//!         }
//!         self.0
//!     }
//! }
//!
//! # async fn run() -> anyhow::Result<()> {
//! // Configuration: built-in defaults, then an optional file, then SHARDIK_* variables.
//! let settings = Settings::load(None)?;
//! let mut running = node::start(NodeOptions {
//!     bind: "127.0.0.1:2552".parse()?,
//!     seeds: vec!["127.0.0.1:2552".parse()?], // the first seed forms the cluster
//!     membership: settings.membership_config(),
//!     transport: node::transport_config(&settings.transport),
//!     leave_timeout: Duration::from_secs(30),
//! })
//! .await?;
//! // Sharding takes the node's user traffic.
//! let (_, none) = tokio::sync::mpsc::channel(1);
//! let sharding = Sharding::start(
//!     running.handle.clone(),
//!     running.self_node.clone(),
//!     std::mem::replace(&mut running.user_messages, none),
//!     running.user_sender.clone(),
//!     ShardingConfig::from_settings(&settings),
//! );
//! // A region on nodes with the kind's role, a proxy elsewhere.
//! let counters = sharding.init(EntityKind::new("counter", |_id| Counter::default()))?;
//! let counter = counters.entity_ref("counter-42");
//! counter.tell(Cmd::Add(2))?;
//! let value = counter.ask(Cmd::Get, Duration::from_secs(5)).await?;
//! assert_eq!(value, 2);
//! // Before leaving: hand every shard off, then leave the cluster.
//! sharding.shutdown().await;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod handle;
pub mod health;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod node;
pub mod sharding;
pub mod transport;

pub use handle::{ControlCommand, ControlError, MembershipSnapshot, NodeHandle, UnreachableMember};
