//! Sharding on top of membership, simulated whole: every node of a membership [`World`]
//! runs the real sharding cores (a [`ShardingView`] fed from its own membership state, a
//! [`Region`] per entity kind, the [`Coordinator`] while it hosts it) and a model of the
//! entities, over a sharding network with the world's latency, partitions, pauses and crashes.
//! Simulated clients send numbered messages; a [`ShardingChecker`] watches every event.
//!
//! * [`config`]: settings, mapped from the shipped configuration with timers short enough for
//!   tests;
//! * [`node`]: one node's sharding layer and the entity model;
//! * [`messages`]: what the parts exchange (client messages, their events, what nodes send
//!   each other, what a node reports to the world);
//! * [`net`]: the sharding network (FIFO per ordered pair of nodes);
//! * [`traffic`]: the client generator and the ledger of every message's fate;
//! * [`checker`]: the invariants;
//! * [`durable`], [`store`], [`durability`]: durable entities (commands that persist events
//!   to a store with crash points, through the runtime's journal core) and their invariants;
//! * [`reliable`], [`producer`], [`delivery_checker`]: reliable delivery to the durable
//!   entities (producers with durable queues on some nodes, the core's producer and consumer
//!   decisions as the runtime drives them) and its invariants (exactly once, in order);
//! * [`cluster`]: [`ShardingWorld`], which ties them to the membership world;
//! * [`scale`]: a large cluster (1 000 nodes, 10 000 shards) through formation, a rolling
//!   restart and a partition, timed in simulated time.
//!
//! [`World`]: crate::world::World
//! [`ShardingView`]: shardik_core::sharding::ShardingView
//! [`Region`]: shardik_core::sharding::Region
//! [`Coordinator`]: shardik_core::sharding::Coordinator

pub mod checker;
pub mod cluster;
pub mod config;
pub mod delivery_checker;
pub mod durability;
pub mod durable;
pub mod entities;
mod life;
pub mod messages;
pub mod net;
pub mod node;
pub mod producer;
pub mod reliable;
pub mod scale;
pub mod store;
pub mod traffic;

pub use checker::ShardingChecker;
pub use cluster::{HostEvent, ShardingWorld};
pub use config::{
    FAST_LEASE_OVERRIDES, FAST_OVERRIDES, KindSpec, ShardingConfig, fast_leases, fast_membership,
    fast_settings, fast_world, handoff_mode_toml, world_with,
};
pub use delivery_checker::{DeliveryChecker, ReliableStats};
pub use durability::DurabilityChecker;
pub use durable::{CrashPoints, DurableSpec};
pub use entities::EntitySpec;
pub use messages::{EventRec, SimMsg};
pub use node::ShardNode;
pub use reliable::ReliableSpec;
pub use store::StoreStats;
pub use traffic::{Ledger, SentRecord, TrafficConfig, entity_name};
