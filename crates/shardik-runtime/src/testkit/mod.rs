//! Testing an application's entities: one event-sourced entity run command by command
//! without a node ([`EventSourcedTestKit`]), and a cluster of real nodes in the test's own
//! process ([`TestCluster`]), on ports the OS picks and with timers short enough for a test,
//! in one call.
//!
//! The nodes are the ones an application runs (the same builder, transport, membership and
//! sharding), talking TCP over loopback: a test through them exercises what production runs,
//! serialization included.

mod cluster;
mod event_sourced;
mod ports;

pub use cluster::{TestCluster, TestClusterError};
pub use event_sourced::{CommandResult, EventSourcedTestKit, TestKitError};
pub use ports::free_port;
