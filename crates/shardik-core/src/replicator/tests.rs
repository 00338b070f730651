//! The replicator core's tests.

mod consistency;
mod network;
mod pruning;
mod replication;
