//! A node: the driver task that owns the membership core (`driver.rs`: [`start`],
//! [`RunningNode`]), the handle through which everything else observes and steers it
//! ([`handle`]), the work it does on its way out ([`exit`]), waiting for it to become Up
//! ([`member_up`]), running it as a process until a signal ([`process`]), and why it could
//! not start (`start_error.rs`: [`StartError`]).
//!
//! This folder is the layer that sharding, the management API and cluster bootstrap stand
//! on; [`Node`](crate::cluster_node::Node), which starts all of them together, stands above them in
//! `cluster_node.rs`.

mod driver;
pub mod exit;
pub mod handle;
pub mod member_up;
pub mod process;
pub(crate) mod start_error;

pub use driver::{
    NodeOptions, RunningNode, StopRequest, random_uid, snapshot_of, start, start_with_sbr_lease,
    transport_config,
};
pub use start_error::StartError;
