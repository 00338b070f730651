//! The tokio runtime of shardik: TCP transport between nodes, the driver that feeds the
//! I/O-free protocol cores, configuration, the management HTTP API and metrics.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod handle;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod node;
pub mod sharding;
pub mod transport;

pub use handle::{ControlCommand, ControlError, MembershipSnapshot, NodeHandle, UnreachableMember};
