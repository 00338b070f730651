//! Cluster sharding on a running node: entity kinds, regions, entity refs.
//!
//! [`Sharding::start`] attaches sharding to a [`RunningNode`](crate::node::RunningNode): it
//! takes the node's inbound user traffic and dispatches it to the entity kinds registered
//! with [`Sharding::init`]. Each kind runs in one task per node (see `kind.rs`), which drives
//! the core's `KindNode` (region, coordinator while hosted here) and owns the kind's entities.
//!
//! This file holds only the module's map and what it exports. The node's side is `config.rs`
//! ([`ShardingConfig`]), `init_error.rs` ([`StartError`], [`InitError`]), `inner.rs` (the state
//! the handles share), `handle.rs` ([`Sharding`]: attaching, look-ups, shutdown), `init.rs`
//! (registering a kind), `cluster_stats.rs` and `inbound.rs` (frames from other nodes); the
//! user's side is `api/` and `entity_ref.rs` ([`EntityRegion`], [`EntityRef`]).
//!
//! Module dependencies run one way only (each file uses only those listed before it):
//! `strategy` → `api` → `config`, `init_error` → `messages`, `pending` (asks and answers) →
//! `resolve` → `reply_to`, `remember` → `handlers` → `allocation` → `kind` → `entity_ref` →
//! `inner` → `inbound` → `handle` → `init`, `cluster_stats` → `keepalive` → `singleton`,
//! `daemon`. `api` (what users write against) needs only the strategy types, never the kind's
//! task; the messages the task receives live in `messages` so that senders need not know the
//! task.
//! What runs when among a kind's entities is the core's (`shardik_core::sharding::entities`);
//! `handlers` runs it. The singleton and the daemon process are built on the public sharding
//! API of this module, like a user's code would be.

mod allocation;
mod api;
mod cluster_stats;
mod config;
mod daemon;
mod entity_ref;
mod handle;
mod handlers;
mod held_back;
mod inbound;
mod init;
mod init_error;
mod inner;
mod keepalive;
mod kind;
mod leases;
mod local_queue;
mod messages;
mod outgoing;
mod pending;
mod remember;
mod remember_settings;
mod reply_to;
mod resolve;
mod singleton;
mod strategy;

pub(crate) use api::done_or_panic;
pub use api::{
    AskError, Cbor, Codec, CodecError, Entity, EntityContext, EntityFailure, EntityKind,
    EntityTypeKey, Postcard, ShardExtractor, ShardingError, SyncEntity, TellError,
};
pub use cluster_stats::{ClusterShardingStats, NotHosted};
pub use config::ShardingConfig;
pub use daemon::{DaemonSettings, ShardedDaemonProcess, WorkerRef};
pub use entity_ref::{EntityRef, EntityRegion};
pub use handle::Sharding;
pub use held_back::HeldBackKind;
pub use init_error::{InitError, StartError};
pub use keepalive::{ManagedInitError, ManagedRef};
pub use leases::LeaseHealth;
pub use messages::RegionState;
pub use remember_settings::EntityRecovery;
pub(crate) use reply_to::round_trip;
pub use reply_to::{DetachedAnswer, ReplyTo};
pub use shardik_core::sharding::{
    AllocationSnapshot, EntityId, RegionEntry, ShardAllocationStrategy, ShardId,
};
pub use singleton::{ClusterSingleton, OldestUpStrategy, SingletonRef, SingletonSettings};
pub use strategy::{AsyncShardAllocationStrategy, StrategyFuture};
