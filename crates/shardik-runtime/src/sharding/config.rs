//! A node's sharding settings (`cluster.sharding`): the core's [`ShardingSettings`], read from
//! the configuration by [`Settings::node_settings`](shardik_config::Settings::node_settings),
//! the one mapping the simulator uses too.

/// The sharding settings of a node, under the name this crate has always given them.
pub use shardik_core::node::ShardingSettings as ShardingConfig;
