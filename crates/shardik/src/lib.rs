//! Cluster sharding for Rust.
//!
//! You address a stateful object (a user, a cart, a device) by id; the cluster decides which
//! machine runs it, keeps at most one live copy, moves it when machines join or leave, and
//! passivates idle ones to bound memory. Add this crate alone: it re-exports what an
//! application writes against, durable entities included ([`persistence`]), and the extension
//! points (allocation strategies, [`Codec`]s, [`persistence::Store`]s). The layers underneath
//! are reachable through [`advanced`], without a stability promise.
//!
//! # Example
//!
//! One node that forms a cluster by itself, a sharded counter, a tell and an ask, and a
//! graceful leave (this example runs as a test):
//!
//! ```
//! use std::time::Duration;
//!
//! use serde::{Deserialize, Serialize};
//! use shardik::{Entity, EntityContext, EntityKind, EntityTypeKey, Node, ReplyTo, Settings};
//!
//! #[derive(Serialize, Deserialize)]
//! enum Cmd {
//!     Add(u64),
//!     // Asked: each command that answers carries where its answer goes, of its own type.
//!     Get(ReplyTo<u64>),
//!     IsEven(ReplyTo<bool>),
//! }
//!
//! #[derive(Default)]
//! struct Counter(u64);
//!
//! impl Entity for Counter {
//!     type Command = Cmd;
//!     async fn handle(&mut self, cmd: Cmd, _ctx: &mut EntityContext<Self>) {
//!         match cmd {
//!             Cmd::Add(n) => self.0 += n,
//!             Cmd::Get(reply_to) => reply_to.send(self.0),
//!             Cmd::IsEven(reply_to) => reply_to.send(self.0 % 2 == 0),
//!         }
//!     }
//! }
//!
//! const COUNTER: EntityTypeKey<Counter> = EntityTypeKey::new("counter");
//!
//! # #[tokio::main]
//! # async fn main() -> anyhow::Result<()> {
//! # let port = shardik::testkit::free_port()?;
//! let address: shardik::Address = format!("127.0.0.1:{port}").parse()?;
//! // Built-in defaults, then an optional TOML file, then SHARDIK_* environment variables.
//! let mut settings = Settings::load(None)?;
//! # settings.cluster.seed_node_timeout = Duration::from_millis(300);
//! # settings.cluster.periodic_tasks_initial_delay = Duration::from_millis(50);
//! # settings.cluster.gossip_interval = Duration::from_millis(100);
//! # settings.cluster.leader_actions_interval = Duration::from_millis(100);
//! // A node with sharding, in one call; the first seed forms the cluster.
//! let node = Node::builder(settings)
//!     .bind(address.clone())
//!     .seeds([address])
//!     .start()
//!     .await?;
//! node.wait_until_up().await?;                     // fails if the node stops before it joins
//! node.sharding().init(EntityKind::for_key(COUNTER, |_id| Counter::default()))?;
//! // From anywhere that has the node's sharding: a reference by typed key and entity id.
//! let counter = node.sharding().entity_ref_for(COUNTER, "counter-42")?;
//! counter.tell(Cmd::Add(2)).await?; // waits while the region's queue is full
//! counter.try_tell(Cmd::Add(3))?; // fails at once instead
//! // ask builds the command around a ReplyTo and waits for what the entity sends through it.
//! let value = counter.ask(Cmd::Get, Duration::from_secs(10)).await?;
//! assert_eq!(value, 5);
//! let even = counter.ask(Cmd::IsEven, Duration::from_secs(10)).await?;
//! assert!(!even);
//! // Hand the shards off, leave the cluster, wait until the node is out.
//! assert_eq!(node.leave().await, shardik::ShutdownReason::Left);
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//!
//! The defaults are what a first program needs; the rest is opt-in, so that a program compiles
//! only what it uses. Configuration that needs a feature left out stops the node at start with
//! an error naming the feature.
//!
//! - `sqlite` (default): `sqlite:PATH` stores, the default `persistence.store`.
//! - `logging` (default): `NodeBuilder::logging`, text or JSON lines on stderr.
//! - `postgres`: `postgres://` stores.
//! - `management`: `NodeBuilder::management`, the management HTTP API (Akka Management's
//!   routes, health checks, the application's routes beside them) and cluster bootstrap.
//! - `metrics`: `NodeBuilder::metrics`, Prometheus metrics on the management API's `/metrics`.
//! - `dns`: discovery over DNS records for cluster bootstrap.
//! - `full`: all of the above.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use shardik_runtime::facade::*;

/// The README's Rust listings, compiled as doctests, so that what a newcomer copies from it
/// builds (those that start a node are compiled, not run).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeListings;

/// The listings of the guide's chapter 1, a first sharded entity, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/01-first-entity.md")]
pub struct GuideFirstEntity;

/// The listings of the guide's chapter 2, durable entities, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/02-durable-entities.md")]
pub struct GuideDurableEntities;

/// The listings of the guide's chapter 3, configuration, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/03-configuration.md")]
pub struct GuideConfiguration;

/// The listings of the guide's chapter 4, several nodes, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/04-several-nodes.md")]
pub struct GuideSeveralNodes;

/// The listings of the guide's chapter 5, operations, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/05-operations.md")]
pub struct GuideOperations;

/// The listings of the guide's chapter 6, how handlers run, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/06-execution-model.md")]
pub struct GuideExecutionModel;

/// The library listing of the guide's chapter 7, testing, compiled as a doctest; its test
/// files are compiled and run in a project of their own (`tests/fresh_project.rs`).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/07-testing.md")]
pub struct GuideTesting;

/// The listing of the guide's chapter 8, reliable delivery, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/08-reliable-delivery.md")]
pub struct GuideReliableDelivery;

/// Everything underneath the curated surface, for what it leaves out: the runtime's modules
/// ([`advanced::runtime`]: transport, node driver, management API, metrics, TLS, bootstrap)
/// and the I/O-free protocol cores ([`advanced::core`]). Reachable so that nothing a program
/// needs is locked away, but **not covered by this crate's semver promise**: names here may
/// change in any release. If you need something from here, please open an issue: it may
/// belong in the curated surface.
pub mod advanced {
    pub use shardik_core as core;
    pub use shardik_runtime as runtime;
}
