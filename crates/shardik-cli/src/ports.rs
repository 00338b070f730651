//! Free loopback ports for the demo and the benchmarks: the runtime's
//! [`free_port`](shardik_runtime::testkit::free_port), below the kernel's ephemeral range, so
//! that no outbound connection takes a node's port between its pick and its bind.

pub use shardik_runtime::testkit::free_port;
